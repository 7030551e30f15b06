// report/frames.h: what all text outputs (folded, top, flame graph) agree on — one label per
// frame, one identity per function — and the stack aggregation every writer starts from.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "profile/profile.h"

namespace ljprof::report {

// The text a person reads for one frame (the folded-stack / flame-graph node format):
//   lua      "name (file:line)"   ("name (file)" when the line is unknown, "name" without file;
//            file: the last component of a file chunk's path)
//   native   "symbol", else "module-basename+0xoff", else "0xaddress"
//   cfunc    "name [cfunc]"       (ffi, root likewise: "[ffi]", "[root]")
//   trace    "name (file:line)" like lua (JIT-compiled Lua code; the kind tells them apart)
//   unknown  "[unknown: reason]"
// Frames with the same label are the same node of a flame graph. The label is printable text
// (common/printable.h) whatever the frame holds: the folded, top and flame graph writers all
// show labels, and a Profile may come from anywhere (a test, another producer), not only from
// the walk and read_pprof(), which make their strings printable already.
std::string frame_label(const profile::Frame& frame);

// Like frame_label() but for the function rather than the current line: Lua shows the
// function's first line ("name (file:start_line)"). Used by the top table, whose rows are
// functions, so every line of one Lua function lands in one row.
std::string function_label(const profile::Frame& frame);

// `--group-by`: what the folded stacks and the flame graph put at the root end of each stack.
enum class GroupBy {
  None,   // the stacks as they are
  Fiber,  // one frame fiber_group_label() below the stack's root (the root of the root)
};

// The frame GroupBy::Fiber puts at the root end of a sample's stack (after the last of its
// leaf-first frames, so it shows first in a folded line and right above "all" in a flame
// graph): "fiber:NAME", NAME printable text (common/printable.h); "fiber:#ID" for a fiber
// without a name; "" for a sample without a fiber (id 0), which gets no extra frame. A fiber of
// another thread's cord than the main one (a wall profile's) adds the cord: "fiber:main (wal)".
// Fibers that share a name (and cord) share the frame: their samples merge as one group.
std::string fiber_group_label(const profile::Sample& s);

// A sample's identical twins (same frames, pid, tid and fiber) merged into one with the summed
// count; samples with count <= 0 are dropped. Sorted, so equal profiles compare equal.
std::vector<profile::Sample> aggregate_samples(const std::vector<profile::Sample>& samples);

// Frames, count, pid, tid and fiber (id and name) all equal.
bool same_sample(const profile::Sample& a, const profile::Sample& b);

}  // namespace ljprof::report
