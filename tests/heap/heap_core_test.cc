// `ljprof heap` on real cores: the workload tests/walker/workloads/heap_census.lua builds known
// structures, measures each with the VM's own accounting (collectgarbage("count") deltas),
// prints them and the VM's total, and aborts. Oracles: the VM's gc.total and its own string
// count (g->strnum), and the workload's measured sizes.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <regex>

#include "heap/heap_oracle.h"
#include "report/pprof.h"
#include "support/test_support.h"
#include "walker/workload_core.h"

namespace ljprof {
namespace {

using Json = nlohmann::json;
using test::Target;

std::vector<std::string> heap_argv(const Target& target, const test::Dump& d) {
  std::vector<std::string> argv = {test::ljprof_bin(), "heap", d.core};
  if (target.arm64) {
    argv.insert(argv.end(), {"--sysroot", "/usr/aarch64-linux-gnu", "--exe", target.exe});
  }
  return argv;
}

// The memory profile: its stacks are dominator chains from the roots, so the bytes under the
// frame ".names" below "_G" are the retained size the table reports (the writer's pprof is
// checked against go tool pprof by tests/report); the profile diffed against itself cancels.
void expect_profile_matches(const std::string& pb, const Json& names,
                            std::vector<std::string> argv) {
  auto p = report::read_pprof(pb);
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_EQ(p->value_type, profile::ValueType::Heap);
  int64_t under_names = 0, objects = 0;
  for (const profile::Sample& s : p->samples) {
    const size_t n = s.frames.size();
    if (n >= 2 && s.frames[n - 1].function == "_G" && s.frames[n - 2].function == ".names") {
      under_names += s.bytes;
      objects += s.count;
    }
  }
  EXPECT_EQ(under_names, names["retained_bytes"].get<int64_t>());
  EXPECT_EQ(objects, names["count"].get<int64_t>());
  // ljprof report weighs a heap profile by bytes: the cum column of ".names" is the same.
  test::CommandResult top = test::run({test::ljprof_bin(), "report", pb, "--top=50"});
  ASSERT_EQ(top.exit_code, 0) << top.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      top.out, m, std::regex(R"(\n\s*\d+\s+\S+\s+\S+\s+(\d+)\s+\S+\s+lua\s+\.names\n)")))
      << top.out;
  EXPECT_EQ(std::stoll(m[1]), names["retained_bytes"].get<int64_t>()) << top.out;
  const std::string diff = pb + ".diff.pb.gz";
  argv.insert(argv.end(), {"-o", diff, "--base", pb});
  ASSERT_EQ(test::run(argv).exit_code, 0);
  auto delta = report::read_pprof(diff);
  ASSERT_TRUE(delta.ok()) << delta.message();
  for (const profile::Sample& s : delta->samples) {
    EXPECT_EQ(s.bytes, 0);
    EXPECT_EQ(s.count, 0);
  }
}

class HeapCore : public ::testing::TestWithParam<Target> {};

TEST_P(HeapCore, TotalsTypesAndRetainersMatchTheVm) {
  const Target& target = GetParam();
  const test::Dump d = test::dump_core(target, "heap_census.lua");
  const test::HeapPrinted vm = test::heap_printed(d.out);
  ASSERT_GT(vm.total, 0) << d.out;
  ASSERT_EQ(vm.sizes.size(), 6u) << d.out;
  ASSERT_FALSE(vm.held_line.empty()) << d.out;
  // Debian's tarantool runs the fiber part (the matrix's Tarantool LuaJIT is a bare luajit).
  if (target.label == "tarantool") {
    ASSERT_FALSE(vm.fiber_id.empty()) << d.out;
  }
  const std::string pb = d.dir + "/heap.pb.gz";
  std::vector<std::string> argv = heap_argv(target, d);
  argv.insert(argv.end(), {"--json", "--top", "400", "-o", pb});
  test::CommandResult r = test::run(argv);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = Json::parse(r.out);
  test::expect_heap_matches_vm(j, vm);
  // The same VM found by its GG_State in the core's anonymous memory (what a live luajit needs):
  // --global-state is read only when that scan finds it.
  argv = heap_argv(target, d);
  argv.insert(argv.end(), {"--json", "--global-state", j["global_state"].get<std::string>()});
  test::CommandResult scanned = test::run(argv);
  ASSERT_EQ(scanned.exit_code, 0) << scanned.err;
  EXPECT_EQ(Json::parse(scanned.out)["total_bytes"], j["total_bytes"]);
  ASSERT_NE(test::heap_retainer(j, R"(_G\.names)"), nullptr);
  // Progress goes to a terminal only (script(1) gives the command one), in one line cleared at
  // the end; the report above, its stderr a pipe, had none.
  EXPECT_EQ(r.err.find("objects counted"), std::string::npos) << r.err;
  if (target.label == "luajit") {
    const test::CommandResult tty = test::run(
        {"script", "-qec", test::ljprof_bin() + " heap " + d.core + " --top 1", "/dev/null"});
    ASSERT_EQ(tty.exit_code, 0) << tty.out;
    EXPECT_NE(tty.out.find("objects counted"), std::string::npos) << tty.out;
    EXPECT_NE(tty.out.find("\r\x1b[KLua heap of global_State"), std::string::npos) << tty.out;
  }
  expect_profile_matches(pb, *test::heap_retainer(j, R"(_G\.names)"), heap_argv(target, d));
}

const Target kLuajit{"luajit", "/usr/bin/luajit", false};
const Target kTarantool{"tarantool", "/usr/bin/tarantool", false};
const Target kLuajitArm64{"luajit_arm64", test::fixture("arm64/usr/bin/luajit"), true};

INSTANTIATE_TEST_SUITE_P(Real, HeapCore, ::testing::Values(kLuajit, kTarantool, kLuajitArm64),
                         [](const auto& info) { return info.param.label; });

// The matrix builds whose layouts the Debian binaries do not have: upstream's strings without
// GC64 (a 20-byte GCstr), Tarantool's fork with GC64 (on arm64).
std::vector<Target> matrix_targets() {
  std::vector<Target> out;
  for (const test::MatrixVariant& v : test::matrix_variants()) {
    if (v.name.find("nogc64") != std::string::npos || v.name.rfind("tarantool-", 0) == 0) {
      out.push_back({test::gtest_name(v.name), v.exe, v.arm64});
    }
  }
  return out;
}
INSTANTIATE_TEST_SUITE_P(Matrix, HeapCore, ::testing::ValuesIn(matrix_targets()),
                         [](const auto& info) { return info.param.label; });

}  // namespace
}  // namespace ljprof
