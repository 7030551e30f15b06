// report/perf_script.h: a recording's timeline (profile::Timeline) as the text `perf script`
// prints — the input the Firefox Profiler (https://profiler.firefox.com) imports as one track
// per thread with real timestamps.
#pragma once

#include <string>

#include "common/result.h"
#include "profile/profile.h"

namespace ljprof::report {

// The timeline as `perf script` text, thread by thread, each thread's samples in time order:
//   "NAME P/T SECONDS: PERIOD cpu-clock:" (SECONDS: CLOCK_MONOTONIC with microseconds; NAME
//   "pid P", or for a Tarantool fiber's sample "fiber:NAME": the importer names a track after
//   its thread's last sample)
//   then one line per frame, leaf first: "\tPC LABEL (WHERE)" — PC the frame's address in hex
//   (0 for Lua code), LABEL frames.h function_label, WHERE the module's file name or the Lua
//   chunk's file; then an empty line.
// The importer gives every sample the same weight, so an off-CPU interval is written as one
// sample per period across it ("off-cpu" as the event name), at most kMaxSamplesPerInterval.
// An error when the timeline is empty.
Result<std::string> perf_script_text(const profile::Profile& profile);

// The same, written to `path`.
Status write_perf_script(const profile::Profile& profile, const std::string& path);

// The most samples one off-CPU interval is written as (a thread blocked for an hour at 99 Hz
// would otherwise be 356400 of them); the last ones are its end.
constexpr int64_t kMaxSamplesPerInterval = 1000;

}  // namespace ljprof::report
