// record/fiber_wall_sampler.h: wall-clock fiber profiles of several Tarantool processes at once,
// for `ljprof agent --fiber-wall HZ`: one thread ticks HZ times a second and takes a snapshot of
// each watched process (record/fiber_wall.h); cut() hands over each process's profile since the
// previous cut. The recorder's loop only calls watch() and cut(); a cut waits at most for the
// tick in progress (a few milliseconds for a thousand fibers).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "profile/profile.h"

namespace ljprof::record {

class FiberWallSampler {
 public:
  explicit FiberWallSampler(double hz);
  ~FiberWallSampler();  // stops the thread
  FiberWallSampler(const FiberWallSampler&) = delete;
  FiberWallSampler& operator=(const FiberWallSampler&) = delete;

  // Samples process `pid` from the next tick on (again: nothing). A process that cannot be
  // sampled — not Tarantool, no fiber layout, gone — is dropped, its reason in take_log().
  void watch(uint32_t pid);
  // Each watched process's profile since the previous cut (none for a process not yet set up).
  std::map<uint32_t, profile::Profile> cut();
  // Lines for the operator since the previous call: processes dropped, and why.
  std::vector<std::string> take_log();

 private:
  struct Process;
  void run();
  void tick_all();

  const double hz_;
  std::mutex mutex_;  // guards the fields below and every Process
  std::condition_variable wake_;
  bool stop_ = false;
  std::set<uint32_t> pending_;  // watch()ed, not yet set up
  std::set<uint32_t> dropped_;  // never set up again
  std::map<uint32_t, std::unique_ptr<Process>> processes_;
  std::vector<std::string> log_;
  std::thread thread_;
};

}  // namespace ljprof::record
