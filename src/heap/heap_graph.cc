// build_graph (heap/heap_graph_internal.h): every object's references, as lj_gc.c's traversal
// functions follow them, restricted to objects of the census (a reference to anything else is
// not followed: it is no object the VM's lists hold).
#include <algorithm>
#include <cstring>
#include <thread>

#include "heap/heap_graph_internal.h"

namespace ljprof::heap {

namespace {

constexpr uint64_t kTValueBytes = 8;
constexpr uint64_t kMaxEdges = UINT32_MAX - 1;
// Reads of arrays (table parts, stacks) go in chunks of this many TValues.
constexpr uint64_t kChunk = 512;

// Where the graph pass puts a reference: its target, while `budget` edges are not reached
// (object_budget, root_budget); past it dropped and counted.
struct TargetSink {
  Graph& g;
  uint64_t budget;
  void add(uint32_t to, EdgeKind, uint32_t) {
    if (g.edges.size() >= budget) {
      ++g.dropped_edges;
      return;
    }
    g.edges.push_back(to);
  }
};

// Where labelled_edges puts one object's references: whole, up to the same budget.
struct LabelSink {
  std::vector<Edge>& edges;
  uint64_t budget;
  void add(uint32_t to, EdgeKind kind, uint32_t aux) {
    if (edges.size() < budget) edges.push_back({to, aux, kind});
  }
};

// An object's references as lj_gc.c follows them, each to `Sink::add(to, kind, aux)`; memory
// that cannot be read counted in `unreadable`.
template <typename Sink>
class EdgeReader {
 public:
  EdgeReader(const Memory& mem, const Census& census, Sink sink, uint64_t& unreadable)
      : mem_(mem), in_(mem.info()), census_(census), sink_(sink), unreadable_(unreadable) {}

  void object(const Object& o) {
    switch (static_cast<Gct>(o.gct)) {
      case Gct::Tab:
        table(o.addr());
        break;
      case Gct::Func:
        function(o.addr());
        break;
      case Gct::Upval:
        upvalue(o.addr());
        break;
      case Gct::Thread:
        thread(o.addr());
        break;
      case Gct::Proto:
        proto(o.addr());
        break;
      case Gct::Udata:
        ref(o.addr() + in_.ud_metatable, EdgeKind::Metatable, 0);
        ref(o.addr() + in_.ud_env, EdgeKind::Env, 0);
        break;
      case Gct::Trace:
        ref(o.addr() + in_.tr_startpt, EdgeKind::TraceProto, 0);
        break;
      case Gct::Str:
      case Gct::Cdata:
        break;
    }
  }

  void roots() {
    const Census& c = census_;
    if (auto env = mem_.ref(c.main_thread + in_.L_env); env) {
      to(*env, EdgeKind::RootGlobals, 0);
    } else {
      ++unreadable_;
    }
    if (c.registry != 0) to(c.registry, EdgeKind::RootRegistry, 0);
    to(c.main_thread, EdgeKind::RootMainThread, 0);
    for (size_t i = 0; i < c.gc_roots.size(); ++i) {
      to(c.gc_roots[i], EdgeKind::RootGcRoot, static_cast<uint32_t>(i));
    }
    for (const Object& o : c.objects) {
      if (o.gct == static_cast<uint8_t>(Gct::Trace)) to(o.addr(), EdgeKind::RootTrace, 0);
    }
    // Userdata queued for finalization are on no other list the census read.
    if (auto last = mem_.ref(c.g + in_.g_gc_mmudata); last && *last != 0) {
      to(*last, EdgeKind::RootFinalizing, 0);
    }
  }

 private:
  // An edge to the object at `addr` when the census holds one there, within the budget.
  void to(uint64_t addr, EdgeKind kind, uint32_t aux) {
    const int64_t i = census_.index_of(addr);
    if (i >= 0) add(static_cast<uint32_t>(i), kind, aux);
  }
  void add(uint32_t to, EdgeKind kind, uint32_t aux) { sink_.add(to, kind, aux); }
  void ref(uint64_t at, EdgeKind kind, uint32_t aux) {
    auto v = mem_.ref(at);
    if (!v) {
      ++unreadable_;
      return;
    }
    if (*v != 0) to(*v, kind, aux);
  }
  void value(uint64_t raw, EdgeKind kind, uint32_t aux) {
    if (auto v = decode_tvalue(raw, mem_.gc64())) to(v->addr, kind, aux);
  }
  // `n` TValues from `at` (n < 2^32: a 32-bit size bounds every such array), each through
  // `each(index, raw)`.
  template <typename F>
  void tvalues(uint64_t at, uint32_t n, F each) {
    for (uint64_t done = 0; done < n;) {
      const uint64_t k = std::min(kChunk, n - done);
      const uint8_t* buf = words(at + done * kTValueBytes, k);
      if (buf == nullptr) {
        ++unreadable_;
        return;
      }
      for (uint64_t i = 0; i < k; ++i) each(static_cast<uint32_t>(done + i), word(buf, i));
      done += k;
    }
  }
  // `count` 8-byte words at `at`: where they lie in the memory's mapped bytes (a core's), read
  // there; else copied into buffer_. nullptr when unreadable. Millions of small tables' hash
  // parts made a copy (a memmove call) each.
  const uint8_t* words(uint64_t at, uint64_t count) {
    if (const uint8_t* in_place = mem_.view(at, count * kTValueBytes)) return in_place;
    buffer_.resize(count);
    if (!mem_.read(at, buffer_.data(), count * kTValueBytes)) return nullptr;
    return reinterpret_cast<const uint8_t*>(buffer_.data());
  }
  static uint64_t word(const uint8_t* words, uint64_t i) {
    uint64_t v = 0;
    std::memcpy(&v, words + i * kTValueBytes, sizeof v);
    return v;
  }

  // lj_gc.c gc_traverse_tab.
  void table(uint64_t t) {
    const uint8_t marked = mem_.get<uint8_t>(t + in_.gc_marked).value_or(0);
    const bool weak_keys = marked & kMarkWeakKey, weak_values = marked & kMarkWeakVal;
    ref(t + in_.tab_metatable, EdgeKind::Metatable, 0);
    const uint32_t asize = mem_.get<uint32_t>(t + in_.tab_asize).value_or(0);
    const uint32_t hmask = mem_.get<uint32_t>(t + in_.tab_hmask).value_or(0);
    if (!weak_values && asize > 0) {
      if (auto array = mem_.ref(t + in_.tab_array)) {
        tvalues(*array, asize,
                [&](uint32_t i, uint64_t raw) { value(raw, EdgeKind::ArraySlot, i); });
      }
    }
    auto node = mem_.ref(t + in_.tab_node);
    if (hmask == 0 || !node) return;
    // A Node is val, key (, next) in node_size bytes: read the nodes as TValue words.
    const uint64_t node_words = static_cast<uint64_t>(in_.node_size) / kTValueBytes;
    const uint64_t key_word = static_cast<uint64_t>(in_.node_key) / kTValueBytes;
    for (uint64_t done = 0, n = uint64_t{hmask} + 1; done < n;) {
      const uint64_t k = std::min(kChunk, n - done);
      const uint8_t* nodes = words(*node + done * in_.node_size, k * node_words);
      if (nodes == nullptr) {
        ++unreadable_;
        return;
      }
      for (uint64_t i = 0; i < k; ++i) {
        const uint64_t val = word(nodes, i * node_words),
                       key = word(nodes, i * node_words + key_word);
        const auto slot = static_cast<uint32_t>(done + i);  // hmask is 32-bit
        if (!is_nil(val)) {
          if (!weak_values) value(val, EdgeKind::HashValue, slot);
          if (!weak_keys) value(key, EdgeKind::HashKey, slot);
        }
      }
      done += k;
    }
  }
  bool is_nil(uint64_t raw) const {
    // LJ_TNIL is ~0u: all ones in GC64 (the whole word), the high word otherwise.
    return mem_.gc64() ? raw == ~uint64_t{0} : (raw >> 32) == 0xffffffffu;
  }

  // lj_gc.c gc_traverse_func.
  void function(uint64_t fn) {
    ref(fn + in_.fn_env, EdgeKind::Env, 0);
    const uint8_t ffid = mem_.get<uint8_t>(fn + in_.fn_ffid).value_or(1);
    const uint8_t n = mem_.get<uint8_t>(fn + in_.fn_nupvalues).value_or(0);
    if (ffid == 0) {
      if (auto pc = mem_.ref(fn + in_.fn_pc); pc && *pc != 0) {
        to(*pc - static_cast<uint64_t>(in_.pt_size), EdgeKind::Prototype, 0);
      }
      for (uint32_t i = 0; i < n; ++i) {
        ref(fn + in_.fn_uvptr + i * in_.ref_size, EdgeKind::Upvalue, i);
      }
    } else {
      tvalues(fn + in_.fn_cupvalue, n,
              [&](uint32_t i, uint64_t raw) { value(raw, EdgeKind::CUpvalue, i); });
    }
  }

  void upvalue(uint64_t uv) {
    // Closed: v points at the upvalue's own TValue; open: into a stack, which the thread marks.
    if (mem_.get<uint8_t>(uv + in_.uv_closed).value_or(0) == 0) return;
    auto v = mem_.ref(uv + in_.uv_v);
    auto raw = v ? mem_.get<uint64_t>(*v) : std::nullopt;
    if (!raw) {
      ++unreadable_;
      return;
    }
    value(*raw, EdgeKind::UpvalueValue, 0);
  }

  // lj_gc.c gc_traverse_thread: the slots above the dummy frame up to top, and env.
  void thread(uint64_t L) {
    ref(L + in_.L_env, EdgeKind::Env, 0);
    // The list has no more links than the census has upvalues (more: it loops).
    uint64_t links = census_.types[static_cast<uint8_t>(Gct::Upval)].count;
    for (auto uv = mem_.ref(L + in_.L_openupval); uv && *uv != 0 && links-- > 0;
         uv = mem_.ref(*uv)) {
      const int64_t i = census_.index_of(*uv);
      if (i < 0) break;
      add(static_cast<uint32_t>(i), EdgeKind::OpenUpvalue, 0);
    }
    auto stack = mem_.ref(L + in_.L_stack);
    auto top = mem_.get<uint64_t>(L + in_.L_top);
    const uint32_t stacksize = mem_.get<uint32_t>(L + in_.L_stacksize).value_or(0);
    if (!stack || !top || *top < *stack || (*top - *stack) / kTValueBytes > stacksize) {
      ++unreadable_;
      return;
    }
    const uint32_t first = 1 + (mem_.gc64() ? 1 : 0);
    const auto slots = static_cast<uint32_t>((*top - *stack) / kTValueBytes);  // <= stacksize
    if (slots <= first) return;
    tvalues(*stack + first * kTValueBytes, slots - first,
            [&](uint32_t i, uint64_t raw) { value(raw, EdgeKind::StackSlot, first + i); });
  }

  // lj_gc.c gc_traverse_proto: the chunk name and the GC constants below k.
  void proto(uint64_t pt) {
    ref(pt + in_.pt_chunkname, EdgeKind::ChunkName, 0);
    auto k = mem_.ref(pt + in_.pt_k);
    const uint32_t n = mem_.get<uint32_t>(pt + in_.pt_sizekgc).value_or(0);
    if (!k || n > (1u << 20)) return;
    for (uint32_t i = 0; i < n; ++i) {
      ref(*k - (i + 1) * static_cast<uint64_t>(in_.ref_size), EdgeKind::Constant, i);
    }
  }

  const Memory& mem_;
  const lj_luajit_info& in_;
  const Census& census_;
  Sink sink_;
  uint64_t& unreadable_;
  // The pieces of arrays and hash parts read (at most kChunk TValues or nodes): kept from object
  // to object, not allocated for each of millions of small tables.
  std::vector<uint64_t> buffer_;
};

// The references an honest heap's objects [begin, end) can hold: a TValue slot or GCRef lies
// inside some object's own bytes, 8 (or 4) bytes each; several objects sharing one array part
// (a hostile core) cannot make more. Edge indexes are 32-bit (Graph::first), and a graph is
// built in at most two parts: a part's edges past 2^31 (over 8 GiB of references) are dropped.
uint64_t object_budget(const Census& census, size_t begin, size_t end) {
  uint64_t bytes = 0;
  for (size_t i = begin; i < end; ++i) bytes += census.objects[i].bytes;
  return std::min<uint64_t>(bytes / 4 + 2 * (end - begin) + 1024, kMaxEdges / 2);
}

// The roots' edges after `edges` others: the globals, registry and main thread, g->gcroot[],
// every trace, the finalizer list.
uint64_t root_budget(const Census& census, uint64_t edges) {
  return std::min<uint64_t>(edges + census.gc_roots.size() + census.objects.size() + 16, kMaxEdges);
}

// The references of census.objects[begin, end) into `part`, whose first[k] is object
// begin + k's first edge (edge indexes from 0 in part.edges). With `report`, calls the memory's
// checkpoint, the objects done scaled to the whole census (the other part runs alongside);
// without, releases the memory's pages as often.
void follow_objects(const Memory& mem, const Census& census, size_t begin, size_t end, Graph& part,
                    bool report) {
  const size_t n = census.objects.size();
  EdgeReader reader(mem, census, TargetSink{part, object_budget(census, begin, end)},
                    part.unreadable_refs);
  part.first.reserve(end - begin + 2);
  for (size_t i = begin; i < end; ++i) {
    part.first.push_back(static_cast<uint32_t>(part.edges.size()));
    reader.object(census.objects[i]);
    // The objects lie in address order: pages read long ago are not wanted soon, and need not
    // be resident while the graph grows.
    const size_t done = i - begin + 1;
    if ((done & (Memory::kObjectsPerCheckpoint - 1)) == 0) {
      if (report) {
        mem.checkpoint({HeapPass::Graph, done * n / (end - begin), n, false});
      } else {
        mem.release();
      }
    }
  }
}

// `upper`'s objects and edges after `g`'s.
void append_part(Graph& g, Graph&& upper) {
  const auto base = static_cast<uint32_t>(g.edges.size());  // both under 2^31
  for (uint32_t f : upper.first) g.first.push_back(base + f);
  g.edges.append(std::move(upper.edges));
  g.unreadable_refs += upper.unreadable_refs;
  g.dropped_edges += upper.dropped_edges;
}

}  // namespace

Graph build_graph(const Memory& mem, const Census& census, size_t two_threads_from) {
  Graph g;
  const size_t n = census.objects.size();
  g.root = static_cast<uint32_t>(n);
  if (mem.threads_allowed() && n >= std::max<size_t>(two_threads_from, 2) &&
      std::thread::hardware_concurrency() >= 2) {
    // The upper half on a second thread, with a Memory of its own (its last run read in place)
    // that reports nothing; every part of the census and the index is only read.
    const size_t half = n / 2;
    Graph upper;
    Memory upper_mem = mem;
    // The upper half releases pages too: the lower half may end first, and its checkpoints with
    // it (the core's pages the upper half went on reading stayed resident to the pass's end).
    upper_mem.on_checkpoint(nullptr);
    std::thread worker([&upper_mem, &census, &upper, half, n] {
      follow_objects(upper_mem, census, half, n, upper, false);
    });
    follow_objects(mem, census, 0, half, g, true);
    worker.join();
    append_part(g, std::move(upper));
  } else {
    follow_objects(mem, census, 0, n, g, true);
  }
  g.first.push_back(static_cast<uint32_t>(g.edges.size()));
  EdgeReader(mem, census, TargetSink{g, root_budget(census, g.edges.size())}, g.unreadable_refs)
      .roots();
  g.first.push_back(static_cast<uint32_t>(g.edges.size()));
  return g;
}

namespace {

template <typename Sink>
void read_edges(const Memory& mem, const Census& census, uint32_t v, Sink sink) {
  uint64_t unreadable = 0;
  EdgeReader reader(mem, census, sink, unreadable);
  if (v == census.objects.size()) {
    reader.roots();
  } else if (v < census.objects.size()) {
    reader.object(census.objects[v]);
  }
}

}  // namespace

std::vector<Edge> labelled_edges(const Memory& mem, const Census& census, uint32_t v) {
  std::vector<Edge> edges;
  if (v < census.objects.size()) {
    // Sized once (a big table's are millions, and a vector doubling to hold them peaks at twice
    // their bytes): an edge comes from a slot of the object's own bytes, a TValue of 8 (a hash
    // node's key and value two in 24); only small objects' 4-byte GCRefs without GC64 (a
    // function's upvalues) can make more, and the vector grows for those.
    const uint64_t budget = object_budget(census, v, v + 1);
    edges.reserve(std::min<uint64_t>(budget, census.objects[v].bytes / 8 + 16));
    read_edges(mem, census, v, LabelSink{edges, budget});
  } else {
    read_edges(mem, census, v, LabelSink{edges, root_budget(census, 0)});
  }
  return edges;
}

}  // namespace ljprof::heap
