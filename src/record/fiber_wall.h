// record/fiber_wall.h: the wall-clock fiber profile (`ljprof fibers -p PID --sample HZ`, and the
// agent's --fiber-wall): HZ times a second a snapshot of every fiber of every cord — the main
// one, and the other threads' (iproto, WAL, relays) on x86-64 (core/fiber_snapshot.h) — one
// sample per fiber per tick weighted by the tick: where fibers spend their time, waiting
// included (fiber.sleep, channels, box calls, net.box, the WAL's writes). The target is
// never stopped; a fiber that has not run since the previous tick keeps the stack read then, so
// a tick of waiting fibers costs little more than reading the fiber list.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/result.h"
#include "core/core_walk.h"
#include "core/fiber_snapshot.h"
#include "profile/profile.h"

namespace ljprof::record {

// The wall profile of one process, tick by tick. Its profile: value type Wall, period 1e9/hz ns,
// one Sample per fiber per tick (a fiber that did not run since the previous tick adds one to
// its previous sample's count) labelled with the fiber's id, name, state and cord (with the
// cord's thread as `tid` for cords other than the main one); a running fiber (on
// the CPU: its stack moves) is the one unknown frame "running on the CPU", the cord's scheduler
// "event loop: no fiber running", a fiber whose stack kept changing "stack changed under the
// read". Counters: "snapshots", "snapshot errors", "ticks missed" (a snapshot outlasted its
// tick), "fibers read again", "fibers unsettled", "stacks reused", "other cords' snapshot
// errors". The other cords are looked for every few seconds; a tick fails only with the main
// cord's snapshot.
class FiberWallProfile {
 public:
  FiberWallProfile(const core::CoreWalker& walker, uint32_t pid, double hz);
  // One tick: a snapshot, its samples added. False (the reason in first_error()) when the
  // snapshot could not be taken.
  bool tick();
  void count_missed(uint64_t ticks) { missed_ += ticks; }
  uint64_t ticks() const { return ticks_; }
  uint64_t errors() const { return errors_; }
  const std::string& first_error() const { return first_error_; }
  // Why only the main cord is profiled ("" when the other cords were found).
  const std::string& cords_error() const { return cords_error_; }
  // The profile since the previous cut (or the start), its counters set, and a new one begun.
  profile::Profile cut();

 private:
  struct OtherCord {
    uint64_t cord = 0;
    uint32_t tid = 0;
    core::FiberSnapshotter snapshotter;
  };
  void begin();
  void refresh_cords();
  void add(const core::FiberSnapshot& snapshot, uint32_t tid);
  const core::CoreWalker& walker_;
  core::FiberSnapshotter snapshotter_;  // the main cord's
  std::vector<OtherCord> others_;
  std::chrono::steady_clock::time_point cords_checked_;
  std::string cords_error_;
  uint32_t pid_;
  int64_t period_ns_;
  profile::Profile profile_;
  std::unordered_map<uint64_t, size_t> last_;  // struct fiber address -> its latest sample
  uint64_t start_ns_ = 0;                      // steady clock of the profile's start
  uint64_t ticks_ = 0, errors_ = 0, missed_ = 0, rereads_ = 0, unsettled_ = 0, reused_ = 0;
  uint64_t cord_errors_ = 0;
  std::string first_error_;
};

struct FiberWallOptions {
  uint32_t pid = 0;
  double hz = 10;
  double seconds = 10;
  // Called about once a second with the ticks taken so far; false stops the recording (SIGINT).
  std::function<bool(uint64_t ticks)> keep_going;
  // Called once at the end when only the main cord could be sampled, with the reason.
  std::function<void(const std::string& why)> main_cord_only;
};

// The wall profile of one process over `seconds` (or until keep_going says stop, or the process
// exits). An error when no snapshot at all could be taken (not Tarantool, no fiber layout, the
// process is gone), naming the first reason.
Result<profile::Profile> record_fiber_wall(const core::CoreWalker& walker,
                                           const FiberWallOptions& options);

}  // namespace ljprof::record
