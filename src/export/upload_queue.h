// export/upload_queue.h: decouples the agent's sampling loop from a sink. push() only appends
// to a bounded in-memory queue; one worker thread per queue delivers, retries with backoff and
// drops, so a slow, hanging or absent backend costs a bounded amount of memory and never
// delays sampling.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "export/interval_profile.h"
#include "export/sink.h"

namespace ljprof::exporter {

struct QueueOptions {
  size_t capacity = 64;  // profiles waiting (not counting the one being sent); at least 1
  double initial_backoff_s = 1;
  double max_backoff_s = 30;
  // Called on the worker thread after every attempt, before counts() includes it, without the
  // queue's lock held: how the agent prints failures and feeds metrics. The queue itself logs
  // nothing. It must not call stop().
  std::function<void(const IntervalProfile&, const Delivery&)> on_attempt;
};

struct QueueCounts {
  uint64_t delivered = 0;
  uint64_t failed_attempts = 0;   // retryable failures (the profile stayed queued)
  uint64_t dropped_full = 0;      // the oldest profile, pushed out by a newer one
  uint64_t dropped_rejected = 0;  // refused by the sink (non-retryable)
  uint64_t dropped_stopped = 0;   // pushed after stop()
  size_t depth = 0;               // not yet delivered: waiting, plus the one being sent
  std::string last_error;         // of the latest failed attempt, "" after a success
};

class UploadQueue {
 public:
  // `sink` must not be null. Starts the worker thread.
  UploadQueue(std::unique_ptr<Sink> sink, QueueOptions options);
  ~UploadQueue();  // stop(0)
  UploadQueue(const UploadQueue&) = delete;
  UploadQueue& operator=(const UploadQueue&) = delete;

  // Never blocks on the sink: when `capacity` profiles are waiting, the oldest is dropped and
  // counted (dropped_full). A retryable failure keeps the profile at the head and waits a
  // backoff that doubles from initial_backoff_s up to max_backoff_s and resets on a success or
  // a rejection (the backend answered).
  void push(IntervalProfile profile);
  QueueCounts counts() const;  // thread-safe snapshot
  const std::string& sink_name() const { return sink_name_; }

  // Keeps delivering what is queued (retries and backoff included) until the queue is empty or
  // `drain_timeout_s` has passed, then cancels the attempt in flight (Sink::cancel) and joins
  // the worker; returns shortly after the deadline whatever the sink does. What is still
  // queued stays counted in depth. Idempotent; a later call can only shorten the deadline.
  void stop(double drain_timeout_s);

 private:
  using Clock = std::chrono::steady_clock;

  void run();
  bool should_exit(Clock::time_point now) const;
  std::optional<IntervalProfile> next_due(std::unique_lock<std::mutex>& lock);
  void settle(IntervalProfile profile, const Delivery& result);
  void wait_for_worker();

  std::unique_ptr<Sink> sink_;
  const QueueOptions options_;
  const std::string sink_name_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;         // the worker: new profile, stop
  std::condition_variable worker_done_;  // stop(): the worker has left run()
  std::deque<IntervalProfile> queue_;
  bool in_flight_ = false;
  bool stopping_ = false;
  bool worker_exited_ = false;
  Clock::time_point drain_deadline_;
  Clock::time_point next_attempt_;
  Clock::duration backoff_;
  QueueCounts counts_;

  std::mutex join_mutex_;  // serializes stop() callers around the join
  std::thread worker_;
};

}  // namespace ljprof::exporter
