// export/agent.h: `ljprof agent` — continuous recording (record/recorder.h in interval mode)
// whose per-process profiles go to sinks (Pyroscope's ingest, an output directory) through
// bounded upload queues, with a Prometheus metrics page. Sampling never waits on a sink.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"
#include "export/out_dir.h"
#include "export/pyroscope.h"
#include "export/upload_queue.h"
#include "record/recorder.h"

namespace ljprof::exporter {

struct AgentOptions {
  // What to follow (pids, or every LuaJIT process with the comm/cgroup filters), the sampling
  // rate, the interval (record.interval_s, > 0) and the ring size; the agent sets the rest.
  record::RecordOptions record;
  std::string host_name;                      // the host_name label; "" = gethostname()
  std::map<std::string, std::string> labels;  // the user's labels, on every profile
  std::optional<PyroscopeOptions> pyroscope;
  std::optional<OutDirOptions> out_dir;
  QueueOptions queue;           // capacity and backoff of each sink's queue
  double drain_timeout_s = 5;   // at SIGTERM: how long queued profiles may still be delivered
  std::string metrics_address;  // "HOST:PORT" of the metrics page; "" = none
  // --fiber-wall HZ: also a wall-clock fiber profile (kind "wall") per Tarantool process per
  // interval, HZ snapshots a second (record/fiber_wall_sampler.h); 0 = none.
  double fiber_wall_hz = 0;
  // One line per interval, a sink's failures and recoveries, the metrics address: what an
  // operator reads in the journal.
  std::function<void(const std::string&)> log;
};

struct AgentSummary {
  record::RecordStats stats;
  double seconds = 0;
  uint64_t intervals = 0;
  uint64_t profiles = 0;       // per-process profiles cut (each handed to every sink)
  uint64_t wall_profiles = 0;  // of which wall-clock fiber profiles (--fiber-wall)
  std::vector<std::pair<std::string, QueueCounts>> sinks;  // sink name, final counts
};

// The application name of a process's profiles: its service name (OTEL_SERVICE_NAME or
// PYROSCOPE_APPLICATION_NAME in its environment), else its executable's name, else its comm.
std::string app_name(const record::ProcessIdentity& process);

// The labels of one process's profiles: service_name (= app_name), host_name, pid, runtime,
// then the user's labels, which may not replace those four.
std::map<std::string, std::string> profile_labels(const record::ProcessIdentity& process,
                                                  const std::string& host_name,
                                                  const std::map<std::string, std::string>& user);

// Runs until SIGINT/SIGTERM (then cuts the partial interval, delivers what it can within
// drain_timeout_s, and returns) or until `record.duration_s` elapses.
Result<AgentSummary> run_agent(AgentOptions options);

}  // namespace ljprof::exporter
