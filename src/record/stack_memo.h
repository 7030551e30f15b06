// record/stack_memo.h: a ring-buffer sample's symbolized stack without symbolizing every frame
// of every sample. The memo is a tree of the stacks seen, root first: a node is one unit of raw
// frames as the kernel wrote them (a frame, or a JIT trace with the frame after it) under its
// parent node; the outermost unit's parent is the sample's context (the process context's
// generation, which an exec changes, and how the walk ended). A node holds the frames its unit
// symbolized to, and the stack entry of the samples whose leaf unit it is. So an identical
// sample costs a lookup per unit and no symbolization, and a new stack symbolizes only its units
// not seen under the same outer frames: recursion of varying depth through varying call sites
// (every path a stack of its own) costs a frame or two per sample, not thirty.
// Why a unit's frames are the same wherever its suffix occurs: symbolize/walk_frames.cc gives
// frame i a result that depends on raw frames i and i+1 only (its caller names it, an FFI
// trampoline marks it), except that a trace rewrites and extends the frame after it (kept in
// one unit), and report::profile_frames merges a trace with the next frame only. So a unit is
// symbolized on its own with the next frame out as context (whose frame is dropped), as the
// leaf only when it is the sample's first, and with the walk's end only when it is the outermost.
// Nodes are matched on their exact raw bytes (the hash only finds candidates). A sample whose
// symbolization counts a failure (a prototype gone or changed since the sample) is symbolized
// whole and stored nowhere: its counts stay exact and a later sample tries again.
#pragma once

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "record/counters.h"
#include "record/process_context.h"
#include "record/sample_frames.h"
#include "record/stack_table.h"

extern "C" {
#include "record/record_types.h"
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
    uint64_t whole_hits = 0;   // every unit known, the stack too
    uint64_t suffix_hits = 0;  // outer units known, the inner ones symbolized
    uint64_t symbolized = 0;   // no unit known (or the sample symbolized whole)
    uint64_t units_symbolized = 0;
  };
  const Stats& stats() const { return stats_; }

 private:
  // A unit longer than this (a trace on a trace on ...) is symbolized whole, not memoized.
  static constexpr uint32_t kMaxUnit = 2;
  static constexpr uint32_t kNone = UINT32_MAX;
  struct Node {
    uint64_t hash = 0;
    uint32_t parent = kNone;  // kNone: a context node
    uint32_t nraw = 0;
    std::array<lj_rec_frame, kMaxUnit> raw{};
    uint64_t generation = 0;  // context nodes: ProcessContext::generation, LJ_END_*, end pc
    uint32_t end = 0;
    uint64_t end_pc = 0;
    std::vector<uint32_t> ids;           // the frames the unit symbolized to, leaf first
    StackTable::Entry* entry = nullptr;  // the stack of samples whose leaf unit this is
  };

  uint32_t context_node(const lj_rec_sample& s, const ProcessContext& ctx);
  // The node of `n` raw frames at `raw` under `parent`, or kNone.
  uint32_t find(uint32_t parent, const lj_rec_frame* raw, uint32_t n, uint64_t hash) const;
  // The node with `hash` that `match` accepts, or kNone (linear probing from the hash's slot,
  // the order add() fills them in).
  template <typename Match>
  uint32_t probe(uint64_t hash, Match match) const {
    const size_t mask = slots_.size() - 1;
    for (size_t i = hash & mask; slots_[i] != 0; i = (i + 1) & mask) {
      const Node& node = nodes_[slots_[i] - 1];
      if (node.hash == hash && match(node)) return slots_[i] - 1;
    }
    return kNone;
  }
  uint32_t add(Node&& node);
  // The stack of a leaf node: its chain's frame ids, leaf first.
  StackTable::Entry& entry_of(uint32_t leaf, uint32_t pid);
  const Stack& whole(const lj_rec_sample& s, const ProcessContext& ctx);

  SampleSymbolizer& symbolizer_;
  StackTable& stacks_;
  std::vector<Node> nodes_;
  std::vector<uint32_t> slots_;  // open addressing: node id + 1, 0 empty
  // The previous sample's frames and the node of each of its units by the unit's distance from
  // the outermost frame (kNone where no unit starts): consecutive samples share their outer
  // units, which are then taken from here while they match, without a lookup in the table.
  std::array<lj_rec_frame, LJ_WALK_MAX_FRAMES> last_frames_{};
  std::array<uint32_t, LJ_WALK_MAX_FRAMES + 1> last_nodes_{};
  uint32_t last_n_ = 0;
  uint32_t last_context_ = kNone;
  Stack result_;  // what stack_of returned last
  Stats stats_;
  // The memo is cleared when it reaches this many nodes (the stacks stay in the table).
  static constexpr size_t kMaxNodes = 1 << 14;
};

}  // namespace ljprof::record
