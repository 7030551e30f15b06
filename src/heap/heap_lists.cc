// take_census (heap/heap_census.h): the object lists of one global_State, walked and validated.
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <optional>
#include <string_view>
#include <thread>
#include <utility>

#include "heap/heap_census.h"
#include "luajit/gg_state.h"

namespace ljprof::heap {

namespace {

// How often a live read reads an object again before refusing it, and the bytes read again: the
// header and the fields its size comes from (all within the first 128 bytes of every type), and
// what a variable-length cdata keeps before it (lj_obj.h GCcdataVar).
constexpr int kRereads = 3;
// How many list links a census reads again at most (Lists::relinked).
constexpr uint32_t kMaxRelinks = 1024;
constexpr uint64_t kObjectBefore = 64, kObjectSpan = 320;

// The part of global_State searched for values the layout does not place (registrytv,
// gcroot[]): global_State is 448..832 bytes in the forks this reads (pahole).
constexpr uint64_t kGlobalScan = 1024;
// lj_obj.h GCROOT_BASEMT_NUM - GCROOT_BASEMT + 1 (~LJ_TNUMX + 1), then IO_INPUT, IO_OUTPUT.
constexpr size_t kGcRootsAfterNames = 14 + 2;
// The string table's anchors are read in pieces of this many bytes.
constexpr uint64_t kStrTabChunk = 64 * 1024;
// The string table's chains are walked side by side (Lists::chains), this many at a time: 72
// bytes each at most (its cursor in two rounds and the sort's copy).
constexpr size_t kHeadsPerBatch = size_t{1} << 20;

// Whether the object at `addr` is the string `text` (a GCstr: len, then the characters after
// the header).
bool is_string(const Memory& mem, uint64_t addr, std::string_view text) {
  const lj_luajit_info& in = mem.info();
  if (mem.get<uint8_t>(addr + in.gc_gct) != static_cast<uint8_t>(Gct::Str)) return false;
  if (mem.get<uint32_t>(addr + in.str_len) != text.size()) return false;
  std::string got(text.size(), '\0');
  return mem.read(addr + in.str_data, got.data(), got.size()) && got == text;
}

bool string_starts(const Memory& mem, uint64_t addr, std::string_view prefix) {
  const lj_luajit_info& in = mem.info();
  if (mem.get<uint8_t>(addr + in.gc_gct) != static_cast<uint8_t>(Gct::Str)) return false;
  auto len = mem.get<uint32_t>(addr + in.str_len);
  std::string got(prefix.size(), '\0');
  return len && *len >= prefix.size() && mem.read(addr + in.str_data, got.data(), got.size()) &&
         got == prefix;
}

// Whether table `t`'s hash part has the string key `key` (lj_tab.c; a bounded scan).
bool table_has_key(const Memory& mem, uint64_t t, std::string_view key) {
  const lj_luajit_info& in = mem.info();
  auto hmask = mem.get<uint32_t>(t + in.tab_hmask);
  auto node = mem.ref(t + in.tab_node);
  if (!hmask || !node || *hmask == 0 || *hmask >= 4096) return false;
  for (uint64_t i = 0; i <= *hmask; ++i) {
    auto raw = mem.get<uint64_t>(*node + i * in.node_size + in.node_key);
    if (!raw) return false;
    auto k = decode_tvalue(*raw, mem.gc64());
    if (k && k->gct == static_cast<uint8_t>(Gct::Str) && is_string(mem, k->addr, key)) return true;
  }
  return false;
}

// registrytv: the table TValue in global_State whose table holds "_LOADED" (lj_lib.c keeps
// package.loaded at registry._LOADED); the fields before it differ between forks.
uint64_t find_registry(const Memory& mem, uint64_t g) {
  for (uint64_t off = 0; off < kGlobalScan; off += 8) {
    auto raw = mem.get<uint64_t>(g + off);
    if (!raw) break;
    auto v = decode_tvalue(*raw, mem.gc64());
    if (v && v->gct == static_cast<uint8_t>(Gct::Tab) && table_has_key(mem, v->addr, "_LOADED")) {
      return v->addr;
    }
  }
  return 0;
}

// g->gcroot[]: found by its first entries, the metamethod names "__index", "__newindex", ...
// (lj_obj.h MMDEF order), then the base metatables and the io handles.
std::vector<uint64_t> find_gc_roots(const Memory& mem, uint64_t g) {
  const uint64_t ref = mem.info().ref_size;
  for (uint64_t off = 0; off < kGlobalScan; off += ref) {
    auto first = mem.ref(g + off);
    if (!first) break;
    if (*first == 0 || !is_string(mem, *first, "__index")) continue;
    auto second = mem.ref(g + off + ref);
    if (!second || !is_string(mem, *second, "__newindex")) continue;
    size_t names = 0;
    for (; names < 64; ++names) {
      auto s = mem.ref(g + off + names * ref);
      if (!s || *s == 0 || !string_starts(mem, *s, "__")) break;
    }
    std::vector<uint64_t> roots;
    for (size_t i = 0; i < names + kGcRootsAfterNames; ++i) {
      auto r = mem.ref(g + off + i * ref);
      if (r && *r != 0) roots.push_back(*r);
    }
    return roots;
  }
  return {};
}

// LSD radix sort on the key's distance from the lowest, 11 bits a pass (2 or 3 passes for a
// heap of a few GiB): a comparison sort of millions of objects took a tenth of the walk. Stable,
// so of two entries of one address the first listed stays first.
template <typename T, typename Key>
void radix_sort(std::vector<T>& items, Key key) {
  constexpr unsigned kDigitBits = 11;
  constexpr size_t kBuckets = size_t{1} << kDigitBits;
  if (items.size() < 2) return;
  uint64_t low = UINT64_MAX, high = 0;
  for (const T& t : items) {
    low = std::min<uint64_t>(low, key(t));
    high = std::max<uint64_t>(high, key(t));
  }
  const unsigned bits = static_cast<unsigned>(std::bit_width(high - low));
  const unsigned passes = (bits + kDigitBits - 1) / kDigitBits;
  if (passes == 0) return;
  // Every pass's counts in one read of the items (a pass's counts do not depend on the order
  // the passes before left).
  std::vector<size_t> start(kBuckets * passes, 0);
  for (const T& t : items) {
    const uint64_t k = key(t) - low;
    for (unsigned p = 0; p < passes; ++p)
      ++start[p * kBuckets + ((k >> (p * kDigitBits)) & (kBuckets - 1))];
  }
  std::vector<T> other(items.size());
  for (unsigned p = 0; p < passes; ++p) {
    const unsigned shift = p * kDigitBits;
    size_t* pass_start = start.data() + p * kBuckets;
    size_t sum = 0;
    for (size_t b = 0; b < kBuckets; ++b) sum += std::exchange(pass_start[b], sum);
    for (const T& t : items) other[pass_start[((key(t) - low) >> shift) & (kBuckets - 1)]++] = t;
    items.swap(other);
  }
}

class Lists {
 public:
  Lists(const Memory& mem, Census& census, SizeContext ctypes, uint64_t cap)
      : mem_(mem), c_(census), ctypes_(ctypes), cap_(cap) {}

  // Adds the object at `addr`, which `list` says is of type `want` (0: any); false when it is
  // refused (counted) and its list must stop. A live read refuses only what is still refused
  // after kRereads fresh reads: a list cut at a young object being written would lose every
  // older object behind it, the roots (_G, the registry, the main thread) among them.
  bool add(uint64_t addr, uint8_t want, const char* list) {
    const std::string why = try_add(addr, want, list);
    return why.empty() || refuse(why);
  }

  // add without counting a refusal: why the object was not added, or "".
  std::string try_add(uint64_t addr, uint8_t want, const char* list) {
    if (full()) {
      return fmt::format("more objects than gc.total can hold ({}): list not followed", cap_);
    }
    std::optional<Object> o;
    std::string why = admit(addr, want, list, o);
    for (int again = 0;
         !why.empty() && again < kRereads && mem_.reread(addr - kObjectBefore, kObjectSpan);
         ++again) {
      why = admit(addr, want, list, o);
      if (why.empty()) ++c_.reread_objects;
    }
    if (!why.empty()) return why;
    c_.objects.push_back(*o);
    // Pages read long ago need not stay resident while the census grows (build_graph does the
    // same): the lists run in allocation order.
    if ((c_.objects.size() & (Memory::kObjectsPerCheckpoint - 1)) == 0) {
      mem_.checkpoint({HeapPass::Census, c_.objects.size(), 0, false});
    }
    return "";
  }

  // The object at `addr` as `list` may hold it (`out`), or why not.
  std::string admit(uint64_t addr, uint8_t want, const char* list, std::optional<Object>& out) {
    const lj_luajit_info& in = mem_.info();
    if (addr > Object::kMaxAddress) return fmt::format("object above 2^48 on {}", list);
    auto gct = mem_.get<uint8_t>(addr + in.gc_gct);
    if (!gct) return fmt::format("unreadable object on {}", list);
    if (*gct < kMinGct || *gct > kMaxGct || (want != 0 && *gct != want)) {
      return fmt::format("type tag not allowed on {}", list);
    }
    auto bytes = object_bytes(mem_, ctypes_, addr, *gct, addr == c_.main_thread);
    if (!bytes.ok() || *bytes > c_.vm_total || *bytes > UINT32_MAX) {
      return fmt::format("{} of impossible size on {}", gct_name(*gct), list);
    }
    out = Object{addr, static_cast<uint32_t>(*bytes), *gct};
    return "";
  }

  // A list linked through GCHeader.nextgc from `first` until 0 (or `stop`). A list that loops
  // is cut where Brent's cycle detection meets it again (within twice its length).
  void chain(uint64_t first, uint8_t want, const char* list, uint64_t stop = 0) {
    if (first == 0 || first == stop) return;
    ChainCursor c{first, first, 0};
    while (step(c, want, list, stop)) {
    }
  }

  // Many lists at once (the string table's chains), a link of each at a time, each round in
  // address order: a round is one sweep through the heap. Link by link in chain order, every
  // second string of a chain was a read somewhere else in the heap, and the core's pages they
  // touched (64 KiB a fault) stayed resident until the next checkpoint: 117 of a 142 MiB core.
  void chains(const std::vector<uint64_t>& firsts, uint8_t want, const char* list) {
    std::vector<ChainCursor> round, next;
    round.reserve(firsts.size());
    for (uint64_t f : firsts) round.push_back({f, f, 0});
    // A round's strings are spread over the whole heap, each a fault of 64 KiB of the core: a
    // checkpoint's worth of them made most of the core resident. The pages behind the sweep are
    // not read again this round: released every kReleaseSpan of addresses swept (every so many
    // strings let a late round, a few strings a MiB, make 300 MiB of a core resident).
    constexpr uint64_t kReleaseSpan = uint64_t{16} << 20;
    while (!round.empty()) {
      radix_sort(round, [](const ChainCursor& c) { return c.at; });
      next.clear();
      uint64_t released_at = round.front().at;
      for (ChainCursor c : round) {
        if (c.at - released_at >= kReleaseSpan) {
          mem_.release();
          released_at = c.at;
        }
        if (step(c, want, list, 0)) next.push_back(c);
      }
      mem_.release();
      round.swap(next);
    }
  }

 private:
  // Where a list walk is: the next object, and Brent's cycle detection (the object it is
  // compared against, moved at every power of two of steps).
  // `prev`: the object whose nextgc led to `at` (0 for the first), read again when `at` is
  // refused in a live read.
  struct ChainCursor {
    uint64_t at = 0, mark = 0, prev = 0;
    uint32_t power = 1, steps = 0;
  };
  // Adds the object at c.at and moves c to the next one; false when the list ends there (at 0
  // or `stop`) or is cut (refused, unreadable, looping: counted).
  bool step(ChainCursor& c, uint8_t want, const char* list, uint64_t stop) {
    if (const std::string why = try_add(c.at, want, list); !why.empty()) {
      // A full census is no link's doing: reading the link again cannot help.
      return !full() && relinked(c) ? c.at != 0 && c.at != stop : refuse(why);
    }
    auto next = mem_.ref(c.at);
    if (!next) return refuse(fmt::format("unreadable nextgc on {}", list));
    c.prev = c.at;
    c.at = *next;
    if (c.at == c.mark) return refuse(fmt::format("{} loops", list));
    if (++c.steps == c.power) {
      c.mark = c.at;
      c.power *= 2;
      c.steps = 0;
    }
    return c.at != 0 && c.at != stop;
  }

  // A live list changes under the read: the collector unlinks dead objects and frees them, so
  // a link read a moment before can lead to memory that is no object any more, however often
  // it is read again. The link itself is read again (kRereads times at most, each after the
  // pause of Memory::reread): when it leads elsewhere now, the walk goes on from there; the
  // object left behind was freed, not malformed. A core never changes: no second read.
  bool relinked(ChainCursor& c) {
    const uint64_t ref = mem_.info().ref_size;
    if (c.prev == 0 || relinks_left_ == 0) return false;
    --relinks_left_;  // a process rewriting its lists faster than they are read ends the walk
    for (int again = 0; again < kRereads && mem_.reread(c.prev, ref); ++again) {
      auto next = mem_.ref(c.prev);
      if (next && *next != c.at) {
        c.at = *next;
        ++c_.reread_objects;
        return true;
      }
    }
    return false;
  }

  bool refuse(const std::string& why) {
    ++c_.malformed[why];
    return false;
  }
  bool full() const { return c_.objects.size() >= cap_; }
  const Memory& mem_;
  Census& c_;
  uint32_t relinks_left_ = kMaxRelinks;
  SizeContext ctypes_;
  uint64_t cap_;
};

Status read_globals(const Memory& mem, uint64_t g, Census& c) {
  const lj_luajit_info& in = mem.info();
  if (in.g_gc_root == 0 || in.g_gc_total == 0 || in.g_strmask == 0) {
    return make_error(
        "the LuaJIT layout has no global_State.gc.root / gc.total / string table (lj_mem_newgco "
        "or GCstr did not match), so the heap cannot be walked");
  }
  uint64_t total = 0;
  if (!mem.read(g + in.g_gc_total, &total, in.ref_size)) {
    return make_error("cannot read g->gc.total at {:#x}", g + in.g_gc_total);
  }
  c.g = g;
  c.vm_total = total;
  // GG_State: the main lua_State right before global_State, proven by its type tag and glref.
  uint64_t L = 0;
  for (uint64_t size : luajit::main_lua_state_sizes(in.ref_size)) {
    if (mem.get<uint8_t>(g - size + in.gc_gct) == static_cast<uint8_t>(Gct::Thread) &&
        mem.ref(g - size + in.L_glref) == g) {
      L = g - size;
      break;
    }
  }
  if (L == 0) {
    return make_error("no main lua_State right before g {:#x} (GG_State) with glref = g", g);
  }
  c.main_thread = L;
  return Ok{};
}

// The string table's chains (`anchors` GCRefs at `strtab`) into `lists`' census `c`.
void walk_string_table(const Memory& mem, Lists& lists, Census& c, uint64_t strtab,
                       uint64_t anchors) {
  // The anchors (GCRefs: 4 bytes without GC64), read in pieces; the low bit of an anchor is
  // upstream's "secondary hash" flag.
  const uint64_t ref = mem.info().ref_size;
  std::vector<uint8_t> piece(std::min<uint64_t>(kStrTabChunk, anchors * ref));
  std::vector<uint64_t> heads;
  auto walk_heads = [&] {
    lists.chains(heads, static_cast<uint8_t>(Gct::Str), "the string table");
    heads.clear();
  };
  for (uint64_t at = 0; at < anchors * ref; at += piece.size()) {
    if (!mem.read(strtab + at, piece.data(), piece.size())) {
      ++c.malformed["unreadable string table"];
      break;
    }
    for (uint64_t i = 0; i < piece.size(); i += ref) {
      uint64_t h = 0;
      std::memcpy(&h, piece.data() + i, ref);
      if ((h & ~uint64_t{1}) != 0) heads.push_back(h & ~uint64_t{1});
    }
    if (heads.size() >= kHeadsPerBatch) walk_heads();
  }
  walk_heads();
}

constexpr auto kByAddress = [](const Object& o) { return o.addr(); };
constexpr auto kAddressLess = [](const Object& a, const Object& b) { return a.addr() < b.addr(); };

// `strings`' objects, sorted, merged into `c`'s, sorted, as one sort of both lists would order
// them (of one address, `c`'s first), and what its walk refused. Over `cap` objects, the
// strings of the highest addresses are dropped (each walk stopped at `cap`, so together they can
// pass it; one thread would have dropped the last strings walked).
void merge_strings(Census& c, Census&& strings, uint64_t cap) {
  std::vector<Object> both;
  both.reserve(c.objects.size() + strings.objects.size());
  std::merge(c.objects.begin(), c.objects.end(), strings.objects.begin(), strings.objects.end(),
             std::back_inserter(both), kAddressLess);
  std::vector<Object>().swap(strings.objects);
  c.objects.swap(both);
  for (const auto& [why, n] : strings.malformed) c.malformed[why] += n;
  c.reread_objects += strings.reread_objects;
  if (c.objects.size() > cap) {
    c.malformed[fmt::format("more objects than gc.total can hold ({}): list not followed", cap)] +=
        c.objects.size() - cap;
    c.objects.resize(cap);
  }
}

}  // namespace

namespace {

// The string table: where its anchors are and how many (a power of two).
struct StringTable {
  uint64_t anchors_at = 0;
  uint64_t anchors = 0;
};

Result<StringTable> read_string_table(const Memory& mem, uint64_t g, Census& c) {
  const lj_luajit_info& in = mem.info();
  auto strtab = mem.get<uint64_t>(g + in.g_strhash);
  auto strmask = mem.get<uint32_t>(g + in.g_strmask);
  auto strnum = mem.get<uint32_t>(g + in.g_strmask + 4);
  const uint64_t anchors = strmask ? uint64_t{*strmask} + 1 : 0;
  if (!strtab || !strmask || !strnum || anchors > CensusLimits::kMaxStrTab ||
      (anchors & (anchors - 1)) != 0) {
    return make_error(
        "g {:#x}: the string table (anchors at {:#x}, mask at {:#x}) is unreadable "
        "or its mask is not 2^n - 1 under 2^26",
        g, g + in.g_strhash, g + in.g_strmask);
  }
  c.strnum = *strnum;
  c.string_table_bytes = anchors * in.ref_size;
  return StringTable{*strtab, anchors};
}

SizeContext size_context(const Memory& mem, uint64_t g, const Census& c) {
  SizeContext ctypes;
  ctypes.lua_state_size = g - c.main_thread;
  if (auto cts = mem.ref(g + mem.info().g_ctype_state); cts && *cts != 0) {
    ctypes.tab = mem.get<uint64_t>(*cts).value_or(0);
    ctypes.top = mem.get<uint32_t>(*cts + 8).value_or(0);
  }
  return ctypes;
}

// Every object of the VM's lists into c.objects, sorted by address (an object on two lists
// twice, the first listed first): gc.root, each thread's open upvalues, the string table,
// gc.mmudata, at most `cap` objects.
void list_objects(const Memory& mem, uint64_t g, Census& c, const SizeContext& ctypes, uint64_t cap,
                  const StringTable& strtab, size_t strings_thread_from) {
  const lj_luajit_info& in = mem.info();
  // A core's string table is walked on a second thread while gc.root is (its objects go after
  // gc.root's and the open upvalues', as one thread lists them): a third of a heap's objects are
  // strings, each a read somewhere else in the heap, and their walk was a fifth of the whole.
  Census strings;  // what admitting an object reads of the census: the VM's total, its main thread
  strings.vm_total = c.vm_total;
  strings.main_thread = c.main_thread;
  Memory strings_mem = mem;
  strings_mem.on_checkpoint(nullptr);  // the progress is gc.root's
  std::thread worker;
  if (mem.threads_allowed() && c.strnum >= strings_thread_from &&
      std::thread::hardware_concurrency() >= 2) {
    worker = std::thread([&strings_mem, &strings, &ctypes, cap, strtab] {
      Lists string_lists(strings_mem, strings, ctypes, cap);
      walk_string_table(strings_mem, string_lists, strings, strtab.anchors_at, strtab.anchors);
      radix_sort(strings.objects, kByAddress);
    });
  }
  Lists lists(mem, c, ctypes, cap);
  lists.chain(mem.ref(g + in.g_gc_root).value_or(0), 0, "gc.root");
  std::vector<uint64_t> threads;
  for (const Object& o : c.objects)
    if (o.gct == static_cast<uint8_t>(Gct::Thread)) threads.push_back(o.addr());
  for (uint64_t L : threads) {
    lists.chain(mem.ref(L + in.L_openupval).value_or(0), static_cast<uint8_t>(Gct::Upval),
                "a thread's open upvalues");
  }
  // The lists' pages go before a sort's second copy of the census comes (the peak of the whole
  // walk otherwise: 105 MiB of pages of a 142 MiB core under 70 MiB of census).
  size_t sorted = 0;  // c.objects[0, sorted) are sorted by address
  if (worker.joinable()) {
    // gc.root's objects sorted while the strings are walked (and then sorted) beside them.
    mem.checkpoint({HeapPass::Census, c.objects.size(), 0, false});
    radix_sort(c.objects, kByAddress);
    worker.join();
    merge_strings(c, std::move(strings), cap);
    sorted = c.objects.size();
  } else {
    walk_string_table(mem, lists, c, strtab.anchors_at, strtab.anchors);
  }
  // g->gc.mmudata points at the last of a circular list (lj_gc.c gc_finalize).
  if (auto last = mem.ref(g + in.g_gc_mmudata); last && *last != 0) {
    if (auto first = mem.ref(*last); first) {
      lists.chain(*first, static_cast<uint8_t>(Gct::Udata), "gc.mmudata", *last);
      lists.add(*last, static_cast<uint8_t>(Gct::Udata), "gc.mmudata");
    }
  }
  mem.checkpoint({HeapPass::Census, c.objects.size(), 0, false});
  if (sorted == 0) {
    radix_sort(c.objects, kByAddress);
  } else if (sorted < c.objects.size()) {  // a few userdata being finalized, after the rest
    auto mid = c.objects.begin() + static_cast<ptrdiff_t>(sorted);
    std::stable_sort(mid, c.objects.end(), kAddressLess);
    std::inplace_merge(c.objects.begin(), mid, c.objects.end(), kAddressLess);
  }
}

// The listed objects each once (counted when listed twice), indexed and summed by type.
void index_objects(Census& c) {
  const size_t before = c.objects.size();
  c.objects.erase(
      std::unique(c.objects.begin(), c.objects.end(),
                  [](const Object& a, const Object& b) { return a.addr() == b.addr(); }),
      c.objects.end());
  if (before != c.objects.size()) c.malformed["object on two lists"] += before - c.objects.size();
  c.objects.shrink_to_fit();  // the census lives as long as the snapshot: no growth slack
  c.address_index = AddressIndex(c.objects);
  for (const Object& o : c.objects) {
    c.types[o.gct].count += 1;
    c.types[o.gct].bytes += o.bytes;
  }
}

}  // namespace

Result<Census> take_census(const Memory& mem, uint64_t g, size_t strings_thread_from) {
  Census c;
  LJ_TRY(read_globals(mem, g, c));
  LJ_ASSIGN_OR_RETURN(const StringTable strtab, read_string_table(mem, g, c));
  // An object takes at least 16 bytes of gc.total (the smallest, a non-GC64 cdata header, 8,
  // plus its payload; strings 17): more objects than that means the lists are not the VM's.
  const uint64_t cap = std::min(CensusLimits::kMaxObjects, c.vm_total / 8 + 1024);
  list_objects(mem, g, c, size_context(mem, g, c), cap, strtab, strings_thread_from);
  index_objects(c);
  c.registry = find_registry(mem, g);
  c.gc_roots = find_gc_roots(mem, g);
  return c;
}

}  // namespace ljprof::heap
