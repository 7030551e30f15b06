// Every CPU sample of a Tarantool process names the fiber it ran on: two named fibers that
// share the tx thread 3:1 by their own clocks (tests/record/workloads/fibers.lua) get the
// `fiber` label in that share, as `go tool pprof -tags` reads it from the profile.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <map>
#include <regex>
#include <sstream>
#include <string>

#include "support/test_support.h"

namespace ljprof {
namespace {

// The counts `go tool pprof -tags` prints under "fiber: Total N", by label value.
std::map<std::string, double> fiber_counts(const std::string& tags) {
  std::map<std::string, double> out;
  std::istringstream in(tags);
  static const std::regex row(R"(^\s+([0-9.]+) \( *[0-9.]+%\): (.+)$)");
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    if (line.find(": Total ") != std::string::npos) {
      inside = line.find(" fiber: Total ") != std::string::npos;
      continue;
    }
    std::smatch m;
    if (inside && std::regex_match(line, m, row)) out[m[2]] += std::stod(m[1]);
  }
  return out;
}

TEST(RecordFibers, EachSampleNamesItsFiberInTheFibersOwnShare) {
  ASSERT_EQ(geteuid(), 0u) << "ljprof record needs root";
  const std::string dir = testing::TempDir() + "/ljprof-record-fibers";
  test::run({"rm", "-rf", dir});
  std::filesystem::create_directories(dir);
  const std::string profile = dir + "/cpu.pb.gz";
  const test::CommandResult rec =
      test::run({test::ljprof_bin(), "record", "-F", "999", "-q", "-o", profile, "--",
                 "/usr/bin/tarantool", test::record_workloads_dir() + "/fibers.lua", "3"});
  ASSERT_EQ(rec.exit_code, 0) << rec.out << rec.err;
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(rec.out, m, std::regex(R"(fibers heavy=([0-9.]+) light=([0-9.]+))")))
      << rec.out;
  const double heavy_s = std::stod(m[1]), light_s = std::stod(m[2]);
  const test::CommandResult tags =
      test::go_tool_pprof(dir, {"-tags", "-sample_index=samples", profile});
  ASSERT_EQ(tags.exit_code, 0) << tags.err;
  std::map<std::string, double> counts = fiber_counts(tags.out);
  const double heavy = counts["heavy"], light = counts["light"];
  // The floor: half of 999 samples per second the two fibers measured; "the recording was real".
  ASSERT_GT(heavy + light, 0.5 * 999 * (heavy_s + light_s)) << tags.out;
  const double measured = 100 * heavy_s / (heavy_s + light_s);
  const double sampled = 100 * heavy / (heavy + light);
  std::cout << "heavy fiber: " << sampled << "% of its and light's samples, " << measured
            << "% by their own clocks\n";
  EXPECT_NEAR(sampled, measured, 5.0) << tags.out;
  // fiber_id is a numeric label: both fibers have one.
  EXPECT_NE(tags.out.find(" fiber_id: Total "), std::string::npos) << tags.out;
  test::run({"rm", "-rf", dir});
}

}  // namespace
}  // namespace ljprof
