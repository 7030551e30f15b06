// Every CPU sample of a Tarantool process names the fiber it ran on (tests/record/workloads/
// fibers.lua; `go tool pprof -tags` reads the labels from the profile): two named fibers that
// share the tx thread 3:1 by their own clocks get the `fiber` label in that share, and fibers
// that live 5 ms each are named in their samples.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>

#include "split_oracle.h"
#include "support/tarantool_copies.h"
#include "support/test_support.h"

namespace ljprof {
namespace {

using Json = nlohmann::json;

// The counts `go tool pprof -tags` prints under "KEY: Total N", by label value.
std::map<std::string, double> tag_counts(const std::string& tags, const std::string& key) {
  std::map<std::string, double> out;
  std::istringstream in(tags);
  static const std::regex row(R"(^\s+([0-9.]+) \( *[0-9.]+%\): (.+)$)");
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    if (line.find(": Total ") != std::string::npos) {
      inside = line.find(" " + key + ": Total ") != std::string::npos;
      continue;
    }
    std::smatch m;
    if (inside && std::regex_match(line, m, row)) out[m[2]] += std::stod(m[1]);
  }
  return out;
}

// Records fibers.lua's two fibers (heavy and light, 3:1 by their own clocks) run by `exe` for
// `seconds` at 999 Hz, and checks the `fiber` label's split against the fibers' own clocks.
// `go tool pprof -tags` output of the profile, for the caller's checks.
std::string expect_fibers_in_their_own_share(const std::string& exe, const std::string& seconds) {
  test::TempDir dir;
  const std::string profile = dir.file("cpu.pb.gz");
  const test::CommandResult rec =
      test::run({test::ljprof_bin(), "record", "-F", "999", "-o", profile, "--", exe,
                 test::record_workloads_dir() + "/fibers.lua", seconds});
  EXPECT_EQ(rec.exit_code, 0) << rec.out << rec.err;
  EXPECT_EQ(rec.err.find("no fiber labels"), std::string::npos) << rec.err;
  std::smatch m;
  if (!std::regex_search(rec.out, m, std::regex(R"(fibers heavy=([0-9.]+) light=([0-9.]+))"))) {
    ADD_FAILURE() << rec.out << rec.err;
    return "";
  }
  const double heavy_s = std::stod(m[1]), light_s = std::stod(m[2]);
  const test::CommandResult tags =
      test::go_tool_pprof(dir.path(), {"-tags", "-sample_index=samples", profile});
  EXPECT_EQ(tags.exit_code, 0) << tags.err;
  std::map<std::string, double> counts = tag_counts(tags.out, "fiber");
  const double heavy = counts["heavy"], light = counts["light"];
  // The floor: half of 999 samples per second the two fibers measured; "the recording was real".
  EXPECT_GT(heavy + light, 0.5 * 999 * (heavy_s + light_s)) << tags.out;
  if (heavy + light <= 0) return tags.out;
  const double measured = 100 * heavy_s / (heavy_s + light_s);
  const double sampled = 100 * heavy / (heavy + light);
  std::cout << exe << ": heavy fiber " << sampled << "% of its and light's samples, " << measured
            << "% by their own clocks\n";
  EXPECT_NEAR(sampled, measured, record_oracle::share_tolerance(5.0, rec.err)) << tags.out;
  return tags.out;
}

TEST(RecordFibers, EachSampleNamesItsFiberInTheFibersOwnShare) {
  ASSERT_EQ(geteuid(), 0u) << "ljprof record needs root";
  const std::string tags = expect_fibers_in_their_own_share("/usr/bin/tarantool", "3");
  // fiber_id is a numeric label: both fibers have one.
  EXPECT_NE(tags.find(" fiber_id: Total "), std::string::npos) << tags;
}

// A fiber created every 10 ms burns 5 ms in short_burn and ends: its samples carry its name
// (the kernel reads the running fiber at sample time, so a fiber gone by the time the agent
// symbolizes is still named) and its own id.
TEST(RecordFibers, FibersOfAFewMillisecondsAreNamed) {
  ASSERT_EQ(geteuid(), 0u) << "ljprof record needs root";
  const std::string dir = testing::TempDir() + "/ljprof-record-short-fibers";
  test::run({"rm", "-rf", dir});
  std::filesystem::create_directories(dir);
  const std::string profile = dir + "/cpu.pb.gz";
  const test::CommandResult rec =
      test::run({test::ljprof_bin(), "record", "-F", "999", "-q", "-o", profile, "--",
                 "/usr/bin/tarantool", test::record_workloads_dir() + "/fibers.lua", "1", "short"});
  ASSERT_EQ(rec.exit_code, 0) << rec.out << rec.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(rec.out, m, std::regex(R"(fibers short=(\d+))"))) << rec.out;
  const double started = std::stod(m[1]);
  const test::CommandResult tags =
      test::go_tool_pprof(dir, {"-tags", "-sample_index=samples", "-focus=short_burn", profile});
  ASSERT_EQ(tags.exit_code, 0) << tags.err;
  double all = 0;
  for (const auto& [name, n] : tag_counts(tags.out, "pid")) all += n;
  const std::map<std::string, double> names = tag_counts(tags.out, "fiber");
  const double named = names.count("short") ? names.at("short") : 0;
  // A second of 5 ms bursts at 999 Hz; the floor only says the recording was real.
  ASSERT_GT(all, 0.25 * 999) << tags.out;
  EXPECT_GE(named, 0.95 * all) << tags.out;
  // Each fiber its own id: most of the fibers were sampled, each under its id.
  EXPECT_GE(static_cast<double>(tag_counts(tags.out, "fiber_id").size()), 0.5 * started)
      << tags.out;
  test::run({"rm", "-rf", dir});
}

// Every thread that runs a cord labels its samples with its own fiber and cord: the WAL
// thread's samples too, not only the tx thread's. Oracle: the threads' names as the kernel has
// them, which the workload prints from /proc/self/task (Tarantool names each thread after its
// cord; the main thread's cord is "main"), against the thread each sample was taken on (the
// speedscope timeline: one track per thread and fiber, "pid P tid T fiber NAME (CORD)", the
// cord shown for cords other than "main").
TEST(RecordFibers, EveryThreadsSamplesNameItsOwnCordsFiber) {
  ASSERT_EQ(geteuid(), 0u) << "ljprof record needs root";
  test::TempDir tmp;
  const std::string timeline = tmp.file("timeline.json");
  const test::CommandResult rec = test::run(
      {test::ljprof_bin(), "record", "-F", "999", "-q", "--speedscope", timeline, "--", "env", "-C",
       tmp.path(), "/usr/bin/tarantool", test::record_workloads_dir() + "/wal_writes.lua", "2"});
  ASSERT_EQ(rec.exit_code, 0) << rec.out << rec.err;
  std::map<std::string, std::string> comm;  // tid -> the kernel's name of the thread
  static const std::regex thread_row(R"(thread (\d+) (\S+))");
  for (std::sregex_iterator it(rec.out.begin(), rec.out.end(), thread_row), end; it != end; ++it) {
    comm[(*it)[1]] = (*it)[2];
  }
  std::map<std::string, double> on_thread, as_its_cord;  // samples by tid
  static const std::regex track(R"(pid (\d+) tid (\d+)(?: fiber (.*?)(?: \((.+)\))?)?$)");
  const Json j = Json::parse(test::read_text(timeline));
  for (const Json& profile : j["profiles"]) {
    const std::string name = profile["name"];
    std::smatch m;
    ASSERT_TRUE(std::regex_match(name, m, track)) << name;
    const std::string pid = m[1], tid = m[2];
    const double samples = static_cast<double>(profile["events"].size()) / 2;
    on_thread[tid] += samples;
    // No fiber; or a thread gone before the workload listed its threads (box.cfg's first
    // snapshot runs on a thread of its own that ends).
    if (!m[3].matched || (tid != pid && !comm.count(tid))) continue;
    const std::string cord = m[4].matched ? m[4].str() : "main";
    const std::string expected = tid == pid ? "main" : comm[tid];
    // A thread's first samples may come before its cord is named (cord_create runs on the new
    // thread): "cord 0xADDR", unnamed rather than wrong; they count against the 95% below.
    if (cord.rfind("cord 0x", 0) == 0) continue;
    EXPECT_EQ(cord, expected) << name << " on thread " << tid << " (" << comm[tid] << ")";
    if (cord == expected) as_its_cord[tid] += samples;
  }
  size_t checked = 0;
  for (const auto& [tid, name] : comm) {
    if (name != "wal" && name != "tarantool") continue;
    SCOPED_TRACE("thread " + tid + " " + name);
    ASSERT_GT(on_thread[tid], 20) << "the thread was sampled";
    EXPECT_GE(as_its_cord[tid], 0.95 * on_thread[tid]);
    ++checked;
  }
  EXPECT_EQ(checked, 2u) << rec.out;
}

// A Tarantool installed stripped (no .symtab, no DWARF, no debug file) is labelled all the same:
// the fields come from its machine code (luajit/fiber_code.cc). Found as Tarantool by the module
// API its .dynsym exports, not by its name. Oracle: the workload's two fibers measuring their own
// CPU, as above.
TEST(RecordFibers, AStrippedTarantoolIsLabelledFromItsMachineCode) {
  ASSERT_EQ(geteuid(), 0u) << "ljprof record needs root";
  test::TempDir tmp;
  const std::string exe = test::stripped_tarantool(tmp.file("tt-server"));
  ASSERT_FALSE(exe.empty());
  expect_fibers_in_their_own_share(exe, "2");
}

// A stripped Tarantool whose code does not show the patterns either records without fiber
// labels, saying why once: the executable by its path, the debug file looked for (by its
// build-id, from readelf) and the function whose pattern did not match. Its stacks are walked
// all the same.
TEST(RecordFibers, AnUnprovenFiberLayoutSaysWhyOnce) {
  ASSERT_EQ(geteuid(), 0u) << "ljprof record needs root";
  test::TempDir tmp;
  const std::string exe = test::tarantool_without_fid_pattern(tmp.file("tt-server"));
  ASSERT_FALSE(exe.empty());
  std::smatch m;
  const std::string notes = test::run({"readelf", "-n", exe}).out;
  ASSERT_TRUE(std::regex_search(notes, m, std::regex(R"(Build ID: ([0-9a-f]+))"))) << notes;
  const std::string id = m[1];
  const std::string folded = tmp.path() + "/stacks.folded";
  test::CommandResult r = test::run(
      {test::ljprof_bin(), "record", "-F", "999", "--group-by", "fiber", "--folded", folded, "--",
       exe, "-e", "local t = os.clock() while os.clock() - t < 0.3 do end os.exit(0)"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string why = "samples carry no fiber labels: no fiber layout: " + exe;
  const size_t at = r.err.find(why);
  ASSERT_NE(at, std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(why, at + 1), std::string::npos) << "said more than once\n" << r.err;
  EXPECT_NE(
      r.err.find("/usr/lib/debug/.build-id/" + id.substr(0, 2) + "/" + id.substr(2) + ".debug"),
      std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("fiber_new_ex"), std::string::npos) << r.err;
  record_oracle::RootTally roots;
  for (const record_oracle::FoldedStack& s : record_oracle::read_folded(folded)) roots.add(s);
  EXPECT_GE(roots.rooted, 0.95 * roots.total) << test::read_text(folded);
  // --group-by fiber gives no stack a fiber frame: no sample has a fiber.
  EXPECT_EQ(test::read_text(folded).find("fiber:"), std::string::npos) << test::read_text(folded);
}

}  // namespace
}  // namespace ljprof
