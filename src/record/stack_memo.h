// record/stack_memo.h: a ring-buffer sample's symbolized stack without symbolizing every frame
// of every sample. A sample's raw frames (as the kernel wrote them) fall into units: a frame, or
// a JIT trace with the frame after it. Each unit's frames are memoized under everything they
// depend on — its raw bytes, the raw frame after it, whether it is the leaf, the process context
// (ProcessContext::generation, which an exec changes) and, for the outermost unit, how the walk
// ended — so a sample costs a lookup per unit, and a new stack symbolizes only its units not
// seen in that position before. Recursion of any depth through a few call sites (every path a
// stack of its own, as a sampled fib makes them) is a handful of units: a Lua frame's raw bytes
// are its function, bytecode pc and prototype, not its stack slot.
// Why that key is enough: symbolize/walk_frames.cc gives frame i a result that depends on raw
// frames i and i+1 only (its caller names it, an FFI trampoline marks it), except that a trace
// rewrites and extends the frame after it (kept in one unit), and profile::profile_frames merges
// a trace with the next frame only. So a unit is symbolized on its own with the next frame out
// as context (whose frame is dropped), as the leaf only when it is the sample's first, and with
// the walk's end only when it is the outermost.
// Units are matched on their exact key bytes (the hash only finds candidates). A sample whose
// symbolization counts a failure (a prototype gone or changed since the sample) is symbolized
// whole and stored nowhere: its counts stay exact and a later sample tries again.
#pragma once

#include <array>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "record/counters.h"
#include "record/process_context.h"
#include "record/sample_frames.h"
#include "record/stack_table.h"

extern "C" {
#include "abi/record_types.h"
}

namespace ljprof::record {

class StackMemo {
 public:
  StackMemo(SampleSymbolizer& symbolizer, StackTable& stacks);

  // A sample's stack entry in the table and the agent counters its symbolization added.
  struct Stack {
    StackTable::Entry* stack = nullptr;
    std::vector<std::pair<uint32_t, uint64_t>> counted;
  };
  const Stack& stack_of(const lj_rec_sample& s, const ProcessContext& ctx);

  // Forgets everything: the table's frame ids are about to be cleared.
  void clear();

  struct Stats {
    uint64_t whole_hits = 0;   // every unit known
    uint64_t suffix_hits = 0;  // some units known, the others symbolized
    uint64_t symbolized = 0;   // no unit known (or the sample symbolized whole)
    uint64_t units_symbolized = 0;
  };
  const Stats& stats() const { return stats_; }

 private:
  // A unit longer than this (a trace on a trace on ...) is symbolized whole, not memoized.
  static constexpr uint32_t kMaxUnit = 2;
  static constexpr uint32_t kNone = UINT32_MAX;
  // Everything a unit's frames depend on, compared as bytes: no padding, unused frames zero.
  struct UnitKey {
    uint64_t generation = 0;  // ProcessContext::generation
    uint64_t end_pc = 0;      // the outermost unit: where the walk ended; else 0
    uint32_t end = 0;         // the outermost unit: LJ_END_* + 1; else 0
    uint32_t leaf = 0;        // 1: the sample's first unit
    uint32_t nraw = 0;        // frames in raw: the unit's, then the next one unless outermost
    uint32_t unit = 0;        // of which the unit's own
    std::array<lj_rec_frame, kMaxUnit + 1> raw{};
  };
  static_assert(std::has_unique_object_representations_v<UnitKey>, "keys compare as bytes");
  struct Unit {
    uint64_t hash = 0;
    uint32_t first_id = 0, nids = 0;  // its frame ids in ids_, leaf first
    UnitKey key;
  };
  // The sample's unit starting at frame `start` of `len` frames (of n).
  UnitKey key_of(const lj_rec_sample& s, const ProcessContext& ctx, uint32_t start, uint32_t len,
                 uint32_t n) const;
  static uint64_t unit_hash(const UnitKey& key);
  // The unit of `key`, or kNone.
  uint32_t find(const UnitKey& key, uint64_t hash) const;
  // Symbolizes the unit of `key` and stores it; kNone when its symbolization counted a failure.
  uint32_t symbolize(const lj_rec_sample& s, const ProcessContext& ctx, uint32_t start,
                     const UnitKey& key, uint64_t hash);
  // The table's entry of process `pid`'s stack made of `count` units (leaf first), found by
  // the units' ids without building the stack's frame ids: a candidate's ids are compared with
  // the units' own.
  StackTable::Entry& stack_entry(uint32_t pid, const uint32_t* units, uint32_t count);
  bool same_frames(const StackTable::Entry& e, const uint32_t* units, uint32_t count) const;
  const Stack& whole(const lj_rec_sample& s, const ProcessContext& ctx);

  SampleSymbolizer& symbolizer_;
  StackTable& stacks_;
  std::vector<Unit> units_;
  std::vector<uint32_t> ids_;
  // Open addressing: (hash >> 32) << 32 | (unit id + 1); 0 empty. The hash's high half in the
  // slot spares reading a unit that cannot match.
  std::vector<uint64_t> slots_;
  // The previous sample: its frames, context, the unit starting at each distance from its
  // outermost frame (kNone where none starts) and its stack. Consecutive samples share their
  // outer units, which are then taken from here while they match, without a lookup.
  std::array<lj_rec_frame, LJ_WALK_MAX_FRAMES> last_frames_{};
  std::array<uint32_t, LJ_WALK_MAX_FRAMES + 1> last_units_{};
  uint32_t last_n_ = 0;
  bool last_valid_ = false;
  uint64_t last_generation_ = 0, last_end_pc_ = 0;
  uint32_t last_end_ = 0;
  StackTable::Entry* last_stack_ = nullptr;
  // Open addressing over the stacks' entries by the hash of their units (nullptr: empty).
  struct StackSlot {
    uint64_t hash = 0;
    StackTable::Entry* entry = nullptr;
  };
  std::vector<StackSlot> stack_slots_;
  size_t stacks_held_ = 0;
  Stack result_;  // what stack_of returned last
  Stats stats_;
  // The memo is cleared when it reaches this many units or frame ids (the stacks stay in the
  // table): ~3 MiB at most.
  static constexpr size_t kMaxUnits = 1 << 14;
  static constexpr size_t kMaxIds = 1 << 16;
  // Stack slots are cleared alone when this many stacks are held.
  static constexpr size_t kMaxStacks = 1 << 13;
};

}  // namespace ljprof::record
