#include "record/fiber_wall.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

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

// How often the other threads' cords are looked for again (threads of a relay or a new
// applier come and go; the main cord is always read).
constexpr std::chrono::seconds kCordRefresh{5};

profile::Sample sample_of(const core::FiberStack& f, uint32_t pid, uint32_t tid,
                          const std::string& cord) {
  profile::Sample s;
  s.pid = pid;
  s.tid = tid;
  s.fiber = {f.fiber.id, f.fiber.name, cord};
  s.state = core::fiber_state_name(f.state);
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

uint64_t steady_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(WallClock::now().time_since_epoch())
          .count());
}

}  // namespace

FiberWallProfile::FiberWallProfile(const core::CoreWalker& walker, uint32_t pid, double hz)
    : walker_(walker), snapshotter_(walker), pid_(pid), period_ns_(static_cast<int64_t>(1e9 / hz)) {
  begin();
}

// The other threads' cords now: a cord still there keeps its snapshotter (and the stacks it
// holds from the previous tick), a new one gets its own, a gone one is dropped. Without them (no
// cord_ptr, not x86-64) only the main cord is profiled, and the reason is kept once.
void FiberWallProfile::refresh_cords() {
  cords_checked_ = WallClock::now();
  auto found = walker_.other_cords();
  if (!found.ok()) {
    if (cords_error_.empty()) cords_error_ = found.message();
    others_.clear();
    return;
  }
  std::vector<OtherCord> next;
  for (const core::CoreWalker::OtherCord& c : *found) {
    auto same = std::find_if(others_.begin(), others_.end(),
                             [&](const OtherCord& o) { return o.cord == c.cord; });
    if (same != others_.end()) {
      next.push_back(std::move(*same));
    } else {
      next.push_back(OtherCord{c.cord, c.tid, core::FiberSnapshotter(walker_, c.cord)});
    }
  }
  others_ = std::move(next);
}

// One cord's snapshot into the profile: a fiber that has not run since the previous tick, under
// the same name and state, adds one to its previous sample (a thousand waiting fibers cost a
// thousand increments a tick).
void FiberWallProfile::add(const core::FiberSnapshot& snapshot, uint32_t tid) {
  rereads_ += snapshot.rereads;
  unsettled_ += snapshot.unsettled;
  reused_ += snapshot.reused;
  for (const core::FiberStack& f : snapshot.fibers) {
    auto last = last_.find(f.fiber.fiber);
    if (f.reused && last != last_.end()) {
      profile::Sample& s = profile_.samples[last->second];
      if (s.fiber.id == f.fiber.id && s.fiber.name == f.fiber.name &&
          s.fiber.cord == snapshot.cord && s.state == core::fiber_state_name(f.state)) {
        ++s.count;
        continue;
      }
    }
    last_[f.fiber.fiber] = profile_.samples.size();
    profile_.samples.push_back(sample_of(f, pid_, tid, snapshot.cord));
  }
}

void FiberWallProfile::begin() {
  profile_ = {};
  profile_.value_type = profile::ValueType::Wall;
  profile_.period_ns = period_ns_;
  profile_.start_time_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
  last_.clear();
  start_ns_ = steady_ns();
  ticks_ = errors_ = missed_ = rereads_ = unsettled_ = reused_ = cord_errors_ = 0;
}

bool FiberWallProfile::tick() {
  auto snapshot = snapshotter_.take();
  ++ticks_;
  if (!snapshot.ok()) {
    if (errors_++ == 0) first_error_ = snapshot.message();
    return false;
  }
  add(*snapshot, 0);
  if (cords_checked_ == WallClock::time_point{} ||
      WallClock::now() - cords_checked_ >= kCordRefresh) {
    refresh_cords();
  }
  for (OtherCord& other : others_) {
    auto theirs = other.snapshotter.take();
    if (theirs.ok()) {
      add(*theirs, other.tid);
    } else {
      ++cord_errors_;  // its thread may have exited since the cords were looked for
    }
  }
  return true;
}

profile::Profile FiberWallProfile::cut() {
  profile::Profile out = std::move(profile_);
  out.duration_ns = static_cast<int64_t>(steady_ns() - start_ns_);
  out.counters = {{"snapshots", ticks_ - errors_},
                  {"snapshot errors", errors_},
                  {"ticks missed", missed_},
                  {"fibers read again", rereads_},
                  {"fibers unsettled", unsettled_},
                  {"stacks reused", reused_},
                  {"other cords' snapshot errors", cord_errors_}};
  begin();
  return out;
}

Result<profile::Profile> record_fiber_wall(const core::CoreWalker& walker,
                                           const FiberWallOptions& options) {
  FiberWallProfile wall(walker, options.pid, options.hz);
  const auto period = std::chrono::nanoseconds(static_cast<int64_t>(1e9 / options.hz));
  const auto start = WallClock::now();
  const auto end = start + std::chrono::duration_cast<WallClock::duration>(
                               std::chrono::duration<double>(options.seconds));
  auto next = start;
  auto next_report = start + std::chrono::seconds(1);
  while (next < end) {
    std::this_thread::sleep_until(next);
    // The process is gone: /proc/PID/mem fails every read from now on.
    if (!wall.tick() && ::kill(static_cast<pid_t>(options.pid), 0) != 0) break;
    next += period;
    const auto now = WallClock::now();
    while (next < now) {  // a slow snapshot: the ticks it overran are not taken
      next += period;
      wall.count_missed(1);
    }
    if (now >= next_report) {
      next_report = now + std::chrono::seconds(1);
      if (options.keep_going && !options.keep_going(wall.ticks())) break;
    }
  }
  if (!wall.cords_error().empty() && options.main_cord_only) {
    options.main_cord_only(wall.cords_error());
  }
  if (wall.errors() == wall.ticks()) {
    return make_error("no snapshot of the fibers of process {} could be taken: {}", options.pid,
                      wall.first_error().empty() ? "it exited" : wall.first_error());
  }
  return wall.cut();
}

}  // namespace ljprof::record
