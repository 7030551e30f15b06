// export/sink.h: where a finished IntervalProfile goes. A sink does one delivery attempt per
// call and says whether trying again could help; retrying, backoff and bounding memory are
// UploadQueue's job (upload_queue.h), so every sink gets them the same way.
#pragma once

#include <string>
#include <utility>

#include "export/interval_profile.h"

namespace ljprof::exporter {

// The outcome of one attempt. `error` names the destination (URL or file) and the reason (HTTP
// status, curl or errno message); the caller decides whether and how to print it.
struct Delivery {
  bool ok = false;
  // Only when !ok: the destination may accept the same profile later (connection refused,
  // timeout, HTTP 5xx/429, disk full). Otherwise the profile itself was refused (HTTP 4xx, a
  // malformed profile) and sending it again would be refused again.
  bool retryable = false;
  std::string error;
  // Only when ok: something went wrong that did not lose this profile (e.g. old files of the
  // output directory could not be deleted).
  std::string warning;

  static Delivery success(std::string warning = {}) {
    return {true, false, {}, std::move(warning)};
  }
  static Delivery retry(std::string error) { return {false, true, std::move(error), {}}; }
  static Delivery reject(std::string error) { return {false, false, std::move(error), {}}; }
};

class Sink {
 public:
  virtual ~Sink() = default;
  // For messages and metrics: "pyroscope http://host:4040", "out-dir /var/lib/ljprof".
  virtual std::string name() const = 0;
  // One attempt to deliver `profile`. Called from one thread at a time (the queue's worker).
  virtual Delivery deliver(const IntervalProfile& profile) = 0;
  // Thread-safe, callable while deliver() runs on another thread: that attempt and every later
  // one end promptly with a retryable failure. UploadQueue::stop() calls it when its drain
  // deadline passes, so a slow backend cannot hold up shutdown for a whole request timeout.
  virtual void cancel() {}
};

}  // namespace ljprof::exporter
