#include "export/upload_queue.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <utility>

namespace ljprof::exporter {

namespace {

using Clock = std::chrono::steady_clock;

// Seconds as a steady-clock duration; negative, NaN and absurd values are clamped so that
// `now + duration` cannot overflow.
Clock::duration to_duration(double seconds) {
  if (!(seconds > 0)) return Clock::duration::zero();
  seconds = std::min(seconds, 1e7);
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

QueueOptions normalized(QueueOptions o) {
  o.capacity = std::max<size_t>(o.capacity, 1);
  // A zero backoff would spin on a dead backend.
  o.initial_backoff_s = std::max(o.initial_backoff_s, 0.001);
  o.max_backoff_s = std::max(o.max_backoff_s, o.initial_backoff_s);
  return o;
}

}  // namespace

UploadQueue::UploadQueue(std::unique_ptr<Sink> sink, QueueOptions options)
    : sink_(std::move(sink)),
      options_(normalized(std::move(options))),
      sink_name_(sink_->name()),
      backoff_(to_duration(options_.initial_backoff_s)) {
  try {
    worker_ = std::thread([this] { run(); });
  } catch (const std::exception& e) {
    // No thread, no deliveries: the queue behaves as stopped and says why.
    std::lock_guard lock(mutex_);
    stopping_ = true;
    worker_exited_ = true;
    counts_.last_error = sink_name_ + ": cannot start the upload thread: " + e.what();
  }
}

UploadQueue::~UploadQueue() {
  stop(0);
}

void UploadQueue::push(IntervalProfile profile) {
  std::lock_guard lock(mutex_);
  if (stopping_) {
    ++counts_.dropped_stopped;
    return;
  }
  if (queue_.size() >= options_.capacity) {
    // The newest interval is worth more than the oldest: a backend that comes back shows the
    // recent past.
    queue_.pop_front();
    ++counts_.dropped_full;
  }
  queue_.push_back(std::move(profile));
  wake_.notify_one();
}

QueueCounts UploadQueue::counts() const {
  std::lock_guard lock(mutex_);
  QueueCounts c = counts_;
  c.depth = queue_.size() + (in_flight_ ? 1 : 0);
  return c;
}

void UploadQueue::stop(double drain_timeout_s) {
  {
    std::lock_guard lock(mutex_);
    Clock::time_point deadline = Clock::now() + to_duration(drain_timeout_s);
    if (!stopping_ || deadline < drain_deadline_) drain_deadline_ = deadline;
    stopping_ = true;
    wake_.notify_all();
    worker_done_.notify_all();  // a stop() already waiting re-reads the deadline
  }
  std::lock_guard join(join_mutex_);
  if (!worker_.joinable()) return;
  wait_for_worker();
  worker_.join();
}

void UploadQueue::wait_for_worker() {
  std::unique_lock lock(mutex_);
  // drain_deadline_ is re-read on every wake-up: a later stop() may have shortened it.
  while (!worker_exited_ && Clock::now() < drain_deadline_) {
    worker_done_.wait_until(lock, drain_deadline_);
  }
  if (worker_exited_) return;
  lock.unlock();
  // The worker is inside deliver(): make that attempt end now rather than at its timeout.
  sink_->cancel();
}

bool UploadQueue::should_exit(Clock::time_point now) const {
  return stopping_ && (queue_.empty() || now >= drain_deadline_);
}

std::optional<IntervalProfile> UploadQueue::next_due(std::unique_lock<std::mutex>& lock) {
  for (;;) {
    Clock::time_point now = Clock::now();
    if (should_exit(now)) return std::nullopt;
    if (queue_.empty()) {
      wake_.wait(lock);
    } else if (now < next_attempt_) {
      // Backing off; stop() shortens the wait to its deadline and wakes us.
      wake_.wait_until(lock, stopping_ ? std::min(next_attempt_, drain_deadline_) : next_attempt_);
    } else {
      IntervalProfile profile = std::move(queue_.front());
      queue_.pop_front();
      return profile;
    }
  }
}

void UploadQueue::settle(IntervalProfile profile, const Delivery& result) {
  Clock::time_point now = Clock::now();
  if (result.ok || !result.retryable) {
    // The backend answered: whatever comes next goes at once.
    if (result.ok) {
      ++counts_.delivered;
      counts_.last_error.clear();
    } else {
      ++counts_.dropped_rejected;
      counts_.last_error = result.error;
    }
    backoff_ = to_duration(options_.initial_backoff_s);
    next_attempt_ = now;
    return;
  }
  ++counts_.failed_attempts;
  counts_.last_error = result.error;
  next_attempt_ = now + backoff_;
  backoff_ = std::min(backoff_ * 2, to_duration(options_.max_backoff_s));
  // Back at the head, unless newer profiles filled the queue meanwhile: then this one, the
  // oldest of all, is the one to drop.
  if (queue_.size() >= options_.capacity) {
    ++counts_.dropped_full;
    return;
  }
  queue_.push_front(std::move(profile));
}

void UploadQueue::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    std::optional<IntervalProfile> profile = next_due(lock);
    if (!profile) break;
    in_flight_ = true;
    lock.unlock();
    Delivery result = sink_->deliver(*profile);
    if (options_.on_attempt) {
      // The agent's callback must not take the worker (and with it the process) down.
      try {
        options_.on_attempt(*profile, result);
      } catch (...) {
      }
    }
    lock.lock();
    in_flight_ = false;
    settle(std::move(*profile), result);
  }
  worker_exited_ = true;
  worker_done_.notify_all();
}

}  // namespace ljprof::exporter
