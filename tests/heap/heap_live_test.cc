// `ljprof heap -p PID` on a running Debian tarantool 2.6, never stopped: the workload
// tests/walker/workloads/heap_grow.lua grows one global table; two snapshots, the second
// written as a diff against the first (--base), must show that table's path as what grew, and
// the VM's gc.total read before and after each walk; the second, with --stop, is exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>

#include "report/pprof.h"
#include "support/test_support.h"

namespace ljprof {
namespace {

using Json = nlohmann::json;
const char* const kTarantool = "/usr/bin/tarantool";

// The highest "ljprof-grow N" the workload printed.
int64_t grown(const std::string& out) {
  const std::regex re(R"(ljprof-grow (\d+))");
  int64_t n = 0;
  for (std::sregex_iterator it(out.begin(), out.end(), re), end; it != end; ++it) {
    n = std::max<int64_t>(n, std::stoll((*it)[1]));
  }
  return n;
}

TEST(LiveHeap, BaseDiffShowsTheGrowingTableFirst) {
  ASSERT_TRUE(test::file_exists(kTarantool));
  test::TempDir dir;
  std::filesystem::copy_file(
      std::filesystem::path(test::source_dir()) / "tests/walker/workloads/heap_grow.lua",
      dir.file("heap_grow.lua"));
  test::Background process({"env", "-C", dir.path(), kTarantool, "heap_grow.lua"}, dir.file("out"));
  ASSERT_TRUE(test::wait_for_text(dir.file("out"), "ljprof-ready", 60));
  const std::string pid = std::to_string(process.pid());
  const std::string first = dir.file("first.pb.gz"), diff = dir.file("diff.pb.gz");
  test::CommandResult a =
      test::run({test::ljprof_bin(), "heap", "-p", pid, "--json", "--top", "400", "-o", first});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const Json j = Json::parse(a.out);
  // Read while it runs (and collects): gc.total read before and after the walk.
  EXPECT_GT(j["vm_total_bytes"].get<double>(), 0);
  EXPECT_GT(j["vm_total_bytes_after"].get<double>(), 0);
  bool found = false;
  for (const Json& r : j["retainers"]) found = found || r["path"] == "_G.growing";
  EXPECT_TRUE(found) << a.out;
  // Let the table grow by 1000 more entries (half a second), by the workload's own count.
  const int64_t at_first = grown(test::read_text(dir.file("out")));
  ASSERT_TRUE(test::wait_until(
      [&] { return grown(test::read_text(dir.file("out"))) >= at_first + 1000; }, 60));
  // The second with --stop: an exact snapshot (gc.total unchanged across the walk, nothing
  // refused), and the process runs on after it.
  test::CommandResult b = test::run(
      {test::ljprof_bin(), "heap", "-p", pid, "--stop", "--json", "-o", diff, "--base", first});
  ASSERT_EQ(b.exit_code, 0) << b.err;
  const Json exact = Json::parse(b.out);
  EXPECT_EQ(exact["vm_total_bytes"], exact["vm_total_bytes_after"]);
  EXPECT_TRUE(exact["malformed"].empty()) << exact["malformed"].dump();
  EXPECT_NE(b.err.find("was stopped for"), std::string::npos) << b.err;
  const int64_t after_stop = grown(test::read_text(dir.file("out")));
  EXPECT_TRUE(
      test::wait_until([&] { return grown(test::read_text(dir.file("out"))) > after_stop; }, 30));
  // Continued after --stop, never left stopped (T) or traced (t).
  const char state = test::process_state(process.pid());
  EXPECT_TRUE(state == 'S' || state == 'R') << "the process must not be stopped: " << state;
  auto p = report::read_pprof(diff);
  ASSERT_TRUE(p.ok()) << p.message();
  // Bytes gained per path below the root frame: _G/.growing must be the biggest.
  std::map<std::string, int64_t> by_path;
  for (const profile::Sample& s : p->samples) {
    const size_t n = s.frames.size();
    if (n >= 2) by_path[s.frames[n - 1].function + "/" + s.frames[n - 2].function] += s.bytes;
  }
  ASSERT_FALSE(by_path.empty());
  auto top = std::max_element(by_path.begin(), by_path.end(),
                              [](const auto& x, const auto& y) { return x.second < y.second; });
  EXPECT_EQ(top->first, "_G/.growing");
  EXPECT_GT(top->second, 0);
}

}  // namespace
}  // namespace ljprof
