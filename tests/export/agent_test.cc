// `ljprof agent` live, against real processes (two tarantools, an nginx-lua worker under a local
// HTTP load, luajit) and a local receiver that holds Pyroscope's ingest contract
// (support/pyroscope_receiver.h). What arrives is decoded by the real `go tool pprof`; the
// sample totals are compared with a `ljprof record` of the same processes over the same time;
// the metrics page is checked with Prometheus's own `promtool`.
#include <elf.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "record/process_context.h"
#include "support/nginx_lua.h"
#include "support/pyroscope_receiver.h"
#include "support/test_support.h"

namespace ljprof {
namespace {

using Receiver = test::PyroscopeReceiver;

void sleep_s(double s) {
  std::this_thread::sleep_for(std::chrono::duration<double>(s));
}

// A running `ljprof agent`, its stderr in a log file.
class Agent {
 public:
  Agent(const std::string& dir, std::vector<std::string> args) : log_(dir + "/agent.log") {
    args.insert(args.begin(), {test::ljprof_bin(), "agent"});
    process_ = std::make_unique<test::Background>(args, log_);
  }
  pid_t pid() const { return process_->pid(); }
  std::string log() const { return test::read_text(log_); }
  // The port of its metrics page, from its "metrics on http://HOST:PORT/metrics" line.
  int metrics_port(double timeout_s) {
    static const std::regex kLine(R"(metrics on http://[^:]+:(\d+)/metrics)");
    for (double waited = 0; waited < timeout_s; waited += 0.05) {
      std::smatch m;
      const std::string text = log();
      if (std::regex_search(text, m, kLine)) return std::stoi(m[1]);
      if (!process_->running()) return 0;
      sleep_s(0.05);
    }
    return 0;
  }
  // Waits until its log contains `text`: false on timeout or if it exited.
  bool wait_for_log(const std::string& text, double timeout_s) {
    for (double waited = 0; waited < timeout_s; waited += 0.05) {
      if (log().find(text) != std::string::npos) return true;
      if (!process_->running()) return false;
      sleep_s(0.05);
    }
    return false;
  }
  // SIGTERM, then its exit status (-1 if it did not exit within 15 s).
  int terminate() {
    ::kill(process_->pid(), SIGTERM);
    return process_->wait(15000);
  }
  // The exit status of an agent that stops by itself (-d).
  int wait_exit() { return process_->wait(15000); }

 private:
  std::string log_;
  std::unique_ptr<test::Background> process_;
};

// How long the process has run on a CPU, in ns (/proc/PID/schedstat); 0 if gone.
double on_cpu_ns(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/schedstat");
  double ns = 0;
  in >> ns;
  return ns;
}

// Resident memory of a process in KiB (/proc/PID/status VmRSS); 0 if gone.
long rss_kib(pid_t pid, const std::string& field = "VmRSS") {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stol(line.substr(field.size() + 1));
  }
  return 0;
}

// Samples per pid label of the profiles in `files`, merged and printed by `go tool pprof -raw`.
std::map<uint32_t, int64_t> samples_by_pid(const std::string& dir,
                                           const std::vector<std::string>& files) {
  std::vector<std::string> args = {"-raw"};
  args.insert(args.end(), files.begin(), files.end());
  test::CommandResult raw = test::go_tool_pprof(dir, args);
  EXPECT_EQ(raw.exit_code, 0) << raw.err;
  std::map<uint32_t, int64_t> out;
  for (const test::PprofRawSample& s : test::parse_pprof_raw_samples(raw.out)) {
    auto pid = s.labels.find("pid");
    if (pid != s.labels.end()) out[static_cast<uint32_t>(std::stoul(pid->second))] += s.count;
  }
  return out;
}

// The received bodies with status `status`, each written to a file of `dir`.
std::vector<std::string> write_bodies(const std::string& dir,
                                      const std::vector<Receiver::Request>& requests,
                                      const std::string& pid = "") {
  std::vector<std::string> files;
  for (size_t i = 0; i < requests.size(); ++i) {
    const Receiver::Request& r = requests[i];
    if (r.status != 200) continue;
    if (!pid.empty() && Receiver::name_labels(r.param("name"))["pid"] != pid) continue;
    files.push_back(dir + "/body-" + std::to_string(i) + ".pb.gz");
    std::ofstream(files.back(), std::ios::binary) << r.body;
  }
  return files;
}

std::string host_name() {
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  return name;
}

// The agent's intervals, from its log lines "interval of 1.0 s: 1 profile, N samples" (the last,
// partial interval excluded): their sample counts, or with `seconds` their lengths.
std::vector<double> intervals_of(const std::string& log, bool seconds) {
  static const std::regex kLine(R"(interval of ([0-9.]+) s: \d+ profiles?, (\d+) samples)");
  std::vector<double> out;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), kLine); it != std::sregex_iterator();
       ++it) {
    out.push_back(std::stod((*it)[seconds ? 1 : 2]));
  }
  return out;
}
std::vector<double> interval_samples(const std::string& log) {
  return intervals_of(log, false);
}

struct SinkSummary {
  int64_t delivered = -1, failed = -1, dropped_full = -1, refused = -1, queued = -1;
};
// "ljprof agent: NAME: D delivered, F failed attempts, X dropped (queue full), R refused, Q still
// queued"
SinkSummary sink_summary(const std::string& log, const std::string& sink_prefix) {
  const std::regex line(
      sink_prefix +
      R"([^\n]*?: (\d+) delivered, (\d+) failed attempts, (\d+) dropped \(queue full\), (\d+) refused, (\d+) still queued)");
  std::smatch m;
  SinkSummary s;
  if (std::regex_search(log, m, line)) {
    s = {std::stoll(m[1]), std::stoll(m[2]), std::stoll(m[3]), std::stoll(m[4]), std::stoll(m[5])};
  }
  return s;
}

int64_t profiles_cut(const std::string& log) {
  static const std::regex kLine(R"(ljprof agent: (\d+) intervals, (\d+) profiles)");
  std::smatch m;
  return std::regex_search(log, m, kLine) ? std::stoll(m[2]) : -1;
}

// A metrics page as name -> value and name -> help (no labels: the recorder's counters).
struct Page {
  std::map<std::string, double> value;
  std::map<std::string, std::string> help;
  std::string text;
};
Page scrape(int port) {
  Page page;
  test::HttpResponse r = test::http_get(port, "/metrics", 5000);
  EXPECT_EQ(r.status, 200);
  page.text = r.body;
  std::istringstream in(r.body);
  std::string line;
  static const std::regex kHelp(R"(^# HELP (\S+) (.*)$)"),
      kValue(R"(^([a-zA-Z_:][a-zA-Z0-9_:]*) (\S+)$)");
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_match(line, m, kHelp)) page.help[m[1]] = m[2];
    if (std::regex_match(line, m, kValue)) page.value[m[1]] = std::stod(m[2]);
  }
  return page;
}

// Waits until the agent follows no process and its counters stand still: two scrapes 1.5 s
// apart (its recorder figures on the page are refreshed every second) with nothing followed and
// the same sample and profile totals. The last scrape (a test failure if it never settled).
Page wait_until_settled(int port, double timeout_s) {
  Page last = scrape(port);
  const bool settled = test::wait_until(
      [&] {
        sleep_s(1.5);
        Page now = scrape(port);
        const bool same = now.value["ljprof_processes_followed"] == 0 &&
                          last.value["ljprof_processes_followed"] == 0 &&
                          now.value["ljprof_samples_total"] == last.value["ljprof_samples_total"] &&
                          now.value["ljprof_profiles_total"] == last.value["ljprof_profiles_total"];
        last = std::move(now);
        return same;
      },
      timeout_s);
  if (!settled)
    ADD_FAILURE() << "the agent's page did not settle in " << timeout_s << " s\n" << last.text;
  return last;
}

// Polls the metrics page every 50 ms until `done(page)` or `timeout_s`; the last page.
Page scrape_until(int port, double timeout_s, const std::function<bool(Page&)>& done) {
  Page page = scrape(port);
  for (double waited = 0; waited < timeout_s && !done(page); waited += 0.05) {
    sleep_s(0.05);
    page = scrape(port);
  }
  return page;
}

// (1) Two tarantools (one naming its service in OTEL_SERVICE_NAME) and an nginx-lua worker under
// load: each interval brings one profile per process with the right labels, the last (partial)
// interval is sent at SIGTERM, and per process the samples of all intervals add up to what a
// `ljprof record` of the same processes over the same seconds counted.
TEST(AgentLive, OneProfilePerProcessPerIntervalAddsUpToOneRecording) {
  ASSERT_EQ(geteuid(), 0u) << "ljprof agent needs root";
  test::TempDir tmp;
  const std::string dir = tmp.path(), go = dir + "/go", stop = dir + "/stop";
  // The tarantools idle until `go` exists, run split.lua's rounds for 5 s, then idle until
  // `stop`: both recorders are attached before the first and after the last busy second, so
  // they sample the same CPU time.
  const std::string gated = dir + "/gated.lua";
  std::ofstream(gated)
      << "local ffi = require('ffi')\n"
      << "ffi.cdef('int usleep(unsigned int)')\n"
      << "local function wait(f) while not io.open(f) do ffi.C.usleep(20000) end end\n"
      << "local go, stop, report = arg[1], arg[2], arg[3]\n"
      << "wait(go)\n"
      << "arg = {[0] = '" << test::record_workloads_dir()
      << "/run_split.lua', '5', report, 'jit_on'}\n"
      << "dofile(arg[0])\n"
      << "wait(stop)\n";
  test::Background t1({"env", "OTEL_SERVICE_NAME=orders", "/usr/bin/tarantool", gated, go, stop,
                       dir + "/t1.report"},
                      dir + "/t1.out");
  test::Background t2({"/usr/bin/tarantool", gated, go, stop, dir + "/t2.report"}, dir + "/t2.out");
  test::NginxLua nginx(dir + "/nginx", false);
  ASSERT_EQ(nginx.error(), "");
  const std::string pids = fmt::format("{},{},{}", t1.pid(), t2.pid(), nginx.worker());

  Receiver receiver;
  // 999 Hz: a few thousand samples per process, so chance alone moves the two counts apart by
  // well under the 5% allowed (at 99 Hz, a few hundred samples, it was about that much).
  Agent agent(dir, {"-p", pids, "-F", "999", "--interval", "1", "--pyroscope", receiver.url(),
                    "--label", "env=test"});
  test::Background record({test::ljprof_bin(), "record", "-p", pids, "-F", "999", "-d", "60", "-q",
                           "-o", dir + "/record.pb.gz"},
                          dir + "/record.log");
  // Both attached: the agent has cut an interval (the processes idle: no profile yet), the
  // recorder samples (its perf events are open; with -q it prints nothing until it ends).
  ASSERT_TRUE(agent.wait_for_log("interval of", 60)) << agent.log();
  ASSERT_TRUE(test::wait_until_sampling(record.pid(), 60)) << test::read_text(dir + "/record.log");
  std::ofstream(go) << "go\n";
  // The nginx worker's share: a request at a time for the same 5 s.
  const auto load_end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < load_end) {
    EXPECT_EQ(test::http_get(nginx.port(), "/round", 10000).status, 200);
  }
  // The tarantools end their busy 5 s with their round in progress (~50 ms of CPU, split.lua).
  EXPECT_TRUE(test::wait_until(
      [&] {
        return test::file_exists(dir + "/t1.report") && test::file_exists(dir + "/t2.report");
      },
      60))
      << test::read_text(dir + "/t1.out") << test::read_text(dir + "/t2.out");
  sleep_s(0.5);
  ::kill(record.pid(), SIGINT);
  EXPECT_EQ(record.wait(15000), 0) << test::read_text(dir + "/record.log");
  sleep_s(0.5);
  const int agent_exit = agent.terminate();  // mid-interval: the partial one is flushed
  std::ofstream(stop) << "stop\n";
  EXPECT_EQ(t1.wait(10000), 0);
  EXPECT_EQ(t2.wait(10000), 0);
  EXPECT_EQ(nginx.stop(), 0) << nginx.logs();
  ASSERT_EQ(agent_exit, 0) << agent.log();
  const std::string log = agent.log();
  EXPECT_EQ(receiver.violations(), std::vector<std::string>{});
  EXPECT_NE(log.find("(last, partial)"), std::string::npos) << log;

  const std::vector<Receiver::Request> requests = receiver.requests();
  EXPECT_EQ(static_cast<int64_t>(requests.size()), profiles_cut(log)) << log;
  std::map<std::string, std::set<std::string>> intervals;  // pid -> `from` of its profiles
  const std::map<std::string, std::pair<std::string, std::string>> expected = {
      {std::to_string(t1.pid()), {"orders", "tarantool"}},
      {std::to_string(t2.pid()), {"tarantool", "tarantool"}},
      {std::to_string(nginx.worker()), {"nginx", "openresty"}}};
  for (const Receiver::Request& r : requests) {
    auto labels = Receiver::name_labels(r.param("name"));
    ASSERT_EQ(expected.count(labels["pid"]), 1u) << r.param("name");
    const auto& [service, runtime] = expected.at(labels["pid"]);
    EXPECT_EQ(labels["service_name"], service) << r.param("name");
    EXPECT_EQ(labels["runtime"], runtime) << r.param("name");
    EXPECT_EQ(labels["host_name"], host_name()) << r.param("name");
    EXPECT_EQ(labels["env"], "test") << r.param("name");
    EXPECT_EQ(r.param("sampleRate"), "999");
    EXPECT_TRUE(intervals[labels["pid"]].insert(r.param("from")).second)
        << "two profiles of pid " << labels["pid"] << " from " << r.param("from");
  }
  for (const auto& [pid, unused] : expected) {
    EXPECT_GE(intervals[pid].size(), 5u) << "pid " << pid << "\n" << log;
  }

  // Per process, every interval together against the one long recording.
  const auto agent_samples = samples_by_pid(dir, write_bodies(dir, requests));
  const auto record_samples = samples_by_pid(dir, {dir + "/record.pb.gz"});
  for (const auto& [pid, unused] : expected) {
    const uint32_t p = static_cast<uint32_t>(std::stoul(pid));
    ASSERT_GT(record_samples.count(p), 0u) << "record saw no sample of " << pid;
    const double a = agent_samples.count(p) ? agent_samples.at(p) : 0;
    const double r = record_samples.at(p);
    std::cout << "pid " << pid << ": agent " << a << " samples, record " << r << "\n";
    EXPECT_NEAR(a / r, 1.0, 0.05) << "pid " << pid << ": agent " << a << " vs record " << r;
  }
}

// A luajit busy (run_split.lua, JIT on) until the file `stop` exists, at most 120 s.
std::vector<std::string> busy_luajit(const std::string& dir, const std::string& stop) {
  return {"/usr/bin/luajit",
          test::record_workloads_dir() + "/run_split.lua",
          "120",
          dir + "/report",
          "jit_on",
          stop};
}

// (2) The backend goes down for three intervals, comes back, then hangs (accepts, never
// answers): the queue keeps what fits and drops the oldest beyond it, the backlog arrives when
// the backend is back, uploads time out while it hangs, and sampling never pauses.
TEST(AgentLive, ABackendThatIsDownOrHangsNeverPausesSampling) {
  ASSERT_EQ(geteuid(), 0u) << "ljprof agent needs root";
  test::TempDir tmp;
  const std::string dir = tmp.path(), stop = dir + "/stop";
  test::Background luajit(busy_luajit(dir, stop), dir + "/luajit.out");
  Receiver receiver;
  Agent agent(dir, {"-p", std::to_string(luajit.pid()), "-F", "999", "--interval", "1", "--queue",
                    "2", "--upload-timeout", "0.5", "--pyroscope", receiver.url()});
  // The target's CPU time at each interval cut, read when the agent logs the cut (polled every
  // 10 ms): a busy process gets as much of a CPU as the host's other load leaves it, so an
  // interval's samples are judged against its CPU time, not against the other intervals'.
  // `alone` is false where two cuts showed up in one poll (their CPU times are not told apart).
  std::vector<double> cpu_at_cut;
  std::vector<bool> alone;
  std::atomic<bool> watching{true};
  std::thread watcher([&] {
    while (watching) {
      const size_t seen = interval_samples(agent.log()).size();
      const double cpu = on_cpu_ns(luajit.pid());
      const bool one = seen == cpu_at_cut.size() + 1;
      while (cpu_at_cut.size() < seen) {
        cpu_at_cut.push_back(cpu);
        alone.push_back(one);
      }
      sleep_s(0.01);
    }
  });
  struct StopWatching {
    std::atomic<bool>& flag;
    std::thread& thread;
    ~StopWatching() {
      flag = false;
      if (thread.joinable()) thread.join();
    }
  } stop_watching{watching, watcher};
  ASSERT_TRUE(receiver.wait_for_requests(2, 60)) << agent.log();
  // Its Pyroscope sink loaded libcurl (export/curl_api.h).
  EXPECT_NE(test::read_text(fmt::format("/proc/{}/maps", agent.pid())).find("/libcurl.so.4"),
            std::string::npos);
  const long rss_before = rss_kib(agent.pid());
  receiver.stop();
  sleep_s(3.3);
  const long rss_down = rss_kib(agent.pid());
  ASSERT_TRUE(receiver.start());
  sleep_s(2);
  receiver.set_mode(Receiver::Mode::Hang);
  sleep_s(2);
  const long rss_hang = rss_kib(agent.pid());
  receiver.set_mode(Receiver::Mode::Up);
  sleep_s(2);
  watching = false;
  watcher.join();
  ASSERT_EQ(agent.terminate(), 0) << agent.log();
  std::ofstream(stop) << "stop\n";
  EXPECT_EQ(luajit.wait(10000), 0);
  const std::string log = agent.log();
  EXPECT_EQ(receiver.violations(), std::vector<std::string>{});

  const SinkSummary s = sink_summary(log, "pyroscope");
  const int64_t cut = profiles_cut(log);
  ASSERT_GE(s.delivered, 0) << log;
  EXPECT_GE(s.dropped_full, 1) << "three intervals down with room for two\n" << log;
  EXPECT_GE(s.failed, 2) << "refused connections and timeouts while it hung\n" << log;
  EXPECT_EQ(s.refused, 0) << log;
  EXPECT_EQ(s.delivered + s.dropped_full + s.queued, cut) << log;
  std::set<std::string> from;
  for (const Receiver::Request& r : receiver.requests()) {
    if (r.status == 200) from.insert(r.param("from"));
  }
  EXPECT_EQ(static_cast<int64_t>(from.size()), s.delivered) << "each profile arrived once\n" << log;

  // Sampling went on at the same pace whatever the backend did. The recorder cut every interval
  // on time: one held up by an upload (whose timeout is half a second) cuts at 1.5 s or later,
  // while waiting for a CPU under load cut some at 1.2 s. And every interval holds about kHz
  // samples per second of the target's own CPU time: samples held back into the next interval
  // put that one above it, sampling that stopped leaves one far below. The target's CPU time,
  // not the interval's length, because a busy process gets as much of a CPU as the host's other
  // load leaves it. Fewer samples also happen without a fault: the host preempting this VM's
  // CPUs (unseen by the guest's clocks) and other profilers' programs on the same CPUs cost some
  // intervals up to a third of their samples on this 2-core machine under load. 999 Hz keeps
  // the count's own noise to ~3% per interval when the target gets half a CPU.
  constexpr double kHz = 999;  // -F
  const std::vector<double> lengths = intervals_of(log, true);
  for (size_t i = 1; i < lengths.size(); ++i) {
    EXPECT_LE(lengths[i], 1.4) << "interval " << i << " was cut late\n" << log;
  }
  const std::vector<double> per = interval_samples(log);
  ASSERT_GE(cpu_at_cut.size(), 9u) << log;
  int judged = 0;
  std::ostringstream rates;
  for (size_t i = 1; i < cpu_at_cut.size(); ++i) {  // the first began while the agent attached
    const double cpu_s = (cpu_at_cut[i] - cpu_at_cut[i - 1]) / 1e9;
    if (!alone[i - 1] || !alone[i] || cpu_s <= 0) {
      rates << " -";
      continue;
    }
    const double rate = per.at(i) / cpu_s / kHz;
    rates << " " << rate;
    ++judged;
    EXPECT_LT(rate, 1.25) << "interval " << i << ": " << per.at(i) << " samples in " << cpu_s
                          << " s of the target's CPU\n"
                          << log;
    EXPECT_GT(rate, 0.5) << "interval " << i << ": " << per.at(i) << " samples in " << cpu_s
                         << " s of the target's CPU\n"
                         << log;
  }
  EXPECT_GE(judged, 6) << log;
  std::cout << "samples per CPU second of the target over " << kHz
            << ", per interval:" << rates.str() << "\n";
  std::cout << "agent RSS: " << rss_before << " KiB before, " << rss_down << " after 3.3 s down, "
            << rss_hang << " while hanging\n";
  EXPECT_LT(rss_down - rss_before, 4096) << "KiB";
  EXPECT_LT(rss_hang - rss_before, 4096) << "KiB";
}

// At SIGTERM the agent still delivers what is queued, for up to a drain timeout (5 s at a 5 s
// interval); an operator who signals again does not want to wait: the second SIGTERM ends the
// drain at once, and the agent still prints its summary and exits 0 (the default action killed
// it with status 143, summary lost). The backend hangs, so the drain would take its whole time.
TEST(AgentLive, ASecondSigtermEndsTheUploadDrainAndTheSummaryIsStillPrinted) {
  ASSERT_EQ(geteuid(), 0u) << "ljprof agent needs root";
  test::TempDir tmp;
  const std::string dir = tmp.path(), stop = dir + "/stop";
  test::Background luajit(busy_luajit(dir, stop), dir + "/luajit.out");
  Receiver receiver;
  receiver.set_mode(Receiver::Mode::Hang);
  Agent agent(dir, {"-p", std::to_string(luajit.pid()), "-F", "99", "--interval", "5",
                    "--upload-timeout", "60", "--pyroscope", receiver.url()});
  ASSERT_TRUE(receiver.wait_for_requests(1, 30)) << agent.log();
  ::kill(agent.pid(), SIGTERM);
  sleep_s(0.5);
  const auto second = std::chrono::steady_clock::now();
  const int status = agent.terminate();
  const double after_second =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - second).count();
  std::ofstream(stop) << "stop\n";
  EXPECT_EQ(luajit.wait(10000), 0);
  const std::string log = agent.log();
  EXPECT_EQ(status, 0) << log;
  // Well before the 4.5 s the drain had left (the hanging upload is cancelled at once).
  EXPECT_LT(after_second, 3.0) << log;
  EXPECT_NE(log.find("a second signal"), std::string::npos) << log;
  const SinkSummary s = sink_summary(log, "pyroscope");
  EXPECT_GE(s.queued, 1) << "the profile in flight was not delivered\n" << log;
  receiver.set_mode(Receiver::Mode::Up);
}

// (3) 120 short-lived luajit processes under `-a`: they are followed (from their exec) and
// every one is released — the followed count returns to zero and the agent's memory to within
// 10% — and the metrics page is valid Prometheus text whose counters equal the summary the
// agent prints when it stops.
TEST(AgentLive, ShortLivedProcessesAreReleasedAndMetricsEqualTheSummary) {
  ASSERT_EQ(geteuid(), 0u) << "ljprof agent needs root";
  test::TempDir tmp;
  const std::string dir = tmp.path();
  // Most options from a config file, as the systemd unit runs it.
  std::ofstream(dir + "/agent.conf") << "[agent]\ncomm = [\"luajit\"]\ninterval = 1\nout-dir = \""
                                     << dir << "/profiles\"\nkeep-files = 500\n";
  Agent agent(dir, {"--config", dir + "/agent.conf", "-F", "99", "--metrics-addr", "127.0.0.1:0"});
  const int port = agent.metrics_port(60);
  ASSERT_GT(port, 0) << agent.log();
  // It only writes files: libcurl, loaded for uploads alone (export/curl_api.h), is not mapped.
  EXPECT_EQ(test::read_text(fmt::format("/proc/{}/maps", agent.pid())).find("libcurl"),
            std::string::npos);
  auto busy = [](const std::string& seconds) {
    return "local t = os.clock() while os.clock() - t < " + seconds + " do end";
  };
  // Warm-up: the first luajit makes the agent read and upload luajit's tables once. It runs until
  // the agent has written a profile of it (its exec may come before the agent's program is
  // loaded: then the agent's first /proc scan finds it), so the memory measured next includes
  // those tables.
  const std::string warm_stop = dir + "/warm-stop";
  test::Background warm({"/usr/bin/luajit", "-e",
                         "repeat " + busy("0.05") + " local f = io.open('" + warm_stop +
                             "') if f then f:close() break end until false"});
  const std::string warm_file_end = "-" + std::to_string(warm.pid()) + ".pb.gz";
  EXPECT_TRUE(test::wait_until(
      [&] {
        std::error_code ec;
        for (const auto& e : std::filesystem::directory_iterator(dir + "/profiles", ec)) {
          const std::string name = e.path().filename().string();
          if (name.size() > warm_file_end.size() &&
              name.compare(name.size() - warm_file_end.size(), warm_file_end.size(),
                           warm_file_end) == 0) {
            return true;
          }
        }
        return false;
      },
      60))
      << agent.log();
  std::ofstream(warm_stop) << "stop\n";
  EXPECT_EQ(warm.wait(10000), 0);
  // Its exit seen (housekeeping every 0.5 s), its state released at the next cut.
  Page before = wait_until_settled(port, 60);
  EXPECT_EQ(before.value["ljprof_processes_followed"], 0) << before.text << agent.log();
  const long rss_start = rss_kib(agent.pid());

  // 120 processes over about 9 s, two at a time.
  std::vector<std::unique_ptr<test::Background>> running;
  for (int i = 0; i < 120; ++i) {
    running.push_back(std::make_unique<test::Background>(
        std::vector<std::string>{"/usr/bin/luajit", "-e", busy("0.05")}));
    if (running.size() == 2) {
      for (auto& p : running) EXPECT_EQ(p->wait(10000), 0);
      running.clear();
    }
    sleep_s(0.02);
  }
  for (auto& p : running) EXPECT_EQ(p->wait(10000), 0);
  // Every exit seen, every state released, the last profiles cut; then the rows of their files
  // freed too (a second after the last of them is released): from then on no counter moves.
  wait_until_settled(port, 60);
  Page after =
      scrape_until(port, 10, [](Page& p) { return p.value["ljprof_unwind_rows_in_use"] == 0; });
  const long rss_end = rss_kib(agent.pid());
  EXPECT_EQ(after.value["ljprof_processes_followed"], 0) << after.text;
  std::cout << "agent RSS: " << rss_start << " KiB before the churn, " << rss_end << " after; "
            << after.value["ljprof_profiles_total"] - before.value["ljprof_profiles_total"]
            << " profiles of short-lived processes\n";
  EXPECT_LE(rss_end, rss_start * 11 / 10);
  EXPECT_GE(after.value["ljprof_profiles_total"] - before.value["ljprof_profiles_total"], 60)
      << "most of the 120 processes were sampled\n"
      << agent.log();

  // Prometheus's own checker on the page.
  const std::string page_file = dir + "/metrics.txt";
  std::ofstream(page_file) << after.text;
  test::CommandResult check =
      test::run({"/bin/sh", "-c",
                 test::fixture("prometheus/usr/bin/promtool") + " check metrics < " + page_file});
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err << after.text;

  // Nothing is followed now, so no counter moves: the summary printed at SIGTERM says what the
  // page says.
  ASSERT_EQ(agent.terminate(), 0) << agent.log();
  const std::string log = agent.log();
  static const std::regex kHead(
      R"(ljprof agent: (\d+) samples in [0-9.]+ s, (\d+) delivered, (\d+) \()");
  std::smatch head;
  ASSERT_TRUE(std::regex_search(log, head, kHead)) << log;
  EXPECT_EQ(std::stod(head[1]), after.value["ljprof_samples_total"]);
  EXPECT_EQ(std::stod(head[2]), after.value["ljprof_samples_delivered_total"]);
  EXPECT_EQ(std::stod(head[3]), after.value["ljprof_samples_unwound_to_root_total"]);
  static const std::regex kReason(R"(\n\s+(\d+)  (\S[^\n]*))");
  int reasons = 0;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), kReason);
       it != std::sregex_iterator(); ++it) {
    const std::string text = (*it)[2];
    std::string metric;
    for (const auto& [name, help] : after.help) {
      if (help == text) metric = name;
    }
    if (metric.empty()) continue;  // a site line ("3 at luajit+0x...")
    ++reasons;
    EXPECT_EQ(std::stod((*it)[1]), after.value[metric]) << text;
  }
  std::cout << reasons << " summary reasons compared with the page\n";
}

// Samples and samples whose walk reached a proven root, per pid, of the profiles in `files`
// (merged), read from `go tool pprof -traces`: a block per stack, its labels, then its frames
// leaf first with the sample count on the first; a walk that stopped ends in "[unknown: ...]".
struct Rooted {
  int64_t samples = 0, rooted = 0;
  double share() const { return samples ? static_cast<double>(rooted) / samples : 0; }
};
std::map<uint32_t, Rooted> rooted_by_pid(const std::string& dir,
                                         const std::vector<std::string>& files) {
  std::vector<std::string> args = {"-traces", "-sample_index=samples"};
  args.insert(args.end(), files.begin(), files.end());
  test::CommandResult traces = test::go_tool_pprof(dir, args);
  EXPECT_EQ(traces.exit_code, 0) << traces.err;
  std::map<uint32_t, Rooted> out;
  static const std::regex kPid(R"(^\s+pid:\s+(\d+)\s*$)"), kFirst(R"(^\s+(\d+)\s+(\S.*)$)");
  bool in_block = false;
  uint32_t pid = 0;
  int64_t count = -1;
  std::string outermost;
  auto finish = [&] {
    if (count > 0) {
      out[pid].samples += count;
      if (outermost.rfind("[unknown:", 0) != 0) out[pid].rooted += count;
    }
    pid = 0, count = -1, outermost.clear();
  };
  std::istringstream in(traces.out);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (line.rfind("-----------+", 0) == 0) {
      finish();
      in_block = true;
    } else if (!in_block || line.find_first_not_of(' ') == std::string::npos) {
      continue;
    } else if (count < 0 && std::regex_match(line, m, kPid)) {
      pid = static_cast<uint32_t>(std::stoul(m[1]));
    } else if (count < 0 && std::regex_match(line, m, kFirst)) {
      count = std::stoll(m[1]);
      outermost = m[2];
    } else if (count >= 0) {
      outermost = line.substr(line.find_first_not_of(' '));
    }
  }
  finish();
  return out;
}

// The out-dir profiles of `pid` (TIME-APP-PID.pb.gz, TIME the interval's start, UTC) whose
// interval started in [from, until) (unix seconds).
std::vector<std::string> profiles_of(const std::string& dir, pid_t pid, time_t from, time_t until) {
  std::vector<std::string> out;
  const std::string suffix = fmt::format("-{}.pb.gz", pid);
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.size() < 16 + suffix.size() ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
      continue;
    }
    std::tm tm{};
    if (strptime(name.substr(0, 16).c_str(), "%Y%m%dT%H%M%SZ", &tm) == nullptr) continue;
    const time_t start = timegm(&tm);
    if (start >= from && start < until) out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// A Lua workload for luajit and tarantool alike: writes the file arg[2] once it runs, then is
// busy in a Lua loop until the file arg[1] exists (at most 60 s by its own clock).
std::string write_busy_until_stopped(const std::string& dir) {
  const std::string path = dir + "/busy_until_stopped.lua";
  std::ofstream(path) << "local stop, started = arg[1], os.time()\n"
                      << "io.open(arg[2], 'w'):close()\n"
                      << "local function busy_until_stopped()\n"
                      << "  local x = 0\n"
                      << "  while os.time() - started < 60 do\n"
                      << "    for i = 1, 1e5 do x = x + i % 7 end\n"
                      << "    local f = io.open(stop)\n"
                      << "    if f then f:close() return x end\n"
                      << "  end\n"
                      << "end\n"
                      << "busy_until_stopped()\n";
  return path;
}

// The unwind rows the recorder puts in the kernel for each file `pid` maps: its process context
// (record/process_context.h) built through `cache`. (Without a table cache: ljprof's cache keys
// its tables by the program that built them, and this one would only add its own.)
std::map<std::string, uint64_t> unwind_rows_of(pid_t pid, record::ObjectCache& cache) {
  auto ctx = record::build_process_context(static_cast<uint32_t>(pid), cache);
  EXPECT_TRUE(ctx.ok()) << ctx.message();
  std::map<std::string, uint64_t> rows;
  if (!ctx.ok()) return rows;
  for (const record::ModuleView& m : (*ctx)->modules) {
    if (m.object->table) rows[m.object->path] = m.object->table->rows().size();
  }
  return rows;
}

// (4) A row map too small for both a tarantool and a luajit (--unwind-rows: the rows of
// tarantool's files, and half of those of luajit's own executable; every library luajit maps,
// tarantool maps too): tarantool, attached first, is
// sampled as usual; luajit's executable does not fit, which is counted, and luajit is sampled
// without its rows (its walks stop there: no proven root). Once tarantool exits, its files'
// rows are freed and luajit is published again with its rows: its later samples reach a root.
TEST(AgentLive, AProcessWhoseRowsDoNotFitIsSampledWithoutThemUntilRoomFrees) {
  ASSERT_EQ(geteuid(), 0u) << "ljprof agent needs root";
  test::TempDir tmp;
  const std::string dir = tmp.path(), profiles = dir + "/profiles";
  const std::string busy = write_busy_until_stopped(dir);
  test::Background tarantool(
      {"/usr/bin/tarantool", busy, dir + "/stop-tarantool", dir + "/tarantool-runs"},
      dir + "/tarantool.out");
  test::Background luajit({"/usr/bin/luajit", busy, dir + "/stop-luajit", dir + "/luajit-runs"},
                          dir + "/luajit.out");
  for (int i = 0; i < 200 && !(test::file_exists(dir + "/tarantool-runs") &&
                               test::file_exists(dir + "/luajit-runs"));
       ++i) {
    sleep_s(0.05);
  }
  ASSERT_TRUE(test::file_exists(dir + "/tarantool-runs") && test::file_exists(dir + "/luajit-runs"))
      << test::read_text(dir + "/tarantool.out") << test::read_text(dir + "/luajit.out");

  record::ObjectCache cache;  // the files both map are analysed once
  const std::map<std::string, uint64_t> tarantool_files = unwind_rows_of(tarantool.pid(), cache);
  const std::map<std::string, uint64_t> luajit_files = unwind_rows_of(luajit.pid(), cache);
  uint64_t tarantool_rows = 0, luajit_own_rows = 0;
  for (const auto& [path, rows] : tarantool_files) tarantool_rows += rows;
  std::vector<std::string> luajit_own;  // its files tarantool does not map: its executable
  for (const auto& [path, rows] : luajit_files) {
    if (tarantool_files.count(path)) continue;
    luajit_own.push_back(path);
    luajit_own_rows += rows;
  }
  ASSERT_EQ(luajit_own.size(), 1u) << (luajit_own.empty() ? "none" : luajit_own.back());
  const uint64_t capacity = tarantool_rows + luajit_own_rows / 2;

  Agent agent(dir, {"-p", fmt::format("{},{}", tarantool.pid(), luajit.pid()), "-F", "199",
                    "--interval", "1", "--out-dir", profiles, "--metrics-addr", "127.0.0.1:0",
                    "--unwind-rows", std::to_string(capacity)});
  const int port = agent.metrics_port(10);
  ASSERT_GT(port, 0) << agent.log();
  Page page = scrape_until(port, 15, [](Page& p) {
    return p.value["ljprof_processes_followed"] == 2 && p.value["ljprof_rows_map_full_total"] >= 1;
  });
  ASSERT_EQ(page.value["ljprof_processes_followed"], 2) << page.text << agent.log();
  EXPECT_EQ(page.value["ljprof_rows_map_full_total"], 1) << page.text;
  EXPECT_EQ(page.value["ljprof_unwind_rows_in_use"], static_cast<double>(tarantool_rows))
      << page.text;
  EXPECT_EQ(page.value["ljprof_unwind_rows_capacity"], static_cast<double>(capacity));
  // Both sampled until luajit has a whole interval's profile (stamped two seconds ago or more:
  // its interval has ended), then tarantool exits.
  for (int i = 0; i < 200 && profiles_of(profiles, luajit.pid(), 0, time(nullptr) - 1).empty();
       ++i) {
    sleep_s(0.05);
  }
  std::ofstream(dir + "/stop-tarantool") << "stop\n";
  const time_t tarantool_stopped = time(nullptr);
  EXPECT_EQ(tarantool.wait(10000), 0);

  // Tarantool's files freed, and luajit published again with its executable's rows at once.
  // Its samples from the page after that one on (the page is a snapshot a second old at most,
  // and samples still in the ring then were taken before): nearly all reach a root.
  page = scrape_until(port, 15, [&](Page& p) {
    return p.value["ljprof_unwind_rows_in_use"] < static_cast<double>(tarantool_rows) / 2;
  });
  EXPECT_GT(page.value["ljprof_unwind_tables_freed_total"], 0) << page.text;
  ASSERT_LT(page.value["ljprof_unwind_rows_in_use"], static_cast<double>(tarantool_rows) / 2)
      << page.text << agent.log();
  auto delivered = [](Page& p) { return p.value["ljprof_samples_delivered_total"]; };
  auto rooted = [](Page& p) { return p.value["ljprof_samples_unwound_to_root_total"]; };
  Page from = scrape_until(port, 5, [&](Page& p) { return delivered(p) > delivered(page); });
  sleep_s(1.5);
  Page until = scrape_until(port, 5, [&](Page& p) { return delivered(p) > delivered(from) + 50; });
  EXPECT_EQ(until.value["ljprof_rows_map_full_total"], 1) << until.text;
  std::ofstream(dir + "/stop-luajit") << "stop\n";
  EXPECT_EQ(luajit.wait(10000), 0);
  ASSERT_EQ(agent.terminate(), 0) << agent.log();

  std::vector<std::string> files = profiles_of(profiles, tarantool.pid(), 0, tarantool_stopped + 2);
  const std::vector<std::string> luajit_rowless =
      profiles_of(profiles, luajit.pid(), 0, tarantool_stopped - 1);
  ASSERT_GE(luajit_rowless.size(), 1u) << agent.log();
  files.insert(files.end(), luajit_rowless.begin(), luajit_rowless.end());
  const auto during = rooted_by_pid(dir, files);
  const Rooted t = during.count(tarantool.pid()) ? during.at(tarantool.pid()) : Rooted{};
  const Rooted l = during.count(luajit.pid()) ? during.at(luajit.pid()) : Rooted{};
  const double alone = delivered(until) - delivered(from),
               alone_rooted = rooted(until) - rooted(from);
  std::cout << "tarantool " << t.rooted << " of " << t.samples << " samples rooted; luajit "
            << l.rooted << " of " << l.samples << " without its rows, " << alone_rooted << " of "
            << alone << " with them\n";
  EXPECT_GT(t.samples, 0);
  EXPECT_GE(t.share(), 0.95) << "tarantool is unaffected";
  EXPECT_GT(l.samples, 0) << "luajit is sampled without its rows";
  EXPECT_LE(l.share(), 0.05) << "its walks stop in its executable";
  ASSERT_GT(alone, 0);
  EXPECT_GE(alone_rooted / alone, 0.95) << "luajit has its rows once tarantool's are freed";
}

// Copies the ELF file `from` to `to` (mode 0755) with the descriptor of its GNU build-id note
// (NT_GNU_BUILD_ID: the table cache's key) rewritten from `seed`: the same code, a file no cache
// has seen. False if it has no such note.
bool copy_with_new_build_id(const std::string& from, const std::string& to, uint32_t seed) {
  std::vector<uint8_t> bytes = test::read_file(from);
  Elf64_Ehdr eh{};
  if (bytes.size() < sizeof(eh)) return false;
  std::memcpy(&eh, bytes.data(), sizeof(eh));
  bool rewritten = false;
  for (uint16_t i = 0; i < eh.e_shnum; ++i) {
    Elf64_Shdr sh{};
    const uint64_t at = eh.e_shoff + uint64_t{i} * eh.e_shentsize;
    if (at + sizeof(sh) > bytes.size()) return false;
    std::memcpy(&sh, bytes.data() + at, sizeof(sh));
    if (sh.sh_type != SHT_NOTE || sh.sh_offset + sh.sh_size > bytes.size()) continue;
    for (uint64_t n = sh.sh_offset; n + sizeof(Elf64_Nhdr) <= sh.sh_offset + sh.sh_size;) {
      Elf64_Nhdr nh{};
      std::memcpy(&nh, bytes.data() + n, sizeof(nh));
      const uint64_t name = n + sizeof(nh), desc = name + ((nh.n_namesz + 3) & ~3u);
      if (desc + nh.n_descsz > sh.sh_offset + sh.sh_size) break;
      if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 &&
          std::memcmp(bytes.data() + name, "GNU", 4) == 0) {
        for (uint32_t k = 0; k < nh.n_descsz; ++k)
          bytes[desc + k] ^= static_cast<uint8_t>(seed * 37 + k + 1);
        rewritten = true;
      }
      n = desc + ((nh.n_descsz + 3) & ~3u);
    }
  }
  std::ofstream(to, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  ::chmod(to.c_str(), 0755);
  return rewritten;
}

// Least-squares slope of y over x.
double slope(const std::vector<double>& x, const std::vector<double>& y) {
  const double n = static_cast<double>(x.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sx += x[i], sy += y[i], sxx += x[i] * x[i], sxy += x[i] * y[i];
  }
  const double d = n * sxx - sx * sx;
  return d == 0 ? 0 : (n * sxy - sx * sy) / d;
}

// (5) Churn: `ljprof agent -a` follows waves of binaries it has never seen — each wave a copy
// of Debian's luajit and of its libluajit-5.1.so.2 (loaded by a python3 through ctypes, via
// LD_LIBRARY_PATH), their build-ids rewritten so that every wave's files are analysed afresh —
// whose processes, once all followed, run Lua for a second of their own CPU clock and exit.
// While each wave runs, the rows in use are what the first wave's took (its files, and the
// libraries all share), within 5%: the rows of the waves before were freed; after each wave
// they return to what they were after the first, and the agent's RSS stays within 10% of it.
// Waves run for LJPROF_CHURN_SECONDS (default 16; bench/reclaim_churn runs it for longer and
// reports the slopes per hour).
TEST(AgentLive, ChurnOfNewBinariesKeepsRowsAndMemoryFlat) {
  ASSERT_EQ(geteuid(), 0u) << "ljprof agent needs root";
  const char* env_seconds = std::getenv("LJPROF_CHURN_SECONDS");
  const double churn_s = env_seconds ? std::stod(env_seconds) : 16;
  test::TempDir tmp;
  const std::string dir = tmp.path();
  const std::string lib = "/usr/lib/x86_64-linux-gnu/libluajit-5.1.so.2";
  const std::string embed = dir + "/embed_luajit.py";
  std::ofstream(embed)
      << "import ctypes, sys\n"
      << "ctypes.CDLL(None).prctl(15, b'luajit-ljw-lib', 0, 0, 0)  # PR_SET_NAME: --comm\n"
      << "lj = ctypes.CDLL('libluajit-5.1.so.2')\n"
      << "lj.luaL_newstate.restype = ctypes.c_void_p\n"
      << "L = ctypes.c_void_p(lj.luaL_newstate())\n"
      << "lj.luaL_openlibs(L)\n"
      << "if lj.luaL_loadstring(L, sys.argv[1].encode()) != 0 or lj.lua_pcall(L, 0, 0, 0) != 0:\n"
      << "    sys.exit('embed_luajit.py: the Lua chunk failed')\n";
  // Each wave's processes wait for the wave's `go` file (so all three are followed at once
  // whatever the machine's speed; a pid reused while the agent still holds its exited
  // predecessor is only adopted at the next /proc scan), then run Lua for a second of their own
  // CPU clock.
  auto work = [](const std::string& go) {
    return "local ffi = require('ffi') ffi.cdef('int usleep(unsigned int)') "
           "while true do local f = io.open('" +
           go +
           "') if f then f:close() break end ffi.C.usleep(20000) end "
           "local function wave_work(t) local x, s = 0, os.clock() "
           "while os.clock() - s < t do for i = 1, 1e4 do x = x + i % 7 end end return x end "
           "wave_work(1.0)";
  };
  Agent agent(dir, {"--comm", "luajit-ljw", "--comm", "luajit-ljw-lib", "-F", "99", "--interval",
                    "1", "--out-dir", dir + "/profiles", "--keep-files", "50", "--metrics-addr",
                    "127.0.0.1:0", "--table-cache", dir + "/tables"});
  const int port = agent.metrics_port(10);
  ASSERT_GT(port, 0) << agent.log();

  std::vector<double> ends, peaks, settled, rss;
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  for (uint32_t wave = 1; elapsed() < churn_s || wave <= 3; ++wave) {
    const std::string wdir = fmt::format("{}/wave{}", dir, wave);
    std::filesystem::create_directories(wdir + "/lib");
    ASSERT_TRUE(copy_with_new_build_id("/usr/bin/luajit", wdir + "/luajit-ljw", wave));
    ASSERT_TRUE(copy_with_new_build_id(lib, wdir + "/lib/libluajit-5.1.so.2", wave));
    const std::string go = wdir + "/go";
    std::vector<std::unique_ptr<test::Background>> procs;
    procs.push_back(std::make_unique<test::Background>(std::vector<std::string>{
        "env", "LD_LIBRARY_PATH=" + wdir + "/lib", "python3", embed, work(go)}));
    for (int i = 0; i < 2; ++i) {
      procs.push_back(std::make_unique<test::Background>(
          std::vector<std::string>{wdir + "/luajit-ljw", "-e", work(go)}));
    }
    // The rows in use while all three are followed, from then until they exit.
    Page all =
        scrape_until(port, 15, [](Page& p) { return p.value["ljprof_processes_followed"] == 3; });
    ASSERT_EQ(all.value["ljprof_processes_followed"], 3) << "wave " << wave << "\n" << agent.log();
    std::ofstream(go) << "go\n";
    double peak = all.value["ljprof_unwind_rows_in_use"];
    for (bool running = true; running; sleep_s(0.1)) {
      peak = std::max(peak, scrape(port).value["ljprof_unwind_rows_in_use"]);
      running = false;
      for (auto& proc : procs) running = running || proc->running();
    }
    for (auto& proc : procs) EXPECT_EQ(proc->wait(1000), 0) << "wave " << wave;
    // Released: nothing followed, the rows back where the first wave left them.
    const double floor = settled.empty() ? 0 : settled[0];
    Page after = scrape_until(port, 10, [&](Page& p) {
      return p.value["ljprof_processes_followed"] == 0 &&
             p.value["ljprof_unwind_rows_in_use"] <= floor;
    });
    ends.push_back(elapsed());
    peaks.push_back(peak);
    settled.push_back(after.value["ljprof_unwind_rows_in_use"]);
    rss.push_back(static_cast<double>(rss_kib(agent.pid())));
    std::cout << fmt::format(
        "wave {}: {:.0f} rows in use while it ran, {:.0f} after; RSS {:.0f} KiB (anonymous {}, "
        "file {}); object cache {:.0f} files, {:.0f} bytes\n",
        wave, peak, settled.back(), rss.back(), rss_kib(agent.pid(), "RssAnon"),
        rss_kib(agent.pid(), "RssFile"), after.value["ljprof_object_cache_entries"],
        after.value["ljprof_object_cache_bytes"]);
  }
  Page last = scrape(port);
  ASSERT_EQ(agent.terminate(), 0) << agent.log();
  // Per hour of churn, over every wave and over the later half (the object cache fills up to
  // its bound with the copies first).
  auto per_hour = [&](const std::vector<double>& y, size_t from) {
    return slope(std::vector<double>(ends.begin() + from, ends.end()),
                 std::vector<double>(y.begin() + from, y.end())) *
           3600;
  };
  const size_t half = peaks.size() / 2;
  std::cout << fmt::format(
      "churn: {} waves in {:.1f} s; per hour: {:+.0f} rows in use while a wave runs ({:+.0f} "
      "over the later half), {:+.0f} after ({:+.0f}), {:+.0f} KiB of RSS ({:+.0f}); {:.0f} "
      "files' rows freed, {:.0f} files pruned, {:.0f} refused for fragmentation\n",
      peaks.size(), ends.back(), per_hour(peaks, 0), per_hour(peaks, half), per_hour(settled, 0),
      per_hour(settled, half), per_hour(rss, 0), per_hour(rss, half),
      last.value["ljprof_unwind_tables_freed_total"],
      last.value["ljprof_object_cache_pruned_total"],
      last.value["ljprof_rows_map_fragmented_total"]);
  for (size_t w = 1; w < peaks.size(); ++w) {
    EXPECT_NEAR(peaks[w] / peaks[0], 1.0, 0.05) << "wave " << w + 1;
    EXPECT_LE(std::abs(settled[w] - settled[0]), 0.05 * peaks[0]) << "wave " << w + 1;
    EXPECT_LE(rss[w], rss[0] * 1.10) << "wave " << w + 1;
  }
}

// --fiber-wall: a Tarantool given with -p gets a wall-clock fiber profile per interval, whether
// or not it had CPU samples: Pyroscope's ingest gets APP.wall with the process's labels and a
// pprof whose sample type is wall and whose samples carry the fiber's name and state (never its
// id: a series label per fiber ever created); the out-dir names it TIME-APP-PID.wall.pb.gz.
TEST(AgentLive, FiberWallProfilesOfATarantool) {
  test::TempDir dir;
  std::filesystem::copy_file(
      std::filesystem::path(test::source_dir()) / "tests/walker/workloads/wall_fiber.lua",
      dir.file("wall_fiber.lua"));
  test::Background tarantool({"env", "-C", dir.path(), "/usr/bin/tarantool", "wall_fiber.lua"},
                             dir.file("tarantool.out"));
  ASSERT_TRUE(test::wait_for_text(dir.file("tarantool.out"), "ljprof-ready", 60));
  Receiver receiver;
  Agent agent(dir.path(),
              {"-p", std::to_string(tarantool.pid()), "--fiber-wall", "20", "--interval", "1", "-d",
               "3", "--pyroscope", receiver.url(), "--out-dir", dir.file("out")});
  // -d 3: it stops by itself after three intervals, prints its summary and exits (a SIGTERM
  // sent once the summary shows raced its last steps: 143 in one run of make test).
  ASSERT_TRUE(agent.wait_for_log(" intervals, ", 60)) << agent.log();
  ASSERT_EQ(agent.wait_exit(), 0) << agent.log();
  EXPECT_EQ(receiver.violations(), std::vector<std::string>{});
  int walls = 0;
  for (const Receiver::Request& r : receiver.requests()) {
    auto name = Receiver::parse_name(r.param("name"));
    ASSERT_TRUE(name) << r.param("name");
    if (name->kind != "wall") continue;
    ++walls;
    EXPECT_EQ(name->labels["pid"], std::to_string(tarantool.pid()));
    EXPECT_EQ(name->labels["runtime"], "tarantool");
    EXPECT_EQ(r.param("sampleRate"), "20");
  }
  EXPECT_GE(walls, 2) << agent.log();
  // Every interval's file: the last interval's (cut at the end of -d) may hold a tick or none.
  test::CommandResult raw;
  int wall_files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.file("out"))) {
    if (!e.path().string().ends_with(".wall.pb.gz")) continue;
    ++wall_files;
    test::CommandResult one = test::go_tool_pprof(dir.path(), {"-raw", e.path()});
    ASSERT_EQ(one.exit_code, 0) << one.err;
    raw.out += one.out;
  }
  ASSERT_GT(wall_files, 0) << agent.log();
  EXPECT_NE(raw.out.find("wall/nanoseconds"), std::string::npos) << raw.out.substr(0, 400);
  EXPECT_NE(raw.out.find("fiber:[waiter]"), std::string::npos) << raw.out.substr(0, 2000);
  EXPECT_NE(raw.out.find("state:["), std::string::npos) << raw.out.substr(0, 2000);
  EXPECT_EQ(raw.out.find("fiber_id"), std::string::npos) << raw.out.substr(0, 2000);
}

// The out-dir files of kind `kind` ("" = the CPU profile), merged by go tool pprof -top over
// sample type `sample_index`: the function rows.
std::map<std::string, test::PprofTopRow> out_dir_top(const test::TempDir& dir,
                                                     const std::string& kind,
                                                     const std::string& sample_index) {
  std::vector<std::string> args = {"-top", "-nodecount=100", "-sample_index=" + sample_index};
  const std::string suffix = kind.empty() ? ".pb.gz" : "." + kind + ".pb.gz";
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.file("out"))) {
    const std::string name = e.path().filename();
    const size_t dots = std::count(name.begin(), name.end(), '.');
    if (!name.ends_with(suffix) || (kind.empty() && dots != 2)) continue;
    args.push_back(e.path());
    ++files;
  }
  if (files == 0) return {};
  test::CommandResult top = test::go_tool_pprof(dir.path(), args);
  EXPECT_EQ(top.exit_code, 0) << top.err;
  return test::parse_pprof_top(top.out);
}

// --loop-stalls --off-cpu: a Tarantool whose fiber blocks the tx thread 100 ms every 0.5 s shows
// one stall per block in the metrics page's histogram ljprof_loop_stall_seconds (in its
// 0.1-0.25 s bucket), a page Prometheus's own promtool accepts; the blocking Lua function is in
// the CPU profile's off_cpu sample type (the event loop's idle wait is not sent) and in the
// stall profile (TIME-APP-PID.loop_stall.pb.gz, sample type loop_stall).
TEST(AgentLive, LoopStallsAndOffCpuTimeOfATarantool) {
  test::TempDir dir;
  test::Background tarantool(
      {"/usr/bin/tarantool", test::record_workloads_dir() + "/off_cpu_tarantool.lua"},
      dir.file("tarantool.out"));
  ASSERT_TRUE(test::wait_for_text(dir.file("tarantool.out"), "ljprof-ready", 60));
  Agent agent(dir.path(),
              {"-p", std::to_string(tarantool.pid()), "--loop-stalls", "50ms", "--off-cpu",
               "--interval", "1", "--out-dir", dir.file("out"), "--metrics-addr", "127.0.0.1:0"});
  const int port = agent.metrics_port(60);
  ASSERT_GT(port, 0) << agent.log();
  // Three stalls logged (one per 0.5 s), then the page.
  static const std::regex kStalls(R"(, (\d+) loop stall\(s\))");
  int logged = 0;
  for (int i = 0; i < 200 && logged < 3; ++i) {
    logged = 0;
    const std::string log = agent.log();
    for (std::sregex_iterator it(log.begin(), log.end(), kStalls), end; it != end; ++it) {
      logged += std::stoi((*it)[1]);
    }
    sleep_s(0.05);
  }
  ASSERT_GE(logged, 3) << agent.log();
  const test::HttpResponse page = test::http_get(port, "/metrics", 5000);
  ASSERT_EQ(page.status, 200);
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(page.body, m, std::regex(R"(ljprof_loop_stall_seconds_count (\d+))")))
      << page.body;
  EXPECT_GE(std::stoi(m[1]), logged);
  ASSERT_TRUE(std::regex_search(
      page.body, m, std::regex(R"(ljprof_loop_stall_seconds_bucket\{le="0.05"\} (\d+))")))
      << page.body;
  EXPECT_EQ(m[1], "0") << "no stall is shorter than the threshold";
  const std::string page_file = dir.file("metrics.txt");
  std::ofstream(page_file) << page.body;
  test::CommandResult check =
      test::run({"/bin/sh", "-c",
                 test::fixture("prometheus/usr/bin/promtool") + " check metrics < " + page_file});
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err << page.body;
  ASSERT_EQ(agent.terminate(), 0) << agent.log();

  // Off the CPU, block_tx is where the time went; epoll_wait (the idle loop) is not there.
  const auto off_cpu = out_dir_top(dir, "", "off_cpu");
  EXPECT_TRUE(off_cpu.contains("block_tx")) << agent.log();
  for (const auto& [function, row] : off_cpu) {
    EXPECT_EQ(function.find("epoll_wait"), std::string::npos) << function;
  }
  const auto stalled = out_dir_top(dir, "loop_stall", "loop_stall");
  EXPECT_TRUE(stalled.contains("block_tx")) << agent.log();
}

}  // namespace
}  // namespace ljprof
