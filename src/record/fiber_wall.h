// record/fiber_wall.h: the wall-clock fiber profile (`ljprof fibers -p PID --sample HZ`): HZ
// times a second a snapshot of every fiber of the main cord (core/fiber_snapshot.h), one sample
// per fiber per tick weighted by the tick — where fibers spend their time, waiting included
// (fiber.sleep, channels, box calls, net.box). The target is never stopped; a fiber that has not
// run since the previous tick keeps the stack read then, so a tick costs little more than
// reading the fiber list.
#pragma once

#include <cstdint>
#include <functional>

#include "common/result.h"
#include "core/core_walk.h"
#include "profile/profile.h"

namespace ljprof::record {

struct FiberWallOptions {
  uint32_t pid = 0;
  double hz = 10;
  double seconds = 10;
  // Called about once a second with the ticks taken so far; true stops the recording (SIGINT).
  std::function<bool(uint64_t ticks)> keep_going;
};

// The profile: value type Wall, period 1e9/hz ns, one Sample of count 1 per fiber per tick
// labelled with the fiber's id, name and state; a running fiber (on the CPU: its stack moves) is
// the one unknown frame "running on the CPU", the cord's scheduler "event loop: no fiber
// running", a fiber whose stack kept changing "stack changed under the read".
// Counters: "snapshots", "snapshot errors", "ticks missed" (a snapshot outlasted its tick),
// "fibers read again", "fibers unsettled", "stacks reused". An error when no snapshot at all
// could be taken (not Tarantool, no fiber layout, the process is gone), naming the first reason.
Result<profile::Profile> record_fiber_wall(const core::CoreWalker& walker,
                                           const FiberWallOptions& options);

}  // namespace ljprof::record
