// Usage errors of the recording commands are caught before anything is loaded or attached: exit
// status 2 and one line on stderr naming the option, the value and what is expected.
#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <vector>

#include "support/test_support.h"

namespace ljprof {
namespace {

// `ljprof ARGS...`: its exit status must be 2 and its stderr hold `expected`.
void expect_usage_error(std::vector<std::string> args, const std::string& expected) {
  args.insert(args.begin(), test::ljprof_bin());
  const test::CommandResult r = test::run(args);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find(expected), std::string::npos) << r.err;
}

TEST(Usage, OffCpuAndLoopStallOptionsNameWhatIsWrong) {
  expect_usage_error({"record", "--off-cpu=abc", "--", "true"},
                     "--off-cpu abc: expected a duration above 0");
  expect_usage_error({"record", "--off-cpu=0ms", "--", "true"}, "--off-cpu 0ms");
  expect_usage_error({"record", "--loop-stalls", "2h", "--", "true"}, "--loop-stalls 2h");
  expect_usage_error({"record", "--stalls", "x.json", "--", "true"},
                     "--stalls FILE needs --loop-stalls THRESHOLD");
  expect_usage_error({"record", "--value", "heap", "--", "true"},
                     "--value heap: expected cpu, off_cpu or space");
  expect_usage_error({"report", "--value", "heap", "missing.pb.gz"},
                     "--value heap: expected cpu, off_cpu or space");
}

TEST(Usage, FibersNeedsAPidAndNamesTheOneItCannotRead) {
  expect_usage_error({"fibers"}, "--pid");
  expect_usage_error({"fibers", "-p", "999999999"}, "999999999");
  expect_usage_error({"fibers", "-p", "1", "--sample", "0"}, "--sample");
}

// --version names the release, the commit and the build-id: the one readelf reads from the same
// executable's note.
TEST(Usage, VersionNamesTheCommitAndTheBuildIdReadelfReads) {
  const test::CommandResult r = test::run({test::ljprof_bin(), "--version"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(build-id ([0-9a-f]+))"))) << r.out;
  const test::CommandResult readelf = test::run({"/usr/bin/readelf", "-n", test::ljprof_bin()});
  EXPECT_NE(readelf.out.find("Build ID: " + m[1].str()), std::string::npos) << readelf.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(^ljprof \d+\.\d+\.\d+\n)"))) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(\ncommit [0-9a-f]{12}(-dirty)?\n)"))) << r.out;
}

}  // namespace
}  // namespace ljprof
