// What the heap stage's readers share (internal to src/heap): the LuaJIT object model of lj_obj.h
// that `ljprof heap` reads — type tags, TValue decoding in both GC64 modes, bounded reads of a
// core's (or a live process's) memory through abi/read_mem.h.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>

#include "luajit/gc_types.h"

extern "C" {
#include "abi/luajit_info.h"
#include "abi/read_mem.h"
}

namespace ljprof::heap {

// The type tags (luajit/gc_types.h), by their short names here.
using luajit::Gct;
using luajit::kGctCount;
using luajit::kMaxGct;
using luajit::kMinGct;

// lj_gc.h marked bits this reader looks at.
inline constexpr uint8_t kMarkWeakKey = 0x08;   // LJ_GC_WEAKKEY: set by the last traversal
inline constexpr uint8_t kMarkWeakVal = 0x10;   // LJ_GC_WEAKVAL
inline constexpr uint8_t kMarkCdataVar = 0x80;  // lj_cdata.h cdataisv: a variable-length cdata

// Whether the build interns strings the upstream way since 2020 (ff34b48d, "Redesign and harden
// string interning": GCstr has `sid`, so GCstr.len sits at 20 with GC64 and 16 without); its
// strings are sizeof(GCstr) + ((len + 4) & ~3) bytes (lj_str.h lj_str_size), older ones and
// Tarantool's sizeof(GCstr) + len + 1 (lj_obj.h sizestring).
inline bool upstream_interning(const lj_luajit_info& info) {
  return info.str_len == (info.ref_size == 8 ? 20 : 16);
}

// The name `ljprof heap` shows for a type ("table", "string", ...).
const char* gct_name(uint8_t gct);

// Where a pass over the whole heap is (Memory::checkpoint).
enum class HeapPass : uint8_t {
  Census,  // the GC lists and the string table: objects counted
  Graph,   // each object's references followed
};
struct HeapCheckpoint {
  HeapPass pass = HeapPass::Census;
  uint64_t done = 0;   // objects
  uint64_t total = 0;  // 0 while not known (the census)
  bool end = false;    // the pass is over
};

// Bounded reads of one address space with the build's reference width.
class Memory {
 public:
  Memory(ljprof_mem_reader mem, const lj_luajit_info& info) : mem_(mem), info_(info) {}

  bool read(uint64_t addr, void* out, uint64_t len) const {
    if (const uint8_t* in_place = view(addr, len)) {
      std::memcpy(out, in_place, len);
      return true;
    }
    return len <= UINT32_MAX && mem_.read_mem(mem_.ctx, addr, out, static_cast<uint32_t>(len)) == 0;
  }
  // `len` bytes at `addr` where they can be read in place (a core file's mapped segment, see
  // on_in_place), without a copy; nullptr otherwise (read() them).
  const uint8_t* view(uint64_t addr, uint64_t len) const {
    const uint64_t rel = addr - run_.start;
    if (rel < run_.size && len <= run_.size - rel) return run_.data + rel;
    return view_elsewhere(addr, len);
  }
  template <typename T>
  std::optional<T> get(uint64_t addr) const {
    T v{};
    if (!read(addr, &v, sizeof v)) return std::nullopt;
    return v;
  }
  // A GCRef/MRef: 8 bytes with GC64, else 4 (zero-extended). Each width a read of its own
  // constant size: a copy of a size known only at run time was a call (memmove) per reference.
  std::optional<uint64_t> ref(uint64_t addr) const {
    if (info_.ref_size == 8) return get<uint64_t>(addr);
    const std::optional<uint32_t> v = get<uint32_t>(addr);
    if (!v) return std::nullopt;
    return *v;
  }
  const lj_luajit_info& info() const { return info_; }
  bool gc64() const { return info_.ref_size == 8; }

  // Called every kObjectsPerCheckpoint objects of a pass that reads the whole heap, and at its
  // end, after release(): the caller shows progress.
  void on_checkpoint(std::function<void(const HeapCheckpoint&)> f) { checkpoint_ = std::move(f); }
  void checkpoint(const HeapCheckpoint& c) const {
    release();
    if (checkpoint_) checkpoint_(c);
  }
  // `f` drops the reader's resident copies of the memory (a core file's mapped pages), so the
  // object graph's arrays do not peak on top of them. At every checkpoint, and where a pass
  // sweeps the heap faster than it counts objects (the string table's chains).
  void on_release(std::function<void()> f) { release_ = std::move(f); }
  void release() const {
    if (release_) release_();
  }
  static constexpr size_t kObjectsPerCheckpoint = size_t{1} << 16;

  // Memory readable in place: `size` bytes at `data` hold the address space from `start` on. A
  // core file's segments are: reads inside the run found last are plain copies, no call through
  // the reader and no search for the segment (a walk reads ~10 fields per object, and those
  // cost more than the copies). `f(addr)` gives the run holding `addr`, or one of size 0.
  struct InPlace {
    uint64_t start = 0;
    const uint8_t* data = nullptr;
    uint64_t size = 0;
  };
  void on_in_place(std::function<InPlace(uint64_t)> f) { find_in_place_ = std::move(f); }

  // Whether the reader may be called from two threads at once (a core file's: nothing in it
  // changes); a pass may then split its objects over two (build_graph). Off by default.
  void allow_threads(bool on) { threads_ = on; }
  bool threads_allowed() const { return threads_; }

  // A live process's memory changes under the read: an object seen half-written (the mutator
  // allocating it, the collector sweeping it) may read whole a moment later. `f(addr, len)`
  // drops any copy the reader keeps of those bytes and waits that moment; true when the next
  // read may differ. A core never changes: without `f`, reread() is false.
  void on_reread(std::function<bool(uint64_t, uint64_t)> f) { reread_ = std::move(f); }
  bool reread(uint64_t addr, uint64_t len) const { return reread_ && reread_(addr, len); }

 private:
  // view() outside the run found last: the run holding `addr`, remembered when it holds all
  // `len` bytes.
  const uint8_t* view_elsewhere(uint64_t addr, uint64_t len) const {
    if (!find_in_place_) return nullptr;
    const InPlace run = find_in_place_(addr);
    const uint64_t rel = addr - run.start;
    if (run.data == nullptr || rel >= run.size || len > run.size - rel) return nullptr;
    run_ = run;
    return run.data + rel;
  }

  ljprof_mem_reader mem_;
  const lj_luajit_info& info_;
  std::function<void(const HeapCheckpoint&)> checkpoint_;
  std::function<void()> release_;
  std::function<bool(uint64_t, uint64_t)> reread_;
  std::function<InPlace(uint64_t)> find_in_place_;
  mutable InPlace run_;  // the run of the last read outside the previous one
  bool threads_ = false;
};

// A TValue's collectable object, if it holds one (lj_obj.h tvisgcv): its address and ~itype.
struct GcValue {
  uint64_t addr = 0;
  uint8_t gct = 0;
};
// GC64: the itype is the top 17 bits sign-extended (it64 >> 47), the pointer the low 47 bits;
// non-GC64: the itype is the high word, the GCRef the low one.
inline std::optional<GcValue> decode_tvalue(uint64_t raw, bool gc64) {
  const uint32_t itype = gc64 ? static_cast<uint32_t>(static_cast<int64_t>(raw) >> 47)
                              : static_cast<uint32_t>(raw >> 32);
  const uint32_t gct = ~itype;
  if (gct < kMinGct || gct > kMaxGct || gct == static_cast<uint32_t>(Gct::Upval)) {
    return std::nullopt;
  }
  const uint64_t addr = gc64 ? raw & ((uint64_t{1} << 47) - 1) : raw & 0xffffffffu;
  if (addr == 0) return std::nullopt;
  return GcValue{addr, static_cast<uint8_t>(gct)};
}

}  // namespace ljprof::heap
