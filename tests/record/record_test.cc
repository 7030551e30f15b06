// `ljprof record` against real processes (needs root: CAP_BPF + CAP_PERFMON, as in CI). The
// workload (workloads/split.lua) measures its own CPU time per part with the VM's clock; the
// profile's shares must agree within 5 points, the stacks must nest Lua -> C function -> Lua
// for table.sort's comparator, and the target must exit normally. It runs under luajit and
// tarantool launched by ljprof, and in an nginx-lua worker under a local HTTP load loop that
// ljprof attaches to. Attaching must not slow the target down or stop it, and the pprof file
// must open in `go tool pprof`. Loops whose traces exit all the time or allocate check the walk
// across C code called from a trace.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "split_oracle.h"
#include "support/nginx_lua.h"
#include "support/test_support.h"

namespace ljprof {
namespace {

using namespace record_oracle;

// The sampling frequency of the recordings that compare shares (-F).
constexpr double kHz = 999;

struct Case {
  std::string runtime;  // /usr/bin/luajit or /usr/bin/tarantool
  bool jit_off;
  // Of the samples that had an unwind context: the issue's 99%, JIT on or off (measured
  // 99.5-99.9%; what still stops is the trace exit handler before lj_trace_exit, rare here).
  double min_root_share;
  std::string label;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.label;
}

class RecordSplit : public ::testing::TestWithParam<Case> {};

TEST_P(RecordSplit, SharesMatchTheVmsOwnClock) {
  const Case& c = GetParam();
  ASSERT_EQ(geteuid(), 0u) << "ljprof record needs root";
  const std::string dir = testing::TempDir() + "/ljprof-record-" + c.label;
  test::run({"mkdir", "-p", dir});
  const std::string report = dir + "/vm-report.txt", folded = dir + "/stacks.folded";
  std::vector<std::string> argv = {test::ljprof_bin(),
                                   "record",
                                   "-F",
                                   "999",
                                   "-q",
                                   "-o",
                                   dir + "/p.pb.gz",
                                   "--folded",
                                   folded,
                                   "--",
                                   c.runtime,
                                   test::record_workloads_dir() + "/run_split.lua",
                                   "4",
                                   report};
  if (c.jit_off) argv.push_back("jit_off");
  test::CommandResult r = test::run(argv);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(test::file_exists(report)) << "the workload did not finish: " << r.err;
  // The recording covers the whole process, whose parts ran for part_seconds() of CPU by its own
  // clock: kHz samples per CPU second, half of them at least (the floor follows the workload's
  // own measurement, not the machine's speed or load).
  const VmReport vm = VmReport::parse(test::read_text(report));
  expect_profile_matches_vm(folded, vm, c.min_root_share, r.err, 0.5 * kHz * vm.part_seconds());
  test::run({"rm", "-rf", dir});
}

INSTANTIATE_TEST_SUITE_P(
    Real, RecordSplit,
    ::testing::Values(Case{"/usr/bin/luajit", true, 0.99, "luajit_jit_off"},
                      Case{"/usr/bin/luajit", false, 0.99, "luajit_jit_on"},
                      Case{"/usr/bin/tarantool", true, 0.99, "tarantool_jit_off"},
                      Case{"/usr/bin/tarantool", false, 0.99, "tarantool_jit_on"}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.label; });

// The x86-64 builds of the LuaJIT matrix (tests/matrix/variants.txt, built from Debian's sources
// by scripts/luajit-matrix), JIT on: the same split, the same bounds. (arm64 builds cannot be
// recorded here: qemu-user has no BPF.)
std::vector<Case> matrix_cases() {
  std::vector<Case> out;
  for (const test::MatrixVariant& v : test::matrix_variants()) {
    if (!v.arm64) out.push_back(Case{v.exe, false, 0.99, test::gtest_name(v.name)});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Matrix, RecordSplit, ::testing::ValuesIn(matrix_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.label;
                         });

// "Time: 2026-12-03 13:20:50.868715801 +0000 UTC" (Go's time.Time.String(), as `go tool pprof
// -raw` prints the profile's time_nanos) -> nanoseconds since the epoch, or -1.
int64_t parse_go_time(const std::string& s) {
  std::tm tm{};
  const char* p = strptime(s.c_str(), "%Y-%m-%d %H:%M:%S", &tm);
  if (p == nullptr) return -1;
  int64_t frac_ns = 0;
  if (*p == '.') {
    int digits = 0;
    for (++p; *p >= '0' && *p <= '9'; ++p, ++digits) {
      if (digits < 9) frac_ns = frac_ns * 10 + (*p - '0');
    }
    for (; digits < 9; ++digits) frac_ns *= 10;
  }
  char sign = 0;
  int hh = 0, mm = 0;
  if (std::sscanf(p, " %c%2d%2d", &sign, &hh, &mm) != 3 || (sign != '+' && sign != '-')) return -1;
  const int64_t utc =
      static_cast<int64_t>(timegm(&tm)) - (sign == '-' ? -1 : 1) * (hh * 3600 + mm * 60);
  return utc * 1000000000 + frac_ns;
}

// The sampling window of a profile ljprof wrote, from `go tool pprof -raw` (its time and
// duration) in CLOCK_MONOTONIC ns; `raw` is pprof's output, for failure messages. pprof prints
// the first 4 characters of Go's Duration string ("3.50" of "3.500123s"): seconds to 10 ms for a
// window of 1-10 s.
struct SamplingWindow {
  double start_ns = -1, end_ns = -1, seconds = -1;
  std::string raw;
};

SamplingWindow sampling_window(const std::string& scratch_dir, const std::string& profile) {
  SamplingWindow w;
  timespec real{};
  clock_gettime(CLOCK_REALTIME, &real);
  const uint64_t mono = test::monotonic_ns();
  const int64_t real_minus_mono =
      static_cast<int64_t>(real.tv_sec) * 1000000000 + real.tv_nsec - static_cast<int64_t>(mono);
  test::CommandResult raw = test::go_tool_pprof(scratch_dir, {"-raw", profile});
  w.raw = raw.out + raw.err;
  int64_t start_real = -1;
  std::istringstream lines(raw.out);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("Time: ", 0) == 0) start_real = parse_go_time(line.substr(6));
    if (line.rfind("Duration: ", 0) == 0) w.seconds = std::stod(line.substr(10));
  }
  if (raw.exit_code != 0 || start_real <= 0 || w.seconds < 0) return w;
  w.start_ns = static_cast<double>(start_real - real_minus_mono);
  w.end_ns = w.start_ns + w.seconds * 1e9;
  return w;
}

// A process's on-CPU time (/proc/PID/schedstat) read every 10 ms, against CLOCK_MONOTONIC, from
// a thread that runs until stop().
class CpuTrace {
 public:
  explicit CpuTrace(pid_t pid)
      : thread_([this, pid] {
          const std::string path = "/proc/" + std::to_string(pid) + "/schedstat";
          while (!stop_) {
            std::ifstream in(path);
            double cpu_ns = 0;
            if (in >> cpu_ns)
              points_.push_back({static_cast<double>(test::monotonic_ns()), cpu_ns});
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
          }
        }) {}
  ~CpuTrace() { stop(); }
  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  // The process's on-CPU ns between two CLOCK_MONOTONIC times (after stop()), interpolated
  // between the reads around each; -1 where the reads do not cover them.
  double between(double t0_ns, double t1_ns) const {
    const double a = at(t0_ns), b = at(t1_ns);
    return a < 0 || b < 0 ? -1 : b - a;
  }

 private:
  double at(double t) const {
    for (size_t i = 1; i < points_.size(); ++i) {
      const auto& [t_a, cpu_a] = points_[i - 1];
      const auto& [t_b, cpu_b] = points_[i];
      if (t_a <= t && t <= t_b) return cpu_a + (cpu_b - cpu_a) * (t - t_a) / (t_b - t_a);
    }
    return -1;
  }
  std::atomic<bool> stop_{false};
  std::vector<std::pair<double, double>> points_;
  std::thread thread_;
};

// An nginx-lua deployment as it runs in production: a master and one worker process (as
// `nobody`), OpenResty's luajit2 from the fixture tree, the split run by a content_by_lua_file
// handler once per request. ljprof attaches to the running worker (-p) while a bounded HTTP
// load loop on 127.0.0.1 keeps it busy; the worker's own per-part clock over the same requests
// is the oracle.
struct NginxCase {
  bool jit_off;
  double min_root_share;  // the same bounds as the luajit and tarantool cases above
  std::string label;
};

void PrintTo(const NginxCase& c, std::ostream* os) {
  *os << c.label;
}

class RecordNginxLua : public ::testing::TestWithParam<NginxCase> {};

TEST_P(RecordNginxLua, WorkerSharesMatchItsOwnClock) {
  const NginxCase& c = GetParam();
  ASSERT_EQ(geteuid(), 0u) << "ljprof record needs root";
  const std::string dir = testing::TempDir() + "/ljprof-record-nginx-" + c.label;
  test::NginxLua nginx(dir, c.jit_off);
  ASSERT_EQ(nginx.error(), "");
  const int port = nginx.port();
  const pid_t worker = nginx.worker();

  // Warm-up (the first request loads split.lua; with the JIT on the first rounds record the
  // traces; split.lua sizes its rounds by the worker's CPU clock in at most 10 rounds), then the
  // worker's own clock is read before and after the recorded load.
  for (int i = 0; i < 3; ++i) ASSERT_EQ(test::http_get(port, "/round", 10000).status, 200);
  for (int i = 0; i < 20; ++i) {
    const std::string calibrating = test::http_get(port, "/report", 10000).body;
    if (calibrating.find("scale calibrating") == std::string::npos) break;
    ASSERT_EQ(test::http_get(port, "/round", 10000).status, 200);
  }
  const std::string before_text = test::http_get(port, "/report", 10000).body;
  const VmReport before = VmReport::parse(before_text);
  ASSERT_EQ(before.parts.size(), 5u) << nginx.logs();
  ASSERT_EQ(before_text.find("scale calibrating"), std::string::npos) << before_text;

  // Bounded load: one request at a time (each a round of ~50 ms of the worker's CPU), until the
  // recording ends, at most 30 s or 2000 requests whatever happens to ljprof.
  std::atomic<bool> stop{false};
  int requests = 0, failed = 0;
  std::thread load([&] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!stop && requests < 2000 && std::chrono::steady_clock::now() < deadline) {
      ++requests;
      if (test::http_get(port, "/round", 10000).status != 200) ++failed;
    }
  });
  const std::string folded = dir + "/stacks.folded", profile = dir + "/p.pb.gz";
  CpuTrace worker_cpu(worker);
  test::CommandResult r =
      test::run({test::ljprof_bin(), "record", "-p", std::to_string(worker), "-F", "999", "-d", "4",
                 "-q", "-o", profile, "--folded", folded});
  worker_cpu.stop();
  stop = true;
  load.join();
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(failed, 0) << "of " << requests << " requests\n" << nginx.logs();
  const VmReport after = VmReport::parse(test::http_get(port, "/report", 10000).body);
  std::cout << requests << " requests while recording\n";
  // The worker's clock covers more than the window (ljprof's attach, the last request), so the
  // floor comes from the worker's schedstat over the window: kHz samples per second of its CPU
  // time there, half of them at least.
  const SamplingWindow window = sampling_window(dir, profile);
  ASSERT_GT(window.seconds, 0) << window.raw.substr(0, 2000);
  const double window_cpu_ns = worker_cpu.between(window.start_ns, window.end_ns);
  ASSERT_GT(window_cpu_ns, 0) << "the worker's CPU time was not read over the window";
  expect_profile_matches_vm(folded, after.since(before), c.min_root_share, r.err,
                            0.5 * kHz * window_cpu_ns / 1e9);

  // The worker was sampled, never stopped: it still serves, and it and the master shut down
  // normally on SIGTERM.
  const char state = test::process_state(worker);
  EXPECT_TRUE(state == 'R' || state == 'S') << "worker state " << state;
  EXPECT_EQ(test::http_get(port, "/round", 10000).status, 200);
  EXPECT_EQ(nginx.stop(), 0) << nginx.logs();
  test::run({"rm", "-rf", dir});
}

INSTANTIATE_TEST_SUITE_P(Real, RecordNginxLua,
                         ::testing::Values(NginxCase{true, 0.99, "nginx_lua_jit_off"},
                                           NginxCase{false, 0.99, "nginx_lua_jit_on"}),
                         [](const ::testing::TestParamInfo<NginxCase>& info) {
                           return info.param.label;
                         });

// Attaching to a process that is already running must leave it alone. The target (luajit, JIT
// on) logs its own throughput (rounds per CLOCK_MONOTONIC interval of >= 250 ms, with its
// schedstat); the intervals inside the sampling window (the profile's time and duration, as
// `go tool pprof -raw` reads them) must run at >= 0.8x the rate of the intervals before ljprof
// started and after it exited, relative to the same ratio of an identical process that is not
// recorded (the control: the host's speed drifts by more than 20% between windows). A sample costs
// the target's CPU the perf interrupt and one BPF walk (about 7 us per walk from bpf_stats);
// measured on this 2-core VM the target runs 0-10% slower at 999 Hz (bench/record_overhead reports
// it, never asserted), while a target stopped or ptrace-attached for a few hundred milliseconds
// would lose whole intervals. 0.8 leaves room for that cost and for the host's noise. Attach itself
// (loading the BPF program, reading maps and CFI) is not in the rate comparison: the kernel's
// verifier runs for seconds of CPU in ljprof's context, which takes CPU from the target when
// another busy process holds the second core (measured: the target at 0.57 of a core then). Over
// ljprof's whole run the target must instead never be seen stopped in /proc/PID/stat nor be off the
// CPU without waiting for one (schedstat), and it must exit 0 with its complete report. Time the
// hypervisor gave this VM's CPUs to others, over all CPUs (/proc/stat "cpu" steal, in USER_HZ
// ticks). With paravirtual steal accounting the kernel charges it to no task: a running task's
// schedstat shows it as neither on a CPU nor waiting for one.
double steal_ns() {
  std::ifstream in("/proc/stat");
  std::string cpu;
  uint64_t v[8] = {};
  in >> cpu;
  for (uint64_t& x : v) in >> x;
  return static_cast<double>(v[7]) * 1e9 / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// The intervals run_split.lua has logged so far ("interval N" lines in its output `log`).
int intervals_logged(const std::string& log) {
  int n = 0;
  std::istringstream in(test::read_text(log));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("interval ", 0) == 0) n = std::max(n, std::atoi(line.c_str() + 9));
  }
  return n;
}

TEST(RecordAttach, TargetThroughputIsUnaffectedAndItExitsNormally) {
  ASSERT_EQ(geteuid(), 0u) << "ljprof record needs root";
  const std::string dir = testing::TempDir() + "/ljprof-record-attach";
  test::run({"rm", "-rf", dir});
  test::run({"mkdir", "-p", dir});
  const std::string report = dir + "/vm-report.txt", profile = dir + "/p.pb.gz",
                    folded = dir + "/stacks.folded", stop_file = dir + "/stop";
  // At most 60 s; the test ends it through the stop file once the window after ljprof holds its
  // intervals. The windows are judged on whole rounds, a 3.5 s recording on ~10 intervals of
  // >= 250 ms: split.lua sizes a round by the target's own CPU clock (~50 ms), so that holds on a
  // machine 2.5x slower or faster, or on a loaded host that stretches every round (rounds sized
  // by iteration counts once took 0.7 s there and left 3 in a 2.5 s recording).
  const std::string target_out = dir + "/target.out", control_out = dir + "/control.out";
  test::Background target({"/usr/bin/luajit", test::record_workloads_dir() + "/run_split.lua", "60",
                           report, "jit_on", stop_file},
                          target_out);
  ASSERT_GT(target.pid(), 0);
  // The same workload, not recorded: the host's own speed changes from second to second (other
  // guests on its CPUs: rates 5.7-10.4 rounds/s seen outside any recording), so the target's
  // rate while sampled is judged against the control's over the same windows.
  const std::string control_report = dir + "/control-report.txt";
  test::Background control({"/usr/bin/luajit", test::record_workloads_dir() + "/run_split.lua",
                            "60", control_report, "jit_on", stop_file},
                           control_out);
  // The window before ljprof: its first interval (start-up, the first traces) is not judged and
  // three more are needed; each process logs its intervals as they end.
  auto logged_at_least = [&](int target_n, int control_n) {
    return test::wait_until(
        [&] {
          return intervals_logged(target_out) >= target_n &&
                 intervals_logged(control_out) >= control_n;
        },
        60);
  };
  ASSERT_TRUE(logged_at_least(5, 5)) << test::read_text(target_out) << test::read_text(control_out);
  ASSERT_TRUE(target.running()) << test::read_text(target_out);

  // /proc/PID/stat every 5 ms while ljprof runs: 'T' (stopped) or 't' (tracing stop) must never
  // show up.
  std::atomic<bool> stop{false};
  int polls = 0;
  std::string stopped_states;
  std::thread poller([&] {
    while (!stop) {
      const char s = test::process_state(target.pid());
      ++polls;
      if (s == 'T' || s == 't') stopped_states += s;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  const uint64_t t0 = test::monotonic_ns();
  const double steal0 = steal_ns();
  test::CommandResult r =
      test::run({test::ljprof_bin(), "record", "-p", std::to_string(target.pid()), "-F", "999",
                 "-d", "3.5", "-q", "-o", profile, "--folded", folded});
  const uint64_t t1 = test::monotonic_ns();
  stop = true;
  poller.join();
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The window after ljprof: the interval in progress at t1 straddles it, three more begin
  // after it (a fourth as a margin).
  const int target_at_t1 = intervals_logged(target_out),
            control_at_t1 = intervals_logged(control_out);
  EXPECT_TRUE(logged_at_least(target_at_t1 + 5, control_at_t1 + 5))
      << test::read_text(target_out) << test::read_text(control_out);
  std::ofstream(stop_file) << "stop\n";
  const double stolen = steal_ns() - steal0;  // a superset of the intervals ljprof's run covers
  EXPECT_EQ(target.wait(20000), 0) << test::read_text(target_out);
  EXPECT_EQ(control.wait(20000), 0) << test::read_text(control_out);
  EXPECT_EQ(stopped_states, "") << "seen stopped in " << stopped_states.size() << " of " << polls
                                << " polls";
  EXPECT_GT(polls, 100);

  // The sampling window, from the profile.
  const SamplingWindow window = sampling_window(dir, profile);
  ASSERT_GT(window.start_ns, 0) << window.raw.substr(0, 2000);
  ASSERT_GT(window.seconds, 2.0) << window.raw.substr(0, 2000);
  ASSERT_LT(window.seconds, 10.0) << window.raw.substr(0, 2000);
  const double s0 = window.start_ns, s1 = window.end_ns;
  EXPECT_GE(s0, static_cast<double>(t0) - 1e6);
  EXPECT_LE(s1, static_cast<double>(t1) + 2e7);

  const VmReport vm = VmReport::parse(test::read_text(report));
  ASSERT_EQ(vm.parts.size(), 5u) << "incomplete report: " << test::read_text(report);
  // Per window, [0] before ljprof, [1] sampling, [2] after ljprof: rounds over the wall time
  // minus the time the target sat on the run queue. That wait is a busy neighbour's share of
  // this 2-core machine (measured: 0.85x-1.04x wall-clock ratios from it alone), not ljprof's
  // doing; time the target is stopped or blocked is not on the run queue, so it stays in. The
  // first interval holds the start-up and the JIT's first traces: not steady state.
  struct Windows {
    double rounds[3] = {}, ns[3] = {}, wall[3] = {}, cpu[3] = {};
    int n[3] = {};
    // Over ljprof's whole run, attach included: time the process was neither on a CPU nor
    // waiting for one (stopped, traced or blocked).
    double off_cpu = 0, covered = 0;
    double rate(int w) const { return rounds[w] / ns[w] * 1e9; }
    double rate_out() const { return (rounds[0] + rounds[2]) / (ns[0] + ns[2]) * 1e9; }
    double ratio() const { return rate(1) / rate_out(); }
  };
  auto windows = [&](const VmReport& report) {
    Windows v;
    for (size_t i = 1; i < report.rates.size(); ++i) {
      const VmReport::Rate& q = report.rates[i];
      const double d = q.end_ns - q.start_ns;
      if (q.end_ns > static_cast<double>(t0) && q.start_ns < static_cast<double>(t1)) {
        v.off_cpu += d - q.cpu_ns - q.wait_ns;
        v.covered += d;
      }
      int w = -1;
      if (q.end_ns <= static_cast<double>(t0)) w = 0;
      if (q.start_ns >= s0 && q.end_ns <= s1) w = 1;
      if (q.start_ns >= static_cast<double>(t1)) w = 2;
      if (w < 0) continue;  // straddles a boundary, or attach / output writing
      v.rounds[w] += q.rounds, v.ns[w] += d - q.wait_ns, v.wall[w] += d, v.cpu[w] += q.cpu_ns;
      ++v.n[w];
    }
    return v;
  };
  const Windows t = windows(vm);
  const Windows c = windows(VmReport::parse(test::read_text(control_report)));
  for (const Windows* v : {&t, &c}) {
    ASSERT_GE(v->n[0], 3) << test::read_text(report);
    ASSERT_GE(v->n[1], 4) << test::read_text(report);
    ASSERT_GE(v->n[2], 3) << test::read_text(report);
  }
  std::cout << "rounds per runnable second: before " << t.rate(0) << ", while sampling "
            << t.rate(1) << ", after " << t.rate(2) << " (" << t.n[0] << "/" << t.n[1] << "/"
            << t.n[2] << " intervals), ratio " << t.ratio() << "; the control's ratio " << c.ratio()
            << " (before " << c.rate(0) << ", meanwhile " << c.rate(1) << ", after " << c.rate(2)
            << "); not runnable " << t.off_cpu / 1e6 << " ms of " << t.covered / 1e6
            << " ms (host steal meanwhile " << stolen / 1e6 << " ms); attach took "
            << (s0 - static_cast<double>(t0)) / 1e9 << " s\n";
  // The recording was real: the target's schedstat says how long it ran on a CPU in the whole
  // intervals inside the sampling window, each second of it worth kHz samples; at least half of
  // those (the profile also holds the cut intervals at the window's ends).
  double samples = 0;
  for (const FoldedStack& stack : read_folded(folded)) samples += stack.count;
  EXPECT_GT(samples, 0.5 * kHz * t.cpu[1] / 1e9) << r.err;
  // The control's ratio is taken at most 1: a control that sped up while the target was sampled
  // (seen: +12% on a busy host, the target's ratio 0.895) says the host changed, not that the
  // target must have sped up as much; one that slowed down lowers the floor as before.
  EXPECT_GE(t.ratio(), 0.8 * std::min(c.ratio(), 1.0))
      << "rounds/s while sampling " << t.rate(1) << ", outside " << t.rate_out()
      << "; the control's ratio " << c.ratio() << "\n"
      << test::read_text(report);
  const double off_cpu = t.off_cpu, covered = t.covered;
  // The target never sleeps; 2% is schedstat's accounting slack, far below a stop that matters.
  // Time the host stole from this VM meanwhile looks the same to schedstat (seen: 214 ms of
  // 5075 under a loaded host), so it is allowed on top.
  EXPECT_LT(off_cpu, 0.02 * covered + stolen) << test::read_text(report);
  test::run({"rm", "-rf", dir});
}

// The Lua function names of one folded stack, root first: every frame whose label has a Lua
// file (".lua"), cut at " (".
// The frames both modes must agree on, root first: the root, each C function called from Lua,
// each C function entered by an FFI call (by kind: their native names depend on symbols), and
// each Lua function by name. Native frames between them are left out.
std::string model_token(const std::string& label) {
  for (const char* kind : {" [root]", " [cfunc]", " [ffi]"}) {
    const std::string k = kind;
    if (label.size() > k.size() && label.compare(label.size() - k.size(), k.size(), k) == 0) {
      return k.substr(1);
    }
  }
  if (label.find(".lua") == std::string::npos) return {};
  return label.substr(0, label.find(" ("));
}

std::vector<std::string> model_frames(const std::vector<std::string>& folded_frames) {
  std::vector<std::string> out;
  for (const std::string& f : folded_frames) {
    std::string t = model_token(f);
    if (!t.empty()) out.push_back(std::move(t));
  }
  return out;
}

// The same from `ljprof core --json` frames (innermost first).
std::vector<std::string> model_frames(const nlohmann::json& frames) {
  std::vector<std::string> out;
  for (auto it = frames.rbegin(); it != frames.rend(); ++it) {
    const std::string kind = (*it)["kind"];
    if (kind == "root" || kind == "cfunc" || kind == "ffi") {
      out.push_back("[" + kind + "]");
    } else if (kind == "lua") {
      out.push_back((*it)["main_chunk"].get<bool>() ? "main chunk"
                                                    : (*it)["name"].get<std::string>());
    }
  }
  return out;
}

// `ljprof record` and `ljprof core` share one frame model and one converter: the same process,
// recorded live and then dumped with gcore while it still holds the stack, shows the same frame
// kinds (root, C function, FFI callee) and the same Lua functions under the same names (the
// VM's own traceback wording) in the same order.
TEST(RecordAndCore, OneProcessShowsTheSameFramesLiveAndInItsCore) {
  ASSERT_EQ(geteuid(), 0u) << "ljprof record needs root";
  test::TempDir dir;
  test::Background target({"/usr/bin/luajit", test::record_workloads_dir() + "/same_stack.lua"});
  const std::string pid = std::to_string(target.pid());
  test::CommandResult r = test::run({test::ljprof_bin(), "record", "-F", "499", "-d", "2", "-q",
                                     "--stats", "-p", pid, "--folded", dir.file("stacks.folded")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  test::CommandResult g = test::run({"gcore", "-o", dir.file("core"), pid});
  ASSERT_EQ(g.exit_code, 0) << g.err;
  test::CommandResult c =
      test::run({test::ljprof_bin(), "core", "--json", dir.file("core") + "." + pid});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  const auto core = nlohmann::json::parse(c.out);
  ASSERT_TRUE(core["threads"][0]["reached_root"].get<bool>()) << c.out;
  const std::vector<std::string> from_core = model_frames(core["threads"][0]["frames"]);
  ASSERT_GE(from_core.size(), 5u) << c.out;  // root, cfunc (lua_cpcall's), main, outer, spin

  // Every stack agrees with the core's as far as both go (the core was taken at one moment:
  // in spin's loop, or in the FFI call below it); nearly all samples hold the core's stack
  // or extend it, and the FFI call's frames appear live as they do in a core.
  double total = 0, covered = 0, with_ffi = 0;
  for (const FoldedStack& stack : read_folded(dir.file("stacks.folded"))) {
    if (!stack.rooted()) continue;
    total += stack.count;
    const std::vector<std::string> live = model_frames(stack.frames);
    const size_t n = std::min(live.size(), from_core.size());
    EXPECT_TRUE(std::equal(live.begin(), live.begin() + n, from_core.begin())) << stack.line;
    if (n == from_core.size()) covered += stack.count;
    const std::vector<std::string> ffi_tail = {"spin", "[cfunc]", "[ffi]"};
    if (live.size() >= 3 && std::equal(ffi_tail.begin(), ffi_tail.end(), live.end() - 3)) {
      with_ffi += stack.count;
    }
  }
  ASSERT_GT(total, 100) << r.err;
  EXPECT_GT(covered, 0.9 * total) << "core: " << c.out;
  EXPECT_GT(with_ffi, 0.5 * total) << r.err;

  // --stats: the kernel program's time per sample over the delivered samples, whose walks hold
  // at least the core's frames (the raw walk adds the native ones), and this process's attach.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      r.err, m,
      std::regex(R"(kernel program per sample: median ([0-9.]+) us, p90 ([0-9.]+) us, ([0-9.]+) )"
                 R"(frames on average \(([0-9]+) samples\))")))
      << r.err;
  EXPECT_GT(std::stod(m[1]), 0.0);
  EXPECT_GE(std::stod(m[2]), std::stod(m[1]));
  EXPECT_GE(std::stod(m[3]), static_cast<double>(from_core.size()));
  EXPECT_GE(std::stod(m[4]), total);
  // The program's own tally: each Lua frame of the core's stack was read from the process (its
  // link at least), no read is wider than the walk's largest (the 512-byte Lua stack window), and
  // the row cache answers at most every lookup.
  const double frames = std::stod(m[3]);
  std::smatch w;
  ASSERT_TRUE(std::regex_search(
      r.err, w,
      std::regex(R"(kernel program per frame: ([0-9.]+) user-memory reads \(([0-9.]+) bytes\), )"
                 R"(([0-9.]+) row lookups \(([0-9.]+) answered by the row cache, ([0-9.]+) )")))
      << r.err;
  const size_t lua_frames = static_cast<size_t>(std::count_if(
      from_core.begin(), from_core.end(), [](const std::string& f) { return f[0] != '['; }));
  EXPECT_GE(std::stod(w[1]) * frames, static_cast<double>(lua_frames) - 0.5) << r.err;
  EXPECT_LE(std::stod(w[2]), 512 * std::stod(w[1])) << r.err;
  EXPECT_GT(std::stod(w[3]), 0.0) << r.err;
  EXPECT_LE(std::stod(w[4]), std::stod(w[3])) << r.err;
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(attach CPU: 1 process, [0-9.]+ ms in all)")))
      << r.err;
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"( ms  pid )" + pid + R"( \(luajit\))")))
      << r.err;
}

// Unwind tables kept between runs (--table-cache): the first recording of a process builds and
// stores a table for each of its files, private to this user; the second reads every one back
// and shows the same stack (same_stack.lua holds one) with as many walks reaching the root.
TEST(RecordTableCache, SecondRunReadsEveryTableAndShowsTheSameStack) {
  ASSERT_EQ(geteuid(), 0u) << "ljprof record needs root";
  test::TempDir dir;
  test::Background target({"/usr/bin/luajit", test::record_workloads_dir() + "/same_stack.lua"});
  const std::string pid = std::to_string(target.pid());
  const std::string cache = dir.file("tables");
  auto record = [&](const std::string& folded) {
    test::CommandResult r =
        test::run({test::ljprof_bin(), "record", "-F", "499", "-d", "1", "-q", "--stats",
                   "--table-cache", cache, "-p", pid, "--folded", dir.file(folded)});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.err;
  };
  const std::string first = record("first.folded");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      first, m, std::regex(R"(unwind tables: 0 read from the cache \S+, ([0-9]+) built)")))
      << first;
  const int built = std::stoi(m[1]);
  EXPECT_GE(built, 3) << "luajit, libc, ld.so at least";
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(cache)) {
    ++files;
    EXPECT_EQ(e.status().permissions() & std::filesystem::perms::all,
              std::filesystem::perms::owner_read | std::filesystem::perms::owner_write)
        << e.path();
  }
  EXPECT_EQ(files, static_cast<size_t>(built));
  const std::string second = record("second.folded");
  EXPECT_TRUE(std::regex_search(second, std::regex("unwind tables: " + std::to_string(built) +
                                                   R"( read from the cache \S+, 0 built)")))
      << second;
  auto top = [&](const std::string& name) {
    FoldedStack best;
    double rooted = 0, total = 0;
    for (const FoldedStack& s : read_folded(dir.file(name))) {
      total += s.count;
      if (s.rooted()) rooted += s.count;
      if (s.count > best.count) best = s;
    }
    EXPECT_GT(rooted, 0.99 * total) << name;
    return std::string(best.line.substr(0, best.line.rfind(' ')));
  };
  EXPECT_EQ(top("first.folded"), top("second.folded"));
}

// A function called from a short-lived closure (a string.gsub callback, a new closure per
// round) is named from the call site in every sample. The recorder reads the caller's
// prototype, which the kernel saw at sample time, not the closure object, which may be
// collected before the sample is symbolized (seen in `make demo`'s tarantool workload: 11 of
// ~200 callback samples unnamed; this workload does not reproduce the collection reliably).
TEST(RecordNames, CalleeOfACollectedClosureKeepsItsName) {
  ASSERT_EQ(geteuid(), 0u) << "ljprof record needs root";
  test::TempDir dir;
  test::CommandResult r = test::run({test::ljprof_bin(), "record", "-F", "499", "-q", "--folded",
                                     dir.file("stacks.folded"), "--", "/usr/bin/luajit",
                                     test::record_workloads_dir() + "/closure_caller.lua", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  double named = 0, unnamed = 0;
  for (const FoldedStack& stack : read_folded(dir.file("stacks.folded"))) {
    for (const std::string& f : stack.frames) {
      if (f.find("<closure_caller.lua:8>") != std::string::npos) unnamed += stack.count;
      if (f.rfind("work (closure_caller.lua:", 0) == 0) named += stack.count;
    }
  }
  ASSERT_GT(named + unnamed, 300) << r.err;
  EXPECT_EQ(unnamed, 0) << named << " named, " << unnamed << " unnamed";
}

// Processes that live a few milliseconds, as CLI scripts, `resty` runs and test suites do: each
// runs workloads/short_lived.lua for a set CPU time by its own clock (5, 15 and 50 ms, one
// recording per group) under `record -- bash -c 'for ...'`, and is gone long before the agent
// names its samples; the kernel's copies of its prototypes and traces name them. Of the stacks
// with a Lua frame, at least 95% have every Lua frame named, and the loop function's frames
// carry the function and line the VM reports (debug.getinfo). Sized by time: each process
// gets ~MS samples at 999 Hz of CPU clock whatever the machine's speed; the floor is a fifth
// of that (samples before a new process's context are not walked).
struct ShortLivedGroup {
  int ms;
  int processes;
};

// workloads/short_lived.lua's loop function as the VM reports it (debug.getinfo, written to a
// file in `dir` by one run of its own), and the folded label of its loop's line.
struct ShortLivedLoop {
  std::string name;
  std::string frame;  // "NAME (short_lived.lua:LINE)"
};
ShortLivedLoop short_lived_loop(const std::string& script, const std::string& dir) {
  const std::string report = dir + "/vm.txt";
  EXPECT_EQ(test::run({"luajit", script, "0", report}).exit_code, 0);
  std::istringstream vm(test::read_text(report));
  ShortLivedLoop loop;
  int linedefined = 0, loop_line = 0;
  EXPECT_TRUE(vm >> loop.name >> linedefined >> loop_line) << test::read_text(report);
  loop.frame = fmt::format("{} (short_lived.lua:{})", loop.name, loop_line);
  return loop;
}

// The samples of a recording of short_lived.lua runs, by stack: with every Lua frame named or
// with an "[unknown: ...]" frame inside (the first frame is where the walk ended); at the loop's
// line or elsewhere in its function; walked with a context, and of those reaching a root.
struct ShortLivedTally {
  double named = 0, unnamed = 0, in_loop = 0, loop_elsewhere = 0, walked = 0, rooted = 0;
};
ShortLivedTally tally_short_lived(const std::string& folded, const ShortLivedLoop& loop) {
  ShortLivedTally t;
  for (const FoldedStack& stack : read_folded(folded)) {
    if (stack.had_context()) {
      t.walked += stack.count;
      t.rooted += stack.rooted() ? stack.count : 0;
    }
    const bool unknown_inside =
        std::any_of(stack.frames.begin() + (stack.frames.empty() ? 0 : 1), stack.frames.end(),
                    [](const std::string& f) { return f.starts_with("[unknown"); });
    if (unknown_inside) {
      t.unnamed += stack.count;
    } else if (stack.line.find("short_lived.lua:") != std::string::npos) {
      t.named += stack.count;
    }
    for (const std::string& f : stack.frames) {
      if (f == loop.frame) {
        t.in_loop += stack.count;
      } else if (f.starts_with(loop.name + " (")) {
        t.loop_elsewhere += stack.count;
      }
    }
  }
  return t;
}

// A recording of short_lived.lua runs: its scratch directory, where the folded stacks go, the
// script, and its loop as the VM names it.
struct ShortLivedRun {
  test::TempDir tmp;
  std::string folded = tmp.path() + "/stacks.folded";
  std::string script = test::record_workloads_dir() + "/short_lived.lua";
  ShortLivedLoop loop = short_lived_loop(script, tmp.path());
};

class RecordShortLived : public ::testing::TestWithParam<ShortLivedGroup> {};

TEST_P(RecordShortLived, LuaFramesNamedAndOnTheVmsLines) {
  const ShortLivedGroup g = GetParam();
  ASSERT_EQ(geteuid(), 0u) << "ljprof record needs root";
  const ShortLivedRun run;
  const test::TempDir& tmp = run.tmp;
  const std::string &folded = run.folded, &script = run.script;
  const ShortLivedLoop& loop = run.loop;
  ASSERT_FALSE(loop.name.empty());
  test::CommandResult r = test::run(
      {test::ljprof_bin(), "record", "-F", "999", "-q", "-o", tmp.path() + "/cpu.pb.gz", "--folded",
       folded, "--", "bash", "-c",
       fmt::format("for i in $(seq {}); do luajit {} {}; done", g.processes, script, g.ms)});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const ShortLivedTally t = tally_short_lived(folded, loop);
  std::cout << g.processes << " processes of " << g.ms << " ms: " << t.named << " stacks named, "
            << t.unnamed << " not; " << t.rooted << " of " << t.walked << " walks reached a root\n";
  const double floor = 0.2 * g.processes * g.ms * 0.999;
  EXPECT_GE(t.named + t.unnamed, floor) << r.err;
  EXPECT_GE(t.named, 0.95 * (t.named + t.unnamed))
      << t.named << " stacks with every Lua frame named, " << t.unnamed << " not\n"
      << test::read_text(folded);
  // The storm's walks reach a root: forks and execs of a known executable are walked from their
  // first instruction (kernel-built contexts), libraries from their mmap (the kernel adds them
  // from the recorder's templates), and the start-up and exit code without CFI by rows its
  // instructions prove. Measured on this 2-core host (2026-12-07): 5 ms 99.5-99.7%, 15 ms
  // 99.6-99.9%, 50 ms 99.9-100% (2-7 unrooted walks of ~650 in the 5 ms group, mostly
  // _dl_fixup under the lazy-binding trampoline, whose CFA is rbx-based and rbx of a caller
  // frame is not tracked; before the recorder read a process again whose code grew while it was
  // read — maps read mid-exec — and before lj_vm_cpuid had its leaf rows in stripped builds,
  // 97.9-99.6%, which once failed); earlier (2026-12-06), the same under a load of 7,
  // with the whole test held to 0.4 CPU (2.5x slower) and with ljprof alone held to 0.15 CPU
  // the shares did not move. Why the share does not move with the machine's speed: each
  // process runs MS of its own CPU clock, so a faster or slower machine gives it as many
  // samples, and its start-up and exit (ld.so, page faults, exit handlers) are CPU work that
  // scales with it; what does not scale, the recorder's reaction time, no longer matters: every
  // exec after the first of an executable gets its context, and every library the recorder has
  // seen its rows, in the kernel at the exec and the mmap themselves.
  EXPECT_GE(t.rooted, 0.98 * t.walked)
      << t.rooted << " of " << t.walked << " walks reached a root\n"
      << r.err;
  // The loop is one line: the function's samples are on it (its other lines run once).
  EXPECT_GE(t.in_loop, 0.95 * (t.in_loop + t.loop_elsewhere))
      << t.in_loop << " at " << loop.frame << ", " << t.loop_elsewhere << " elsewhere\n"
      << test::read_text(folded);
}

INSTANTIATE_TEST_SUITE_P(Groups, RecordShortLived,
                         ::testing::Values(ShortLivedGroup{5, 100}, ShortLivedGroup{15, 100},
                                           ShortLivedGroup{50, 40}),
                         [](const auto& info) { return std::to_string(info.param.ms) + "ms"; });

// The command `record --` starts is held from its exec until its context (with the libraries
// ld.so maps) is published, so even with no table cache (every unwind table built, the slowest
// attach) its first instructions are sampled: of all the recording's samples, those of a 400 ms
// luajit (its own CPU clock) reach a root and sit at the VM's loop line like a long run's. Before
// the hold, such a process lost its first 60-120 ms to "no unwind context yet". The samples
// inside fork and execve (no context by design) and its start-up (ld.so, LuaJIT's set-up), 2.5%
// here, 6% on a machine 2.5x slower, are what the 92% leaves room for; the same luajit unheld
// (started by `sh -c`) had 89.5%. A command that cannot be run is an error (exit 2) naming it.
TEST(RecordLaunch, TheCommandIsSampledFromItsFirstInstructions) {
  ASSERT_EQ(geteuid(), 0u) << "ljprof record needs root";
  const ShortLivedRun run;
  ASSERT_FALSE(run.loop.name.empty());
  test::CommandResult r =
      test::run({test::ljprof_bin(), "record", "-F", "999", "-q", "--table-cache", "", "--folded",
                 run.folded, "--", "luajit", run.script, "400"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.err, m, std::regex(R"(: (\d+) samples in )"))) << r.err;
  const double samples = std::stod(m[1]);
  const ShortLivedTally t = tally_short_lived(run.folded, run.loop);
  std::cout << samples << " samples, " << t.rooted << " reached a root, " << t.in_loop << " at "
            << run.loop.frame << "\n";
  EXPECT_GE(samples, 0.5 * 400) << r.err;
  EXPECT_GE(t.rooted, 0.92 * samples) << r.err;
  EXPECT_GE(t.in_loop, 0.92 * samples) << r.err << test::read_text(run.folded);

  const std::string no_such = run.tmp.path() + "/no-such";
  test::CommandResult missing =
      test::run({test::ljprof_bin(), "record", "-q", "--folded", run.folded, "--", no_such});
  EXPECT_EQ(missing.exit_code, 2) << missing.err;
  EXPECT_NE(missing.err.find("cannot run " + no_such + ": No such file"), std::string::npos)
      << missing.err;
}

// The pprof file `ljprof record -o` writes opens in the real `go tool pprof` (Debian golang-go),
// whose -top table lists the workload's Lua functions by the names the VM gives them
// (linedefined from the workload's own debug.getinfo) with cumulative sample counts whose
// shares match the VM's clock like the folded stacks do.
TEST(RecordPprof, GoToolPprofTopListsTheWorkloadsLuaFunctions) {
  ASSERT_EQ(geteuid(), 0u) << "ljprof record needs root";
  const std::string dir = testing::TempDir() + "/ljprof-record-pprof";
  test::run({"rm", "-rf", dir});
  test::run({"mkdir", "-p", dir});
  const std::string report = dir + "/vm-report.txt", profile = dir + "/cpu.pb.gz";
  test::CommandResult r =
      test::run({test::ljprof_bin(), "record", "-F", "999", "-q", "-o", profile, "--",
                 "/usr/bin/luajit", test::record_workloads_dir() + "/run_split.lua", "3", report});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const VmReport vm = VmReport::parse(test::read_text(report));
  ASSERT_EQ(vm.parts.size(), 5u) << "the workload did not finish: " << r.err;

  test::CommandResult top =
      test::go_tool_pprof(dir, {"-top", "-nodecount=200", "-sample_index=samples", profile});
  ASSERT_EQ(top.exit_code, 0) << top.err;
  const auto rows = test::parse_pprof_top(top.out);
  for (const char* name : {"burn_a", "burn_b", "in_c", "in_ffi", "cmp"}) {
    EXPECT_EQ(rows.count(vm.function(name)), 1u) << name << " (" << vm.function(name) << ")\n"
                                                 << top.out;
  }
  double vm_total = 0, prof_total = 0;
  for (const char* name : kParts) {
    vm_total += vm.parts.at(name).second;
    if (rows.count(vm.function(name))) prof_total += std::stod(rows.at(vm.function(name)).cum);
  }
  // (the -top listing carries the profile's counters, the unsampled periods among them)
  const double tolerance = share_tolerance(5.0, top.out);
  for (const char* name : kParts) {
    if (!rows.count(vm.function(name))) continue;
    const double prof = 100 * std::stod(rows.at(vm.function(name)).cum) / prof_total;
    const double share = 100 * vm.parts.at(name).second / vm_total;
    EXPECT_NEAR(prof, share, tolerance)
        << name << ": pprof cum " << prof << "% vs the VM's clock " << share << "%\n"
        << top.out;
  }
  test::run({"rm", "-rf", dir});
}

}  // namespace
}  // namespace ljprof

namespace ljprof {
namespace {

// C code called from inside a JIT trace, recorded under Debian tarantool (whose symbols name
// it): the trace exit handler's call of lj_trace_exit (workloads/trace_exits.lua: the walk
// crosses it via G->cur_L->cframe, and lj_trace_exit's protected call of trace_exit_cp, a C
// frame with no Lua frame), and the collector's steps from a trace (workloads/gc_in_trace.lua:
// lj_gc_step_jit, with vmstate switched to GC, entered at cur_L's C frame with BASE =
// jit_base). By LuaJIT's design every sample inside that function is called from the trace of
// the workload's loop function, so the frame right before it (rootward) must be that function,
// by the name the VM reports, and no Lua frame may appear inside it (nothing in these
// workloads runs Lua there).
struct FromTraceCase {
  std::string workload;   // in test::record_workloads_dir(); reports "NAME LINEDEFINED"
  std::string native;     // the C function the trace calls
  double min_root_share;  // of the samples that had an unwind context
  std::string label;
};

void PrintTo(const FromTraceCase& c, std::ostream* os) {
  *os << c.label;
}

class RecordFromTrace : public ::testing::TestWithParam<FromTraceCase> {};

TEST_P(RecordFromTrace, CalleeNestsUnderTheTracedFunction) {
  const FromTraceCase& c = GetParam();
  ASSERT_EQ(geteuid(), 0u) << "ljprof record needs root";
  const std::string dir = testing::TempDir() + "/ljprof-record-" + c.label;
  test::run({"mkdir", "-p", dir});
  const std::string report = dir + "/vm-report.txt", folded = dir + "/stacks.folded";
  test::CommandResult r = test::run({test::ljprof_bin(), "record", "-F", "999", "-q", "--folded",
                                     folded, "--", "/usr/bin/tarantool",
                                     test::record_workloads_dir() + "/" + c.workload, "3", report});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto fields = split(test::read_text(report), ' ');
  ASSERT_EQ(fields.size(), 2u) << test::read_text(report);
  // The loop function, by the name its caller used (the report's first field) and its file;
  // JIT-compiled code of it carries the same label.
  const std::string traced = fields[0] + " (" + c.workload;
  RootTally tally;
  double inside = 0, nested = 0;
  for (const FoldedStack& stack : read_folded(folded)) {
    const std::vector<std::string>& frames = stack.frames;
    const double n = stack.count;
    tally.add(stack);
    for (size_t i = 0; i < frames.size(); ++i) {
      if (frames[i] != c.native) continue;
      inside += n;
      // Right before it: the traced function (the trace's machine code is shown as the Lua
      // function it runs).
      if (i > 0 && frames[i - 1].rfind(traced, 0) == 0) nested += n;
      for (size_t k = i + 1; k < frames.size(); ++k) {
        EXPECT_EQ(frames[k].find(".lua:"), std::string::npos) << stack.line;
      }
      break;
    }
  }
  const auto [total, with_context, rooted] = tally;
  std::cout << "samples " << total << ", in " << c.native << " " << 100 * inside / total
            << "%, under the traced function " << 100 * nested / std::max(inside, 1.0)
            << "%, rooted " << 100 * rooted / std::max(with_context, 1.0) << "%\n";
  EXPECT_GT(inside, 0.1 * total) << r.err;  // the loops do little else (measured ~60%)
  EXPECT_GE(nested, 0.99 * inside) << r.err;
  EXPECT_GE(rooted, c.min_root_share * with_context) << r.err;
  test::run({"rm", "-rf", dir});
}

// Measured 99.9% rooted (trace exits: 98.3% before the handler's code after lj_trace_exit's
// return had rows) and 99.5-100% (the GC loop).
INSTANTIATE_TEST_SUITE_P(
    Real, RecordFromTrace,
    ::testing::Values(FromTraceCase{"trace_exits.lua", "lj_trace_exit", 0.98, "trace_exits"},
                      FromTraceCase{"gc_in_trace.lua", "lj_gc_step_jit", 0.98, "gc_in_trace"}),
    [](const ::testing::TestParamInfo<FromTraceCase>& info) { return info.param.label; });

}  // namespace
}  // namespace ljprof

namespace ljprof {
namespace {

// JIT-compiled Lua resolved to the functions and lines it runs (workloads/jit_inlined.lua,
// whose split is known by construction: one serial chain of identical steps). The trace's
// snapshots name the functions LuaJIT inlined into the loop's trace and the lines they are at.
struct JitRecording {
  std::string dir, profile, folded, out;
};

JitRecording record_jit_inlined(const std::string& mode,
                                const std::string& runtime = "/usr/bin/luajit") {
  JitRecording r;
  r.dir = testing::TempDir() + "/ljprof-record-jit-" + mode + "-" +
          std::filesystem::path(runtime).filename().string();
  test::run({"rm", "-rf", r.dir});
  test::run({"mkdir", "-p", r.dir});
  r.profile = r.dir + "/cpu.pb.gz";
  r.folded = r.dir + "/cpu.folded";
  test::CommandResult rec = test::run(
      {test::ljprof_bin(), "record", "-F", "999", "-q", "-o", r.profile, "--folded", r.folded, "--",
       runtime, test::record_workloads_dir() + "/jit_inlined.lua", mode, "3"});
  EXPECT_EQ(rec.exit_code, 0) << rec.err;
  r.out = rec.out + rec.err;
  return r;
}

// (a) heavy and light, both inlined into one trace, by name and in their 75/25 share. Under
// tarantool, whose LuaJIT has no SnapShot.mcofs, the snapshots come from the guards' exits.
class RecordJitInlined : public ::testing::TestWithParam<std::string> {};

TEST_P(RecordJitInlined, InlinedFunctionsAppearByNameInTheirShare) {
  ASSERT_EQ(geteuid(), 0u) << "ljprof record needs root";
  const JitRecording r = record_jit_inlined("inlined", GetParam());
  double heavy = 0, light = 0;
  for (const FoldedStack& s : read_folded(r.folded)) {
    for (const std::string& f : s.frames) {
      if (f.rfind("heavy (jit_inlined.lua:", 0) == 0) heavy += s.count;
      if (f.rfind("light (jit_inlined.lua:", 0) == 0) light += s.count;
    }
  }
  ASSERT_GT(heavy + light, 1000) << r.out;
  const double share = 100 * heavy / (heavy + light);
  std::cout << "heavy " << share << "% of heavy+light (" << heavy << " / " << light << ")\n";
  EXPECT_NEAR(share, 75.0, 10.0) << r.out;
  // Marked as JIT-compiled: every JIT frame carries its trace's number as a pprof label.
  test::CommandResult tags = test::go_tool_pprof(r.dir, {"-tags", r.profile});
  EXPECT_NE(tags.out.find(" trace: Total"), std::string::npos) << tags.out << tags.err;
  test::run({"rm", "-rf", r.dir});
}

INSTANTIATE_TEST_SUITE_P(Real, RecordJitInlined,
                         ::testing::Values("/usr/bin/luajit", "/usr/bin/tarantool"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return std::filesystem::path(info.param).filename().string();
                         });

// (d) `-a` over two runtimes: luajit runs the inlined loop (heavy, light), tarantool the lines
// loop — each process's first trace is trace 1. Every JIT frame is named from its own process's
// trace: go tool pprof lists no `trace N` function, and each pid's samples hold only its own
// functions.
TEST(RecordJit, AllProcessesNeverShareATraceAcrossRuntimes) {
  ASSERT_EQ(geteuid(), 0u) << "ljprof record needs root";
  const std::string dir = testing::TempDir() + "/ljprof-record-jit-two";
  test::run({"rm", "-rf", dir});
  test::run({"mkdir", "-p", dir});
  const std::string workload = test::record_workloads_dir() + "/jit_inlined.lua";
  // Both run until the test ends (the guards kill them), however long ljprof takes to attach;
  // it starts once both print their lines, right before their loops.
  test::Background luajit({"/usr/bin/luajit", workload, "inlined", "120"}, dir + "/luajit.out");
  test::Background tarantool({"/usr/bin/tarantool", workload, "lines", "120"},
                             dir + "/tarantool.out");
  ASSERT_GT(luajit.pid(), 0);
  ASSERT_GT(tarantool.pid(), 0);
  ASSERT_TRUE(test::wait_for_text(dir + "/luajit.out", "line cheap", 60) &&
              test::wait_for_text(dir + "/tarantool.out", "line cheap", 60))
      << test::read_text(dir + "/luajit.out") << test::read_text(dir + "/tarantool.out");
  const std::string profile = dir + "/cpu.pb.gz";
  test::CommandResult rec =
      test::run({test::ljprof_bin(), "record", "-a", "-F", "499", "-d", "2", "-q", "-o", profile});
  ASSERT_EQ(rec.exit_code, 0) << rec.err;
  test::CommandResult top = test::go_tool_pprof(dir, {"-top", "-sample_index=samples", profile});
  ASSERT_EQ(top.exit_code, 0) << top.err;
  EXPECT_FALSE(std::regex_search(top.out, std::regex(R"(\btrace \d+\s*$)", std::regex::multiline)))
      << top.out;
  // go tool pprof -traces: one block per stack, its pid label, then its functions.
  test::CommandResult traces = test::go_tool_pprof(dir, {"-traces", profile});
  ASSERT_EQ(traces.exit_code, 0) << traces.err;
  std::map<std::string, std::set<std::string>> functions;  // pid -> Lua functions seen
  std::string pid;
  std::istringstream in(traces.out);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, std::regex(R"(^\s+pid:\s+(\d+))"))) pid = m[1];
    if (std::regex_search(line, m, std::regex(R"(\s(heavy|light|lines)$)"))) {
      functions[pid].insert(m[1]);
    }
  }
  const std::set<std::string> inlined{"heavy", "light"}, lines{"lines"};
  EXPECT_EQ(functions[std::to_string(luajit.pid())], inlined) << traces.out.substr(0, 4000);
  EXPECT_EQ(functions[std::to_string(tarantool.pid())], lines) << traces.out.substr(0, 4000);
  test::run({"rm", "-rf", dir});
}

// (e) `-a` and a process that loads LuaJIT long after its start (dlopen, as an embedding
// program's plugin does): its executable mmap is notified, so it is followed though the /proc
// scan passed it over before (it skips processes it already looked at), and its Lua function is
// in the profile under its pid (go tool pprof -traces).
TEST(RecordAll, AProcessThatLoadsLuajitLaterIsFollowedFromItsMmap) {
  ASSERT_EQ(geteuid(), 0u) << "ljprof record needs root";
  test::TempDir tmp;
  const std::string dir = tmp.path(), go = dir + "/go", profile = dir + "/cpu.pb.gz";
  test::Background late({"python3", test::record_workloads_dir() + "/late_luajit.py", go, "1"},
                        dir + "/late.out");
  ASSERT_GT(late.pid(), 0);
  test::Background rec(
      {test::ljprof_bin(), "record", "-a", "-F", "499", "-d", "4", "-q", "-o", profile},
      dir + "/record.log");
  // Past the recorder's first /proc scan, which looked at the process and passed it over (no
  // LuaJIT mapped then): it samples from then on (its perf events come after that scan).
  ASSERT_TRUE(test::wait_until_sampling(rec.pid(), 60)) << test::read_text(dir + "/record.log");
  std::ofstream(go) << "go\n";
  EXPECT_EQ(late.wait(20000), 0) << test::read_text(dir + "/late.out");
  ASSERT_EQ(rec.wait(20000), 0) << test::read_text(dir + "/record.log");
  test::CommandResult traces = test::go_tool_pprof(dir, {"-traces", profile});
  ASSERT_EQ(traces.exit_code, 0) << traces.err;
  size_t late_samples = 0;
  std::string pid;
  std::istringstream in(traces.out);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, std::regex(R"(^\s+pid:\s+(\d+))"))) pid = m[1];
    if (pid == std::to_string(late.pid()) && line.find(" late_loaded_busy") != std::string::npos) {
      ++late_samples;
    }
  }
  EXPECT_GT(late_samples, 0u) << traces.out.substr(0, 4000);
}

// Short-lived runs under `record -a` (as `ljprof agent` sees `resty` runs and cron scripts): 40
// luajit runs of 15 ms of CPU each (workloads/short_lived.lua) started once ljprof samples. The
// first run's exec is followed from its notification; later ones from the exec itself (the
// kernel builds their context from the executable's template), and their Lua frames are named
// from the kernel's copies: at least 95% of the stacks with a Lua frame have all named, at the
// loop's line as the VM reports it. The floor is a fifth of the CPU time the runs take at 999 Hz.
TEST(RecordAll, ShortLivedRunsAreNamedFromTheirExec) {
  ASSERT_EQ(geteuid(), 0u) << "ljprof record needs root";
  test::TempDir tmp;
  const std::string dir = tmp.path(), folded = dir + "/stacks.folded";
  const std::string script = test::record_workloads_dir() + "/short_lived.lua";
  const ShortLivedLoop loop = short_lived_loop(script, dir);
  ASSERT_FALSE(loop.name.empty());
  test::Background rec({test::ljprof_bin(), "record", "-a", "-F", "999", "-d", "60", "-q", "-o",
                        dir + "/cpu.pb.gz", "--folded", folded},
                       dir + "/record.log");
  ASSERT_TRUE(test::wait_until_sampling(rec.pid(), 60)) << test::read_text(dir + "/record.log");
  const int runs = 40, ms = 15;
  test::CommandResult storm = test::run(
      {"bash", "-c", fmt::format("for i in $(seq {}); do luajit {} {}; done", runs, script, ms)});
  ASSERT_EQ(storm.exit_code, 0) << storm.err;
  ::kill(rec.pid(), SIGINT);
  ASSERT_EQ(rec.wait(30000), 0) << test::read_text(dir + "/record.log");
  const ShortLivedTally t = tally_short_lived(folded, loop);
  std::cout << runs << " runs of " << ms << " ms under -a: " << t.named << " stacks named, "
            << t.unnamed << " not, " << t.in_loop << " at " << loop.frame << "\n";
  EXPECT_GE(t.in_loop, 0.2 * runs * ms * 0.999) << test::read_text(dir + "/record.log");
  EXPECT_GE(t.named, 0.95 * (t.named + t.unnamed)) << test::read_text(folded);
}

// (b) Line-level shares inside a trace: pprof -lines puts the costly line (9 steps) first and
// the cheap one (1 step) second.
class RecordJitLines : public ::testing::TestWithParam<std::string> {};

TEST_P(RecordJitLines, PprofLinesPutTheCostlyLineFirst) {
  ASSERT_EQ(geteuid(), 0u) << "ljprof record needs root";
  const JitRecording r = record_jit_inlined("lines", GetParam());
  std::string costly, cheap;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("line costly ", 0) == 0) costly = line.substr(12);
    if (line.rfind("line cheap ", 0) == 0) cheap = line.substr(11);
  }
  ASSERT_FALSE(costly.empty() || cheap.empty()) << r.out;
  test::CommandResult top = test::go_tool_pprof(
      r.dir, {"-top", "-lines", "-nodecount=5", "-sample_index=samples", r.profile});
  ASSERT_EQ(top.exit_code, 0) << top.err;
  std::vector<std::string> order;
  std::istringstream rows(top.out);
  for (std::string line; std::getline(rows, line);) {
    const size_t at = line.find("jit_inlined.lua:");
    if (at != std::string::npos) order.push_back(line.substr(at + 16));
  }
  ASSERT_GE(order.size(), 2u) << top.out;
  EXPECT_EQ(order[0], costly) << top.out;
  EXPECT_EQ(order[1], cheap) << top.out;
  test::run({"rm", "-rf", r.dir});
}

INSTANTIATE_TEST_SUITE_P(Real, RecordJitLines,
                         ::testing::Values("/usr/bin/luajit", "/usr/bin/tarantool"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return std::filesystem::path(info.param).filename().string();
                         });

}  // namespace
}  // namespace ljprof
