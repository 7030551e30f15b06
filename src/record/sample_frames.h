// record/sample_frames.h: turns one ring-buffer sample (bpf/record/record_types.h) into the
// report's frames, leaf first, reading names from the live process.
//  - Lua frames are named only if the prototype still has the chunkname and firstline the
//    kernel read at sample time; otherwise the frame is "[unknown: ...]" and counted — a
//    prototype freed and reused since the sample is never misattributed.
//  - A C function called from Lua appears twice in the raw walk: as the native frame running
//    its code and as the Lua stack's cfunc slot. The two merge into one cfunc frame.
//  - A walk that did not reach a proven root ends with one "[unknown: reason]" frame.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "record/process_context.h"
#include "report/profile.h"

extern "C" {
#include "record/record_types.h"
}

namespace ljprof::record {

class SampleSymbolizer {
 public:
  // Frames of `sample` of process `ctx`, leaf first. `counters` gets per-reason counts of
  // frames that could not be named.
  std::vector<report::Frame> frames(const lj_rec_sample& sample, const ProcessContext& ctx,
                                    std::map<std::string, uint64_t>& counters);

 private:
  // `symbol_start`, if given, gets the runtime start of the symbol holding pc (0: none).
  report::Frame native_frame(const ProcessContext& ctx, uint64_t pc, bool exact,
                             report::FrameKind kind, uint64_t* symbol_start = nullptr);
  struct LuaKey {
    uint32_t pid;
    uint64_t proto, chunkname;
    int32_t firstline;
    auto operator<=>(const LuaKey&) const = default;
  };
  struct LuaName {
    bool ok = false;
    std::string short_src;
    bool main_chunk = false;
    std::string error;
  };
  LuaName lua_name(const ProcessContext& ctx, const lj_rec_frame& f);
  std::map<LuaKey, LuaName> lua_names_;
  struct NativeEntry {
    report::Frame frame;
    uint64_t symbol_start = 0;
  };
  std::map<std::tuple<uint32_t, uint64_t, bool>, NativeEntry> natives_;
};

}  // namespace ljprof::record
