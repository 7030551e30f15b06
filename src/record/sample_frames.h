// record/sample_frames.h: turns one ring-buffer sample (bpf/abi/record_types.h) into the
// report's frames, leaf first, through the same walk-to-frames converter as `ljprof core`
// (symbolize/walk_frames.h), reading names from the live process after the sample.
//  - A live process moves on after the sample: a Lua frame is named only if its prototype
//    still has the chunkname and firstline the kernel read at sample time, otherwise the frame
//    is "[unknown: ...]" and counted — a prototype freed and reused since the sample is never
//    misattributed. Call-site names are read from the caller's prototype, not its function
//    object (a closure may be collected by then).
//  - Names are cached: native symbols per (process context, pc), prototypes and lines per
//    (pid, prototype as read at sample time, pc), call-site names per (pid, caller prototype,
//    caller pc), a JIT trace's snapshots per (process context, trace as the kernel saw it) and
//    the Lua frames it runs per (trace, snapshots that may hold the pc, base prototype) — a
//    trace keeps the functions it inlined alive. "Process context" is ProcessContext::generation,
//    which an exec changes.
//  - A walk that did not reach a proven root ends with one "[unknown: reason]" frame.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "profile/profile.h"
#include "record/counters.h"
#include "record/process_context.h"
#include "symbolize/frame.h"
#include "symbolize/snapshot.h"

extern "C" {
#include "abi/record_types.h"
}

namespace ljprof::record {

class SampleSymbolizer {
 public:
  // Frames of `sample` of process `ctx`, leaf first. `counts` gets per-reason counts of frames
  // that could not be named (LJ_REC_COUNTERS).
  std::vector<profile::Frame> frames(const lj_rec_sample& sample, const ProcessContext& ctx,
                                     AgentCounts& counts);
  // The frames of walked frames [first, first + count) alone: the first one is the leaf only
  // when first is 0, and the walk's end adds its "[unknown: ...]" frame only with `with_end`
  // (for a range that reaches the walk's last frame).
  std::vector<profile::Frame> frames(const lj_rec_sample& sample, const ProcessContext& ctx,
                                     AgentCounts& counts, uint32_t first, uint32_t count,
                                     bool with_end);
  // Forgets what was kept for process contexts (ProcessContext::generation) not in
  // `generations` and for processes not in `pids`: the recorder's contexts released since. An
  // agent following processes for months would otherwise keep every past process's names.
  void forget_all_but(const std::set<uint64_t>& generations, const std::set<uint32_t>& pids);

 private:
  friend class SampleFrameSource;
  // The prototype a Lua frame had at sample time (lj_rec_frame), and a bytecode pc in it.
  struct ProtoKey {
    uint32_t pid;
    uint64_t proto, chunkname;
    int32_t firstline;
    uint64_t bcpc;
    auto operator<=>(const ProtoKey&) const = default;
  };
  struct NativeEntry {
    symbolize::Frame frame;  // module, build_id, module_offset, symbol, symbol_offset
  };
  // (ProcessContext::generation, pc, exact pc)
  std::map<std::tuple<uint64_t, uint64_t, bool>, NativeEntry> natives_;
  std::map<ProtoKey, symbolize::LuaLocation> locations_;
  std::map<ProtoKey, std::optional<symbolize::CallSiteName>> call_names_;
  // A JIT trace as the kernel saw it (ProcessContext::generation, GCtrace, trace number), and
  // the snapshots (first, last) that may hold a pc in it (symbolize::snapshots_at), run on a
  // base frame of a given prototype: every pc of a span has the same frames, so they are read
  // once per span, not once per machine-code address sampled. The generation, not the pid: an
  // exec'd process may put another trace at the same address under the same number.
  using TraceKey = std::tuple<uint64_t, uint64_t, uint32_t>;
  using JitKey = std::tuple<uint64_t, uint64_t, uint32_t, uint32_t, uint32_t, uint64_t>;
  std::map<TraceKey, symbolize::TraceInfo> trace_infos_;  // only reads that matched the sample
  // Failures kept too: a trace whose snapshots cannot be read stays so.
  std::map<TraceKey, Result<symbolize::TraceSnapshots>> trace_snapshots_;
  // The frames, or why there are none and the counter that counts it (failures are kept too:
  // a span between snapshots stays so, and trying again would cost its reads every sample).
  struct JitEntry {
    Result<symbolize::JitLuaFrames> frames;
    lj_rec_counter failure;
  };
  std::map<JitKey, JitEntry> jit_frames_;
};

}  // namespace ljprof::record
