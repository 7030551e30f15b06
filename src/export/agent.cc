#include "export/agent.h"

#include <fmt/format.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "export/metrics.h"
#include "proc/identity.h"
#include "record/counters.h"
#include "record/fiber_wall_sampler.h"
#include "report/pprof.h"

namespace ljprof::exporter {

namespace {

using Clock = std::chrono::steady_clock;

// What the metrics page shows, updated by the recorder's loop and read by the server thread.
class AgentState {
 public:
  bool loop_stalls_enabled = false;  // --loop-stalls: the histogram is on the page
  void set_stats(const record::RecordStats& stats) {
    std::lock_guard lock(mutex_);
    stats_ = stats;
  }
  void count_interval(size_t profiles, size_t wall_profiles) {
    std::lock_guard lock(mutex_);
    ++intervals_;
    profiles_ += profiles;
    wall_profiles_ += wall_profiles;
  }
  uint64_t wall_profiles() const {
    std::lock_guard lock(mutex_);
    return wall_profiles_;
  }
  void observe_stalls(const std::vector<profile::LoopStall>& stalls) {
    std::lock_guard lock(mutex_);
    for (const profile::LoopStall& s : stalls) loop_stalls_.observe(s.duration_ns / 1e9);
  }
  Histogram loop_stalls() const {
    std::lock_guard lock(mutex_);
    return loop_stalls_;
  }
  record::RecordStats stats() const {
    std::lock_guard lock(mutex_);
    return stats_;
  }
  std::pair<uint64_t, uint64_t> intervals_and_profiles() const {
    std::lock_guard lock(mutex_);
    return {intervals_, profiles_};
  }

 private:
  mutable std::mutex mutex_;
  record::RecordStats stats_;
  uint64_t intervals_ = 0;
  uint64_t profiles_ = 0;
  uint64_t wall_profiles_ = 0;
  Histogram loop_stalls_{"ljprof_loop_stall_seconds",
                         "event-loop stalls over the --loop-stalls threshold, by length",
                         {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
                         {},
                         0,
                         0};
};

MetricFamily counter(std::string name, std::string help, double value) {
  return {std::move(name), std::move(help), MetricType::Counter, {{{}, value}}};
}

MetricFamily gauge(std::string name, std::string help, double value) {
  return {std::move(name), std::move(help), MetricType::Gauge, {{{}, value}}};
}

// The agent's own resident memory (/proc/self/statm, pages) in bytes; 0 if unreadable.
double resident_bytes() {
  std::ifstream in("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  if (!(in >> size >> resident)) return 0;
  return static_cast<double>(resident) * static_cast<double>(::sysconf(_SC_PAGESIZE));
}

double cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return s(u.ru_utime) + s(u.ru_stime);
}

// The recorder's counters: one family per counter of the registry (bpf/abi/record_types.h
// LJ_REC_COUNTERS, walk ends LJ_WALK_ENDS), the headline counters first (record/counters.h
// kHeadlineCounters), named ljprof_<metric>_total, help = the counter's text (a reason's is the
// summary's, so the page and the summary `ljprof agent` prints at exit say the same); and one
// gauge per level (LJ_REC_GAUGES), ljprof_<metric>.
void add_recorder_families(const record::RecordStats& s, std::vector<MetricFamily>& out) {
  for (const record::HeadlineCounter& h : record::kHeadlineCounters) {
    out.push_back(counter(fmt::format("ljprof_{}_total", h.spec->metric), std::string(h.spec->text),
                          static_cast<double>(s.headline_count(h.spec->id))));
  }
  for (const record::RecordStats::Reason& reason : s.reasons) {
    out.push_back(counter(fmt::format("ljprof_{}_total", reason.metric), reason.name,
                          static_cast<double>(reason.count)));
  }
  out.push_back(gauge("ljprof_processes_followed", "processes with an unwind context now",
                      static_cast<double>(s.processes_followed)));
  for (const record::RecordStats::Gauge& g : s.gauges) {
    out.push_back(gauge("ljprof_" + g.metric, g.text, static_cast<double>(g.value)));
  }
}

void add_queue_families(const std::vector<std::unique_ptr<UploadQueue>>& queues,
                        std::vector<MetricFamily>& out) {
  MetricFamily uploads{"ljprof_uploads_total",
                       "profiles per sink and outcome: ok, failed (an attempt to retry), "
                       "dropped_full (pushed out of a full queue), dropped_rejected (refused)",
                       MetricType::Counter,
                       {}};
  MetricFamily depth{
      "ljprof_upload_queue_depth", "profiles waiting per sink", MetricType::Gauge, {}};
  for (const auto& q : queues) {
    const QueueCounts c = q->counts();
    const std::string& sink = q->sink_name();
    for (auto [result, value] : {std::pair<const char*, uint64_t>{"ok", c.delivered},
                                 {"failed", c.failed_attempts},
                                 {"dropped_full", c.dropped_full},
                                 {"dropped_rejected", c.dropped_rejected}}) {
      uploads.points.push_back({{{"sink", sink}, {"result", result}}, static_cast<double>(value)});
    }
    depth.points.push_back({{{"sink", sink}}, static_cast<double>(c.depth)});
  }
  out.push_back(std::move(uploads));
  out.push_back(std::move(depth));
}

std::string render_metrics(const AgentState& state,
                           const std::vector<std::unique_ptr<UploadQueue>>& queues) {
  std::vector<MetricFamily> families;
  add_recorder_families(state.stats(), families);
  const auto [intervals, profiles] = state.intervals_and_profiles();
  families.push_back(counter("ljprof_intervals_total", "intervals cut", intervals));
  families.push_back(counter("ljprof_profiles_total", "per-process profiles cut", profiles));
  families.push_back(counter("ljprof_wall_profiles_total",
                             "of which wall-clock fiber profiles (--fiber-wall)",
                             state.wall_profiles()));
  add_queue_families(queues, families);
  families.push_back(
      gauge("process_resident_memory_bytes", "the agent's resident memory", resident_bytes()));
  families.push_back(
      counter("process_cpu_seconds_total", "the agent's CPU time (user + system)", cpu_seconds()));
  std::vector<Histogram> histograms;
  if (state.loop_stalls_enabled) histograms.push_back(state.loop_stalls());
  return render_prometheus(families, histograms);
}

std::string default_host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "unknown";
  return name;
}

// One profile of one process over the interval of `cut`, to every queue; false (and a log line)
// when it cannot be written.
bool deliver_profile(const AgentOptions& o, const std::string& host,
                     const record::IntervalProfiles& cut, const record::ProcessIdentity& process,
                     const profile::Profile& profile, const std::string& kind, uint32_t rate_hz,
                     std::vector<std::unique_ptr<UploadQueue>>& queues) {
  IntervalProfile ip;
  ip.app_name = app_name(process);
  ip.labels = profile_labels(process, host, o.labels);
  ip.pid = process.pid;
  ip.from_unix_s = cut.start_unix_ns / 1000000000;
  ip.until_unix_s = (cut.end_unix_ns + 999999999) / 1000000000;
  ip.sample_rate_hz = rate_hz;
  ip.kind = kind;
  // Pyroscope makes each sample label a series label: fiber names yes, fiber ids (a new one
  // per fiber ever created) no.
  auto bytes = report::pprof_gzip_bytes(profile, report::FiberLabels::NameOnly);
  if (!bytes.ok()) {
    if (o.log) o.log(fmt::format("pid {}: profile not written: {}", ip.pid, bytes.message()));
    return false;
  }
  ip.pprof_gz = std::move(*bytes);
  for (size_t i = 0; i < queues.size(); ++i) {
    if (i + 1 == queues.size()) {
      queues[i]->push(std::move(ip));
    } else {
      queues[i]->push(ip);
    }
  }
  return true;
}

// The identity of a process given with -p that the sampler watches before it shows up in a cut
// (an idle Tarantool may have no CPU sample for many intervals): as record/process_identity.cc
// reads it, its runtime Tarantool (the sampler drops a process that is not).
record::ProcessIdentity tarantool_identity(uint32_t pid) {
  record::ProcessIdentity id;
  id.pid = pid;
  id.comm = proc::read_comm(pid);
  id.executable = proc::executable_name(pid);
  id.runtime = "tarantool";
  id.service = proc::environment_value(pid, {"OTEL_SERVICE_NAME", "PYROSCOPE_APPLICATION_NAME"});
  return id;
}

// The wall-clock fiber profiles of the interval (--fiber-wall): Tarantool processes seen in it
// are watched from now on; each watched one's profile goes out under the identity it was last
// seen with. The count of profiles handed over.
size_t deliver_walls(const AgentOptions& o, const std::string& host,
                     const record::IntervalProfiles& cut, record::FiberWallSampler& walls,
                     std::map<uint32_t, record::ProcessIdentity>& tarantools,
                     std::vector<std::unique_ptr<UploadQueue>>& queues) {
  for (const record::ProcessProfile& pp : cut.processes) {
    if (pp.process.runtime != "tarantool") continue;
    tarantools[pp.process.pid] = pp.process;
    walls.watch(pp.process.pid);
  }
  size_t delivered = 0;
  for (auto& [pid, profile] : walls.cut()) {
    auto process = tarantools.find(pid);
    if (process == tarantools.end() || profile.samples.empty()) continue;
    const auto rate = static_cast<uint32_t>(o.fiber_wall_hz + 0.5);
    delivered += deliver_profile(o, host, cut, process->second, profile, "wall", rate, queues);
  }
  if (o.log) {
    for (const std::string& line : walls.take_log()) o.log(line);
  }
  return delivered;
}

// Per process with samples inside the interval's stalls (--loop-stalls), the profile of the time
// inside them: its CPU samples and off-CPU intervals, each sample counted once.
std::map<uint32_t, profile::Profile> stall_profiles(const record::IntervalProfiles& cut,
                                                    int64_t period_ns) {
  std::map<uint32_t, profile::Profile> out;
  for (const profile::LoopStall& stall : cut.stalls) {
    if (stall.samples.empty()) continue;
    profile::Profile& p = out[stall.pid];
    if (p.samples.empty()) {
      p.value_type = profile::ValueType::LoopStall;
      p.period_ns = period_ns;
      p.start_time_ns = cut.start_unix_ns;
      p.duration_ns = cut.end_unix_ns - cut.start_unix_ns;
    }
    for (profile::Sample s : stall.samples) {
      s.count = 1;
      p.samples.push_back(std::move(s));
    }
  }
  return out;
}

// The stall profiles of the interval, each under the identity its process's CPU profile has (a
// process with samples in a stall has a CPU profile in the same cut). The count handed over.
size_t deliver_stalls(const AgentOptions& o, const std::string& host,
                      const record::IntervalProfiles& cut,
                      std::vector<std::unique_ptr<UploadQueue>>& queues) {
  size_t delivered = 0;
  const int64_t period_ns = 1000000000LL / o.record.frequency_hz;
  for (const auto& [pid, profile] : stall_profiles(cut, period_ns)) {
    for (const record::ProcessProfile& pp : cut.processes) {
      if (pp.process.pid != pid) continue;
      delivered += deliver_profile(o, host, cut, pp.process, profile, "loop_stall",
                                   o.record.frequency_hz, queues);
      break;
    }
  }
  return delivered;
}

// The profiles of one interval, each to every queue.
void deliver_interval(const AgentOptions& o, const std::string& host,
                      record::IntervalProfiles&& cut, record::FiberWallSampler* walls,
                      std::map<uint32_t, record::ProcessIdentity>& tarantools,
                      std::vector<std::unique_ptr<UploadQueue>>& queues, AgentState& state) {
  uint64_t samples = 0;
  int64_t off_cpu_ns = 0;
  size_t cpu_profiles = 0;
  for (record::ProcessProfile& pp : cut.processes) {
    // --off-cpu: an event loop waiting for work is not a problem (profile_frames.h
    // is_idle_wait); a backend's views would add it to every off-CPU graph.
    std::erase_if(pp.profile.samples, [](const profile::Sample& s) { return s.state == "idle"; });
    if (pp.profile.samples.empty()) continue;
    for (const profile::Sample& s : pp.profile.samples) {
      samples += static_cast<uint64_t>(s.count);
      off_cpu_ns += s.off_cpu_ns;
    }
    deliver_profile(o, host, cut, pp.process, pp.profile, "cpu", o.record.frequency_hz, queues);
    ++cpu_profiles;
  }
  const size_t wall_profiles = walls ? deliver_walls(o, host, cut, *walls, tarantools, queues) : 0;
  const size_t stall_profiles = deliver_stalls(o, host, cut, queues);
  state.count_interval(cpu_profiles + wall_profiles + stall_profiles, wall_profiles);
  state.observe_stalls(cut.stalls);
  if (!o.log) return;
  std::string line =
      fmt::format("interval of {:.1f} s{}: {} profile{}, {} samples",
                  (cut.end_unix_ns - cut.start_unix_ns) / 1e9, cut.last ? " (last, partial)" : "",
                  cpu_profiles, cpu_profiles == 1 ? "" : "s", samples);
  if (o.record.off_cpu_threshold_ns != 0)
    line += fmt::format(", {:.2f} s off-CPU", off_cpu_ns / 1e9);
  if (walls) line += fmt::format(", {} wall-clock fiber profile(s)", wall_profiles);
  if (o.record.loop_stall_ns != 0) {
    line +=
        fmt::format(", {} loop stall(s) ({} stall profile(s))", cut.stalls.size(), stall_profiles);
  }
  for (const auto& q : queues) {
    const QueueCounts c = q->counts();
    line += fmt::format("; {}: {} queued, {} delivered, {} dropped", q->sink_name(), c.depth,
                        c.delivered, c.dropped_full + c.dropped_rejected + c.dropped_stopped);
    if (!c.last_error.empty()) line += fmt::format(" (last error: {})", c.last_error);
  }
  o.log(line);
}

// The queue options of one sink, with its attempts logged: a refused profile, a warning, and a
// backend's failures when they start and when they end (not every retry).
QueueOptions logged(QueueOptions qo, const std::string& sink_name,
                    const std::function<void(const std::string&)>& log) {
  if (!log) return qo;
  auto failing = std::make_shared<bool>(false);  // touched by this queue's worker only
  qo.on_attempt = [failing, log, sink_name](const IntervalProfile&, const Delivery& d) {
    if (d.ok) {
      if (*failing) log(fmt::format("{}: delivering again", sink_name));
      *failing = false;
      if (!d.warning.empty()) log(d.warning);
    } else if (!d.retryable) {
      log(fmt::format("profile refused: {}", d.error));
    } else if (!*failing) {
      *failing = true;
      log(fmt::format("{} (retrying with backoff; profiles stay queued)", d.error));
    }
  };
  return qo;
}

Result<std::vector<std::unique_ptr<UploadQueue>>> make_queues(const AgentOptions& o) {
  std::vector<std::unique_ptr<Sink>> sinks;
  if (o.pyroscope) {
    LJ_ASSIGN_OR_RETURN(std::unique_ptr<Sink> sink, make_pyroscope_sink(*o.pyroscope));
    sinks.push_back(std::move(sink));
  }
  if (o.out_dir) {
    LJ_ASSIGN_OR_RETURN(std::unique_ptr<Sink> sink, make_out_dir_sink(*o.out_dir));
    sinks.push_back(std::move(sink));
  }
  if (sinks.empty()) return make_error("no sink: give --pyroscope URL and/or --out-dir DIR");
  std::vector<std::unique_ptr<UploadQueue>> queues;
  for (auto& sink : sinks) {
    const std::string name = sink->name();
    queues.push_back(std::make_unique<UploadQueue>(std::move(sink), logged(o.queue, name, o.log)));
  }
  return queues;
}

}  // namespace

std::string app_name(const record::ProcessIdentity& process) {
  if (!process.service.empty()) return process.service;
  if (!process.executable.empty()) return process.executable;
  if (!process.comm.empty()) return process.comm;
  return "unknown";
}

std::map<std::string, std::string> profile_labels(const record::ProcessIdentity& process,
                                                  const std::string& host_name,
                                                  const std::map<std::string, std::string>& user) {
  std::map<std::string, std::string> labels = user;
  labels["service_name"] = app_name(process);
  labels["host_name"] = host_name;
  labels["pid"] = std::to_string(process.pid);
  labels["runtime"] = process.runtime.empty() ? "luajit" : process.runtime;
  return labels;
}

namespace {

// The first SIGTERM or Ctrl-C ends the recording (record::Recorder's handler); the profiles still
// queued are then delivered for up to the drain timeout. A second one ends that drain at once:
// the agent still prints its summary and exits 0, where the default action killed it (status
// 143) mid-drain. Installed before the recording, which saves it and puts it back at its end;
// until the drain starts it does what the default action does.
std::atomic<int> g_drain_signal_fd{-1};
void on_signal_while_draining(int sig) {
  const int fd = g_drain_signal_fd.load();
  if (fd < 0) {
    ::signal(sig, SIG_DFL);
    ::raise(sig);
    return;
  }
  const uint64_t one = 1;
  const int saved = errno;
  if (::write(fd, &one, sizeof one) < 0) {
    // The eventfd's counter cannot overflow from signals: nothing to do.
  }
  errno = saved;
}

class DrainSignals {
 public:
  DrainSignals() {
    struct sigaction sa {};
    sa.sa_handler = &on_signal_while_draining;
    ::sigaction(SIGINT, &sa, &old_int_);
    ::sigaction(SIGTERM, &sa, &old_term_);
  }
  ~DrainSignals() {
    g_drain_signal_fd = -1;
    ::sigaction(SIGINT, &old_int_, nullptr);
    ::sigaction(SIGTERM, &old_term_, nullptr);
  }
  DrainSignals(const DrainSignals&) = delete;
  DrainSignals& operator=(const DrainSignals&) = delete;

 private:
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

// Stops every queue, each delivering what it holds for up to `timeout_s`; a SIGTERM or Ctrl-C
// meanwhile stops them all at once.
void drain_queues(std::vector<std::unique_ptr<UploadQueue>>& queues, double timeout_s,
                  const std::function<void(const std::string&)>& log) {
  const int fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (fd < 0) {
    for (auto& q : queues) q->stop(timeout_s);
    return;
  }
  g_drain_signal_fd = fd;
  std::atomic<bool> drained{false};
  std::thread watcher([&queues, &drained, &log, fd] {
    pollfd p{fd, POLLIN, 0};
    while (!drained) {
      if (::poll(&p, 1, 100) <= 0 || (p.revents & POLLIN) == 0) continue;
      if (log) log("stopping: the profiles still queued are not sent (a second signal)");
      for (auto& q : queues) q->stop(0);
      return;
    }
  });
  for (auto& q : queues) q->stop(timeout_s);
  drained = true;
  watcher.join();
  g_drain_signal_fd = -1;
  ::close(fd);
}

}  // namespace

Result<AgentSummary> run_agent(AgentOptions o) {
  if (o.record.interval_s <= 0) return make_error("--interval must be positive");
  LJ_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<UploadQueue>> queues, make_queues(o));
  const std::string host = o.host_name.empty() ? default_host_name() : o.host_name;
  AgentState state;
  state.loop_stalls_enabled = o.record.loop_stall_ns != 0;
  std::unique_ptr<MetricsServer> metrics;
  if (!o.metrics_address.empty()) {
    LJ_ASSIGN_OR_RETURN(metrics, MetricsServer::start(o.metrics_address, [&state, &queues] {
                          return render_metrics(state, queues);
                        }));
    if (o.log) {
      const std::string host_part = o.metrics_address.substr(0, o.metrics_address.rfind(':'));
      o.log(fmt::format("metrics on http://{}:{}/metrics", host_part, metrics->port()));
    }
  }
  std::unique_ptr<record::FiberWallSampler> walls;
  std::map<uint32_t, record::ProcessIdentity> tarantools;
  if (o.fiber_wall_hz > 0) {
    walls = std::make_unique<record::FiberWallSampler>(o.fiber_wall_hz);
    for (uint32_t pid : o.record.pids) {
      tarantools[pid] = tarantool_identity(pid);
      walls->watch(pid);
    }
  }
  const DrainSignals drain_signals;
  o.record.keep_running = true;
  o.record.on_stats = [&state](const record::RecordStats& s) { state.set_stats(s); };
  o.record.on_interval = [&](record::IntervalProfiles&& cut) {
    deliver_interval(o, host, std::move(cut), walls.get(), tarantools, queues, state);
  };
  const Clock::time_point start = Clock::now();
  LJ_ASSIGN_OR_RETURN(record::RecordResult recorded, record::record(o.record));
  AgentSummary summary;
  summary.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  drain_queues(queues, o.drain_timeout_s, o.log);
  summary.stats = recorded;
  walls.reset();
  std::tie(summary.intervals, summary.profiles) = state.intervals_and_profiles();
  summary.wall_profiles = state.wall_profiles();
  for (auto& q : queues) summary.sinks.emplace_back(q->sink_name(), q->counts());
  return summary;
}

}  // namespace ljprof::exporter
