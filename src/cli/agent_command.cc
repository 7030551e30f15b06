// `ljprof agent`: continuous profiling of every LuaJIT process on the host (or those the
// filters select), one profile per process per interval to Pyroscope and/or a directory, with a
// Prometheus metrics page (export/agent.h).
#include <fmt/format.h>
#include <unistd.h>

#include <ctime>
#include <iostream>

#include "cli/commands.h"
#include "cli/recording.h"
#include "export/agent.h"

namespace ljprof::cli {

namespace {

// `ljprof agent`'s options as given.
struct AgentFlags {
  RecordingFlags recording;
  std::vector<std::string> comms;
  std::string cgroup;
  double interval = 10;
  std::string pyroscope;
  std::string token;
  std::string basic_auth;
  std::string tenant;
  double upload_timeout = 10;
  std::vector<std::string> labels;
  std::string out_dir;
  uint32_t keep_files = 1000;
  uint32_t keep_mb = 1024;
  uint32_t queue = 64;
  std::string metrics;
  double fiber_wall = 0;
  bool quiet = false;
};

// Called from the recorder's loop and from every sink's upload thread: localtime_r, and the
// whole line written at once so that lines do not interleave.
void log_line(const std::string& line) {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  char stamp[32] = "";
  if (::localtime_r(&now, &local) != nullptr) {
    std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &local);
  }
  std::cerr << fmt::format("{} ljprof agent: {}\n", stamp, line) << std::flush;
}

// The flags as the agent's options; an error names the flag.
Result<exporter::AgentOptions> agent_options(const AgentFlags& f) {
  exporter::AgentOptions o;
  LJ_ASSIGN_OR_RETURN(o.record, recording_options(f.recording));
  o.record.all = o.record.pids.empty();
  o.record.comms = f.comms;
  o.record.cgroup = f.cgroup;
  o.record.interval_s = f.interval;
  for (const std::string& label : f.labels) {
    const size_t eq = label.find('=');
    if (eq == 0 || eq == std::string::npos || eq + 1 == label.size()) {
      return make_error("--label '{}': expected KEY=VALUE", label);
    }
    o.labels[label.substr(0, eq)] = label.substr(eq + 1);
  }
  if (!f.pyroscope.empty()) {
    exporter::PyroscopeOptions p;
    p.url = f.pyroscope;
    p.bearer_token = f.token;
    if (!f.basic_auth.empty()) {
      const size_t colon = f.basic_auth.find(':');
      if (colon == std::string::npos) return make_error("--pyroscope-basic-auth: USER:PASSWORD");
      p.basic_user = f.basic_auth.substr(0, colon);
      p.basic_password = f.basic_auth.substr(colon + 1);
    }
    p.tenant_id = f.tenant;
    p.timeout_s = f.upload_timeout;
    p.connect_timeout_s = std::min(3.0, f.upload_timeout);
    o.pyroscope = p;
  }
  if (!f.out_dir.empty()) {
    o.out_dir = exporter::OutDirOptions{f.out_dir, f.keep_files, uint64_t{f.keep_mb} << 20};
  }
  o.queue.capacity = f.queue;
  // Retries no further apart than an interval: a backend that comes back gets the backlog
  // before the next interval's profiles pile onto it.
  o.queue.initial_backoff_s = std::min(1.0, f.interval / 4);
  o.queue.max_backoff_s = std::max(o.queue.initial_backoff_s, std::min(30.0, f.interval));
  o.drain_timeout_s = std::min(5.0, f.interval);
  o.metrics_address = f.metrics;
  o.fiber_wall_hz = f.fiber_wall;
  return o;
}

int run_agent_command(exporter::AgentOptions options, bool quiet) {
  options.log = log_line;
  options.record.warn = [](const std::string& m) { log_line("warning: " + m); };
  if (quiet) options.log = nullptr;
  auto summary = exporter::run_agent(std::move(options));
  if (!summary.ok()) {
    std::cerr << "ljprof agent: " << summary.message() << "\n";
    return 2;
  }
  print_record_summary(std::cerr, "agent", summary->stats, summary->seconds);
  print_record_gauges(std::cerr, "agent", summary->stats);
  std::cerr << fmt::format("ljprof agent: {} intervals, {} profiles ({} wall-clock fiber)\n",
                           summary->intervals, summary->profiles, summary->wall_profiles);
  for (const auto& [name, c] : summary->sinks) {
    std::cerr << fmt::format(
        "ljprof agent: {}: {} delivered, {} failed attempts, {} dropped (queue full), {} "
        "refused, {} still queued\n",
        name, c.delivered, c.failed_attempts, c.dropped_full, c.dropped_rejected, c.depth);
  }
  return 0;
}

}  // namespace

void add_agent_command(CommandLine& cli) {
  auto f = std::make_shared<AgentFlags>();
  Command cmd = cli.add(
      "agent",
      "Profile every LuaJIT process on this host continuously (tarantool, nginx-lua/OpenResty, "
      "luajit; ones that start later too) and push one pprof profile per process every "
      "interval to Pyroscope and/or a directory. Runs until SIGTERM or Ctrl-C, then sends the "
      "last, partial interval (a second signal stops the sending). Needs root (or the "
      "capabilities of packaging/ljprof-agent.service). Sampling never waits on a slow or "
      "absent backend: profiles queue (bounded, oldest dropped first) and are retried with "
      "backoff.");
  add_pid_option(cmd, f->recording, "Only these processes (comma-separated PIDs)");
  cmd.option("--comm", f->comms,
             "Only processes whose name (comm or executable) is NAME; repeatable")
      .type_name("NAME");
  cmd.option("--cgroup", f->cgroup,
             "Only processes in this cgroup or below it (the path in /proc/PID/cgroup, e.g. "
             "/system.slice/tarantool.service)")
      .type_name("PATH");
  add_frequency_option(cmd, f->recording, 49, 1000);
  cmd.option("--interval", f->interval, "Seconds per profile (default 10)").range(1, 3600);
  add_duration_option(cmd, f->recording, "run until SIGTERM");
  cmd.option("--pyroscope", f->pyroscope,
             "Push to Pyroscope's ingest API at URL (http:// or https://, e.g. "
             "http://pyroscope:4040; Grafana Cloud Profiles and Alloy's pyroscope.receive_http "
             "speak it too)")
      .type_name("URL");
  cmd.option("--pyroscope-token", f->token,
             "Bearer token for the push (or the environment's LJPROF_PYROSCOPE_TOKEN)")
      .type_name("TOKEN")
      .env("LJPROF_PYROSCOPE_TOKEN");
  cmd.option("--pyroscope-basic-auth", f->basic_auth,
             "HTTP basic auth for the push (or LJPROF_PYROSCOPE_BASIC_AUTH)")
      .type_name("USER:PASSWORD")
      .env("LJPROF_PYROSCOPE_BASIC_AUTH");
  cmd.option("--tenant-id", f->tenant, "X-Scope-OrgID header (multi-tenant Pyroscope)")
      .type_name("ID");
  cmd.option("--upload-timeout", f->upload_timeout, "Seconds one push may take (default 10)")
      .range(0.1, 600);
  cmd.option("--label", f->labels,
             "KEY=VALUE added to every profile's labels; repeatable (service_name, host_name, "
             "pid and runtime are always set)")
      .type_name("KEY=VALUE");
  cmd.option("--out-dir", f->out_dir,
             "Also write every profile to DIR as TIME-APP-PID.pb.gz (go tool pprof, ljprof "
             "report)")
      .type_name("DIR");
  cmd.option("--keep-files", f->keep_files, "--out-dir keeps the newest N files (default 1000)")
      .range(1, 10000000);
  cmd.option("--keep-mb", f->keep_mb, "--out-dir keeps at most MB megabytes (default 1024)")
      .range(1, 10000000);
  cmd.option("--queue", f->queue,
             "Profiles each sink may hold while its backend is slow or down (default 64); "
             "beyond, the oldest is dropped and counted")
      .range(1, 100000);
  cmd.option("--metrics-addr", f->metrics,
             "Serve Prometheus metrics on http://HOST:PORT/metrics (e.g. 127.0.0.1:9464)")
      .type_name("HOST:PORT");
  cmd.option("--fiber-wall", f->fiber_wall,
             "Also send a wall-clock fiber profile of every Tarantool process each interval: HZ "
             "snapshots a second of where its fibers are, running or waiting (pprof wall type, "
             "labels fiber and state; out-dir files TIME-APP-PID.wall.pb.gz). Off by default; "
             "10 costs about 1% of a CPU for 1000 waiting fibers")
      .type_name("HZ")
      .range(0, 100);
  add_off_cpu_option(cmd, f->recording,
                     "each profile gets the sample type off_cpu/nanoseconds beside cpu "
                     "(Pyroscope: process_cpu:off_cpu, label state blocked or preempted); the "
                     "event loop's idle wait is not sent");
  add_loop_stalls_option(cmd, f->recording,
                         "the metrics page gets the histogram ljprof_loop_stall_seconds, each "
                         "interval's log line the count, and each process with stalls a profile "
                         "of the time inside them, on and off the CPU (Pyroscope APP.loop_stall; "
                         "out-dir TIME-APP-PID.loop_stall.pb.gz)");
  add_recording_resource_options(cmd, f->recording,
                                 "Kernel ring buffer in MiB, a power of two (default: a second "
                                 "of samples, CPUs x freq x 1 KiB, 256 KiB to 256 MiB)");
  cmd.flag("-q,--quiet", f->quiet, "No log line per interval (errors are still printed)");
  cmd.footer(
      "--config FILE: options from a TOML file, under [agent], one per line by its long name "
      "without '--'; the command line wins. E.g.\n"
      "  [agent]\n"
      "  pyroscope = \"http://pyroscope:4040\"\n"
      "  interval = 15\n"
      "  label = [\"env=prod\", \"dc=eu1\"]\n"
      "Labels: service_name is the process's OTEL_SERVICE_NAME or PYROSCOPE_APPLICATION_NAME, "
      "else its executable's name; runtime is tarantool, openresty or luajit.\n"
      "Examples:\n"
      "  ljprof agent --pyroscope http://127.0.0.1:4040 --metrics-addr 127.0.0.1:9464\n"
      "  ljprof agent --comm tarantool --out-dir /var/lib/ljprof --interval 60");
  cmd.run([f] {
    auto options = agent_options(*f);
    if (!options.ok()) {
      std::cerr << "ljprof agent: " << options.message() << "\n";
      return 2;
    }
    return run_agent_command(std::move(*options), f->quiet);
  });
}

}  // namespace ljprof::cli
