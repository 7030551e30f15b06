// Usage errors of the recording commands are caught before anything is loaded or attached: exit
// status 2 and one line on stderr naming the option, the value and what is expected.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace ljprof
