#include "record/fiber_wall.h"

#include <signal.h>

#include <chrono>
#include <string>
#include <thread>
#include <unordered_map>

#include "core/fiber_snapshot.h"
#include "profile/profile_frames.h"

namespace ljprof::record {

namespace {

using WallClock = std::chrono::steady_clock;

profile::Frame placeholder(const char* what) {
  profile::Frame f;
  f.kind = profile::FrameKind::Unknown;
  f.function = what;
  return f;
}

profile::Sample sample_of(const core::FiberStack& f, uint32_t pid) {
  profile::Sample s;
  s.pid = pid;
  s.fiber = {f.fiber.id, f.fiber.name, core::fiber_state_name(f.state)};
  if (f.scheduler) {
    s.frames.push_back(placeholder("event loop: no fiber running"));
  } else if (f.state == core::FiberState::Running) {
    s.frames.push_back(placeholder("running on the CPU"));
  } else if (f.stack->frames.empty()) {
    s.frames.push_back(placeholder("stack changed under the read"));
  } else {
    s.frames = profile::profile_frames(f.stack->frames);
  }
  return s;
}

// The samples of the ticks so far. A fiber whose stack was reused (it has not run since the
// previous tick) and whose name and state are the same adds one to the count of its previous
// sample: a thousand waiting fibers cost a thousand increments a tick, not a thousand stacks.
class WallSamples {
 public:
  explicit WallSamples(profile::Profile& out) : out_(out) {}
  void add(const core::FiberSnapshot& snapshot, uint32_t pid) {
    for (const core::FiberStack& f : snapshot.fibers) {
      auto last = last_.find(f.fiber.fiber);
      if (f.reused && last != last_.end()) {
        profile::Sample& s = out_.samples[last->second];
        if (s.fiber.id == f.fiber.id && s.fiber.name == f.fiber.name &&
            s.fiber.state == core::fiber_state_name(f.state)) {
          ++s.count;
          continue;
        }
      }
      last_[f.fiber.fiber] = out_.samples.size();
      out_.samples.push_back(sample_of(f, pid));
    }
  }

 private:
  profile::Profile& out_;
  std::unordered_map<uint64_t, size_t> last_;  // struct fiber address -> its latest sample
};

}  // namespace

Result<profile::Profile> record_fiber_wall(const core::CoreWalker& walker,
                                           const FiberWallOptions& options) {
  profile::Profile out;
  out.value_type = profile::ValueType::Wall;
  const auto period = std::chrono::nanoseconds(static_cast<int64_t>(1e9 / options.hz));
  out.period_ns = period.count();
  out.start_time_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  core::FiberSnapshotter snapshotter(walker);
  WallSamples samples(out);
  const auto start = WallClock::now();
  const auto end = start + std::chrono::duration_cast<WallClock::duration>(
                               std::chrono::duration<double>(options.seconds));
  auto next = start;
  auto next_report = start + std::chrono::seconds(1);
  uint64_t ticks = 0, errors = 0, missed = 0, rereads = 0, unsettled = 0, reused = 0;
  std::string first_error;
  while (next < end) {
    std::this_thread::sleep_until(next);
    auto snapshot = snapshotter.take();
    ++ticks;
    if (snapshot.ok()) {
      samples.add(*snapshot, options.pid);
      rereads += snapshot->rereads;
      unsettled += snapshot->unsettled;
      reused += snapshot->reused;
    } else {
      if (errors++ == 0) first_error = snapshot.message();
      // The process is gone: /proc/PID/mem fails every read from now on.
      if (::kill(static_cast<pid_t>(options.pid), 0) != 0) break;
    }
    next += period;
    const auto now = WallClock::now();
    while (next < now) {  // a slow snapshot: the ticks it overran are not taken
      next += period;
      ++missed;
    }
    if (now >= next_report) {
      next_report = now + std::chrono::seconds(1);
      if (options.keep_going && !options.keep_going(ticks)) break;
    }
  }
  if (errors == ticks) {
    return make_error("no snapshot of the fibers of process {} could be taken: {}", options.pid,
                      first_error.empty() ? "it exited" : first_error);
  }
  out.duration_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(WallClock::now() - start).count();
  out.counters = {{"snapshots", ticks - errors},   {"snapshot errors", errors},
                  {"ticks missed", missed},        {"fibers read again", rereads},
                  {"fibers unsettled", unsettled}, {"stacks reused", reused}};
  return out;
}

}  // namespace ljprof::record
