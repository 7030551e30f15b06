// report/speedscope.h: a recording's timeline (profile::Timeline) as a speedscope file
// (https://www.speedscope.app/file-format-schema.json), the viewer people open for "what ran
// when": one evented profile per thread — per thread and fiber for a Tarantool — whose frames
// open and close at the times the samples were taken.
#pragma once

#include <string>

#include "common/result.h"
#include "profile/profile.h"

namespace ljprof::report {

// The speedscope document of `profile.timeline`, as JSON text:
// - shared.frames: each distinct function once, named as the top table names it
//   (frames.h function_label), with "file" and "line" (its first line) for Lua code;
// - one profile of type "evented", unit "nanoseconds", per (pid, tid, fiber), named
//   "pid P tid T" (+ " fiber NAME"), ordered by pid, tid and first sample; times are
//   nanoseconds from the first sample of the recording;
// - each point stands for [time - period_ns, time) (a CPU sample) or [time - off_cpu_ns, time)
//   (an off-CPU interval; its stack's frames stay open while the thread is away), moved later,
//   length kept, where it would overlap the one before; frames the next interval shares with this
//   one (from the root) stay open across it, and a gap of more than half a period between two
//   intervals closes every frame (the thread did not run, or ran nothing we sampled).
// An error when the timeline is empty (the profile was not recorded with per-sample times).
Result<std::string> speedscope_json(const profile::Profile& profile, const std::string& name);

// The same, written to `path`.
Status write_speedscope(const profile::Profile& profile, const std::string& path);

}  // namespace ljprof::report
