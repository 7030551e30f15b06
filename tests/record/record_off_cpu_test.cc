// `ljprof record --off-cpu` against real processes. Oracle: the workload's own monotonic clock
// around each blocking call (tests/record/workloads/off_cpu.lua), and `go tool pprof` reading
// the profile's off_cpu sample type.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>

#include "support/nginx_lua.h"
#include "support/test_support.h"

namespace ljprof {
namespace {

// The "cum" column of `go tool pprof -top` for `function`, in seconds ("2.93s", "345.59ms").
double cum_seconds(const std::map<std::string, test::PprofTopRow>& rows,
                   const std::string& function) {
  auto it = rows.find(function);
  if (it == rows.end()) return 0;
  const std::string& v = it->second.cum;
  const double n = std::stod(v);
  if (v.ends_with("ms")) return n / 1e3;
  if (v.ends_with("us")) return n / 1e6;
  if (v.ends_with("ns")) return n / 1e9;
  return n;
}

// Per round one function blocks 3 x 30 ms and another 1 x 10 ms: their off-CPU shares are the
// split the workload measured (90/10) within 5 points, the total within 10% of its own sleeping
// time, at the Lua functions that called usleep.
TEST(RecordOffCpu, BlockedTimeSplitsAsTheWorkloadsOwnClock) {
  ASSERT_EQ(geteuid(), 0u) << "ljprof record needs root";
  test::TempDir dir;
  const std::string profile = dir.file("off.pb.gz");
  const test::CommandResult rec =
      test::run({test::ljprof_bin(), "record", "--off-cpu=5ms", "-q", "-o", profile, "--folded",
                 dir.file("off.folded"), "--", "/usr/bin/luajit",
                 test::record_workloads_dir() + "/off_cpu.lua", "3"});
  ASSERT_EQ(rec.exit_code, 0) << rec.out << rec.err;
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(rec.out, m, std::regex(R"(off_cpu long=([0-9.]+) short=([0-9.]+))")))
      << rec.out;
  const double long_s = std::stod(m[1]), short_s = std::stod(m[2]);
  const test::CommandResult top =
      test::go_tool_pprof(dir.path(), {"-top", "-nodecount=200", "-sample_index=off_cpu", profile});
  ASSERT_EQ(top.exit_code, 0) << top.err;
  const auto rows = test::parse_pprof_top(top.out);
  const double ours_long = cum_seconds(rows, "long_wait"),
               ours_short = cum_seconds(rows, "short_wait");
  std::cout << "off-CPU: long_wait " << ours_long << " s, short_wait " << ours_short
            << " s; the workload measured " << long_s << " s and " << short_s << " s\n";
  ASSERT_GT(ours_long + ours_short, 0) << top.out;
  EXPECT_NEAR(100 * ours_long / (ours_long + ours_short), 100 * long_s / (long_s + short_s), 5)
      << top.out;
  EXPECT_NEAR(ours_long + ours_short, long_s + short_s, 0.1 * (long_s + short_s)) << top.out;
  // The state label says why: it waited.
  const test::CommandResult tags =
      test::go_tool_pprof(dir.path(), {"-tags", "-sample_index=off_cpu", profile});
  EXPECT_NE(tags.out.find("blocked"), std::string::npos) << tags.out;
  // The folded stacks of a recording with --off-cpu are the off-CPU view: usleep's callers.
  const std::string folded = test::read_text(dir.file("off.folded"));
  EXPECT_NE(folded.find("long_wait"), std::string::npos) << folded;
}

// `ljprof record -p PID ARGS...` of tests/record/workloads/off_cpu_tarantool.lua (with `mode`
// as its argument: "" blocks the tx thread, "idle" does not), started in `dir` and killed after;
// its pid (the tx thread's id) in `*pid`.
test::CommandResult record_tarantool(const test::TempDir& dir, const std::string& mode,
                                     std::vector<std::string> args, uint32_t* pid) {
  std::vector<std::string> argv = {"/usr/bin/tarantool",
                                   test::record_workloads_dir() + "/off_cpu_tarantool.lua"};
  if (!mode.empty()) argv.push_back(mode);
  test::Background tarantool(argv, dir.file("tarantool" + mode + ".out"));
  if (!test::wait_for_text(dir.file("tarantool" + mode + ".out"), "ljprof-ready", 60)) {
    return {1, "", "the workload did not start"};
  }
  *pid = static_cast<uint32_t>(tarantool.pid());
  args.insert(args.begin(), {test::ljprof_bin(), "record", "-p", std::to_string(*pid), "-q"});
  return test::run(args);
}

// A Tarantool whose tx thread waits for work in epoll_wait, but for a fiber that blocks the
// thread in a C call: the event loop's own waits are labelled idle and left out of the off-CPU
// view, which holds the blocking call at the Lua function that made it.
TEST(RecordOffCpu, AnIdleEventLoopIsLabelledIdleAndLeftOut) {
  ASSERT_EQ(geteuid(), 0u) << "ljprof record needs root";
  test::TempDir dir;
  const std::string profile = dir.file("off.pb.gz");
  uint32_t pid = 0;
  const test::CommandResult rec = record_tarantool(
      dir, "", {"--off-cpu", "-d", "2", "-o", profile, "--folded", dir.file("off.folded")}, &pid);
  ASSERT_EQ(rec.exit_code, 0) << rec.out << rec.err;
  const test::CommandResult tags =
      test::go_tool_pprof(dir.path(), {"-tags", "-sample_index=off_cpu", profile});
  EXPECT_NE(tags.out.find("idle"), std::string::npos) << tags.out;
  EXPECT_NE(tags.out.find("blocked"), std::string::npos) << tags.out;
  const std::string folded = test::read_text(dir.file("off.folded"));
  EXPECT_NE(folded.find("block_tx"), std::string::npos) << folded;
  EXPECT_EQ(folded.find("epoll_wait"), std::string::npos) << folded;
}

// A fiber blocks Tarantool's tx thread in a C call for 100 ms every 0.4 s: each block is an
// event-loop stall of about 100 ms whose off-CPU stack names the Lua function that made the call;
// an idle Tarantool has none.
TEST(RecordLoopStalls, EachBlockOfTheTxThreadIsAStallNamingItsLuaFunction) {
  ASSERT_EQ(geteuid(), 0u) << "ljprof record needs root";
  test::TempDir dir;
  uint32_t pid = 0;
  const test::CommandResult rec =
      record_tarantool(dir, "",
                       {"--off-cpu", "--loop-stalls", "50ms", "--stalls", dir.file("stalls.json"),
                        "-d", "2", "-o", dir.file("off.pb.gz")},
                       &pid);
  ASSERT_EQ(rec.exit_code, 0) << rec.out << rec.err;
  EXPECT_NE(rec.err.find("event-loop stalls: p50"), std::string::npos) << rec.err;
  const nlohmann::json stalls = nlohmann::json::parse(test::read_text(dir.file("stalls.json")));
  // One stall per block: at least two in 2 s, and never two for one block — consecutive ones
  // start about a sleep apart (0.4 s: libev times the sleep from the loop time cached before
  // the block; 0.3 s allows for jitter). How many in all depends on how long the kernel
  // programs ran before -d's clock started, which a busy machine stretches.
  ASSERT_GE(stalls.size(), 2u) << stalls.dump(1);
  for (size_t i = 1; i < stalls.size(); ++i) {
    EXPECT_GE(stalls[i]["start_ns"].get<double>() - stalls[i - 1]["start_ns"].get<double>(), 0.3e9)
        << stalls.dump(1);
  }
  size_t named = 0;
  for (const nlohmann::json& s : stalls) {
    EXPECT_EQ(s["tid"], pid) << "the tx thread is the main thread";
    // The 100 ms usleep, plus however late a busy machine lets the thread run again.
    EXPECT_GE(s["duration_ns"].get<double>() / 1e6, 95) << s.dump();
    EXPECT_LE(s["duration_ns"].get<double>() / 1e6, 250) << s.dump();
    for (const nlohmann::json& stack : s["stacks"]) {
      bool in_block_tx = false;
      for (const nlohmann::json& f : stack["frames"]) {
        in_block_tx = in_block_tx || f.get<std::string>().find("block_tx") != std::string::npos;
      }
      if (in_block_tx && stack["off_cpu_ns"].get<double>() > 50e6) {
        ++named;
        break;
      }
    }
  }
  // The first may have begun before the recording was ready to walk.
  EXPECT_GE(named, stalls.size() - 1) << stalls.dump(1);

  uint32_t idle = 0;
  const test::CommandResult quiet = record_tarantool(
      dir, "idle", {"--loop-stalls", "50ms", "-d", "1", "-o", dir.file("idle.pb.gz")}, &idle);
  ASSERT_EQ(quiet.exit_code, 0) << quiet.err;
  EXPECT_NE(quiet.err.find("no event-loop stalls"), std::string::npos) << quiet.err;
}

// An nginx-lua worker (OpenResty's lua module and luajit2) whose handler blocks in
// os.execute("sleep 0.05"): its off-CPU time is at the handler's Lua function, and each request
// is an event-loop stall of at least 50 ms in that worker.
TEST(RecordLoopStalls, ABlockingNginxHandlerIsOffCpuAndStallsItsWorker) {
  ASSERT_EQ(geteuid(), 0u) << "ljprof record needs root";
  test::TempDir dir;
  test::NginxLua nginx(dir.file("nginx"), false);
  ASSERT_EQ(nginx.error(), "");
  const std::string worker = std::to_string(nginx.worker());
  test::Background rec({test::ljprof_bin(), "record", "-p", worker, "--off-cpu", "--loop-stalls",
                        "40ms", "--stalls", dir.file("stalls.json"), "-d", "3", "-q", "-o",
                        dir.file("off.pb.gz"), "--folded", dir.file("off.folded")},
                       dir.file("record.log"));
  ASSERT_TRUE(test::wait_until_sampling(rec.pid(), 60)) << test::read_text(dir.file("record.log"));
  int blocked = 0;
  while (rec.running() && blocked < 200) {
    if (test::http_get(nginx.port(), "/block", 10000).status == 200) ++blocked;
  }
  ASSERT_EQ(rec.wait(30000), 0) << test::read_text(dir.file("record.log"));
  ASSERT_GE(blocked, 5) << nginx.logs();
  const std::string folded = test::read_text(dir.file("off.folded"));
  EXPECT_NE(folded.find("blocking_handler"), std::string::npos) << folded;
  const nlohmann::json stalls = nlohmann::json::parse(test::read_text(dir.file("stalls.json")));
  ASSERT_GE(stalls.size(), 3u) << stalls.dump(1);
  size_t named = 0;
  for (const nlohmann::json& s : stalls) {
    EXPECT_EQ(std::to_string(s["tid"].get<uint32_t>()), worker);
    EXPECT_GE(s["duration_ns"].get<double>() / 1e6, 50) << s.dump();
    named += s.dump().find("blocking_handler") != std::string::npos ? 1 : 0;
  }
  EXPECT_GE(named, stalls.size() - 1) << stalls.dump(1);
  EXPECT_EQ(nginx.stop(), 0) << nginx.logs();
}

}  // namespace
}  // namespace ljprof
