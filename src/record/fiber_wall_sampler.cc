#include "record/fiber_wall_sampler.h"

#include <fmt/format.h>
#include <signal.h>

#include <chrono>
#include <utility>

#include "core/core_file.h"
#include "core/core_walk.h"
#include "record/fiber_wall.h"

namespace ljprof::record {

struct FiberWallSampler::Process {
  std::unique_ptr<core::CoreFile> image;  // the walker keeps a reference: it must not move
  std::unique_ptr<core::CoreWalker> walker;
  std::unique_ptr<FiberWallProfile> wall;
};

namespace {

// The walker of a live Tarantool process, or why there is none.
Result<std::unique_ptr<core::CoreWalker>> tarantool_walker(const core::CoreFile& image,
                                                           uint32_t pid) {
  LJ_ASSIGN_OR_RETURN(std::unique_ptr<core::CoreWalker> walker, core::CoreWalker::create(image));
  if (!walker->tarantool()) return make_error("process {} is not Tarantool", pid);
  return walker;
}

}  // namespace

FiberWallSampler::FiberWallSampler(double hz) : hz_(hz), thread_([this] { run(); }) {}

FiberWallSampler::~FiberWallSampler() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void FiberWallSampler::watch(uint32_t pid) {
  std::lock_guard lock(mutex_);
  if (!processes_.count(pid) && !dropped_.count(pid)) pending_.insert(pid);
}

std::map<uint32_t, profile::Profile> FiberWallSampler::cut() {
  std::lock_guard lock(mutex_);
  std::map<uint32_t, profile::Profile> out;
  for (auto& [pid, process] : processes_) out.emplace(pid, process->wall->cut());
  return out;
}

std::vector<std::string> FiberWallSampler::take_log() {
  std::lock_guard lock(mutex_);
  return std::exchange(log_, {});
}

void FiberWallSampler::tick_all() {
  std::unique_lock lock(mutex_);
  // Set up new processes (reading their executable's tables takes a while: a cut() waits on it
  // once per new process).
  for (uint32_t pid : std::exchange(pending_, {})) {
    auto process = std::make_unique<Process>();
    Result<std::unique_ptr<core::CoreWalker>> walker = make_error("not set up");
    auto image = core::CoreFile::from_process(pid);
    if (image.ok()) {
      process->image = std::make_unique<core::CoreFile>(std::move(*image));
      walker = tarantool_walker(*process->image, pid);
    } else {
      walker = image.error();
    }
    if (!walker.ok()) {
      dropped_.insert(pid);
      log_.push_back(
          fmt::format("fiber wall profile of process {}: not taken: {}", pid, walker.message()));
      continue;
    }
    process->walker = std::move(*walker);
    process->wall = std::make_unique<FiberWallProfile>(*process->walker, pid, hz_);
    processes_.emplace(pid, std::move(process));
  }
  for (auto it = processes_.begin(); it != processes_.end();) {
    if (!it->second->wall->tick() && ::kill(static_cast<pid_t>(it->first), 0) != 0) {
      dropped_.insert(it->first);  // exited: its last partial profile is not sent
      it = processes_.erase(it);
      continue;
    }
    ++it;
  }
}

void FiberWallSampler::run() {
  using Clock = std::chrono::steady_clock;
  const auto period = std::chrono::nanoseconds(static_cast<int64_t>(1e9 / hz_));
  auto next = Clock::now();
  while (true) {
    {
      std::unique_lock lock(mutex_);
      if (wake_.wait_until(lock, next, [this] { return stop_; })) return;
    }
    tick_all();
    next += period;
    const auto now = Clock::now();
    uint64_t missed = 0;
    while (next < now) {
      next += period;
      ++missed;
    }
    if (missed != 0) {
      std::lock_guard lock(mutex_);
      for (auto& [pid, process] : processes_) process->wall->count_missed(missed);
    }
  }
}

}  // namespace ljprof::record
