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

#include "heap/heap_oracle.h"
#include "report/pprof.h"
#include "support/nginx_lua.h"
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
  // Read while it runs (and collects): gc.total read before and after the walk. An object seen
  // half-written is read again (heap_reread_test.cc), so the roots behind it are reached.
  test::CommandResult a =
      test::run({test::ljprof_bin(), "heap", "-p", pid, "--json", "--top", "400", "-o", first});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const Json j = Json::parse(a.out);
  bool found = false;
  for (const Json& r : j["retainers"]) found = found || r["path"] == "_G.growing";
  EXPECT_GT(j["vm_total_bytes"].get<double>(), 0);
  EXPECT_GT(j["vm_total_bytes_after"].get<double>(), 0);
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

// A plain luajit has no static anchor for its VM, and its one thread, blocked in a C call, shows
// no registers without a stop: the VM is found by its GG_State in anonymous memory. The workload
// (the core test's) parks with its collector stopped, so the heap holds still for an exact read.
TEST(LiveHeap, PlainLuajitFoundByItsGgStateMatchesTheVm) {
  test::TempDir dir;
  const std::filesystem::path workloads =
      std::filesystem::path(test::source_dir()) / "tests/walker/workloads";
  for (const char* name : {"common.lua", "heap_census.lua"}) {
    std::filesystem::copy_file(workloads / name, dir.file(name));
  }
  test::Background process(
      {"env", "-C", dir.path(), "LJPROF_HEAP_PARK=1", "/usr/bin/luajit", "heap_census.lua"},
      dir.file("out"));
  ASSERT_TRUE(test::wait_for_text(dir.file("out"), "ljprof-heap-parked", 60));
  const test::HeapPrinted vm = test::heap_printed(test::read_text(dir.file("out")));
  ASSERT_EQ(vm.sizes.size(), 6u) << test::read_text(dir.file("out"));
  test::CommandResult r = test::run(
      {test::ljprof_bin(), "heap", "-p", std::to_string(process.pid()), "--json", "--top", "400"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  test::expect_heap_matches_vm(Json::parse(r.out), vm);
}

// Two VMs in one process (the second from luaL_newstate through the FFI): neither is read until
// one is chosen, the error lists both, and each one listed is read when chosen.
TEST(LiveHeap, SeveralVmsAreListedAndOneIsChosen) {
  test::TempDir dir;
  test::Background process(
      {"/usr/bin/luajit", "-e",
       "local ffi = require('ffi') "
       "ffi.cdef('void *luaL_newstate(void); int poll(void *, unsigned long, int);') "
       "local second = ffi.C.luaL_newstate() "
       "io.stdout:write('ljprof-two-vms\\n') io.stdout:flush() ffi.C.poll(nil, 0, -1)"},
      dir.file("out"));
  ASSERT_TRUE(test::wait_for_text(dir.file("out"), "ljprof-two-vms", 60));
  const std::string pid = std::to_string(process.pid());
  test::CommandResult both = test::run({test::ljprof_bin(), "heap", "-p", pid});
  EXPECT_EQ(both.exit_code, 2);
  std::smatch m;
  const std::regex listed(R"(runs 2 LuaJIT VMs \(global_State at (0x[0-9a-f]+), (0x[0-9a-f]+)\))");
  ASSERT_TRUE(std::regex_search(both.err, m, listed)) << both.err;
  const std::vector<std::string> gs = {m[1], m[2]};
  std::vector<double> totals;
  for (const std::string& g : gs) {
    test::CommandResult one =
        test::run({test::ljprof_bin(), "heap", "-p", pid, "--global-state", g, "--json"});
    ASSERT_EQ(one.exit_code, 0) << one.err;
    const Json j = Json::parse(one.out);
    EXPECT_EQ(j["global_state"], g);
    totals.push_back(j["total_bytes"].get<double>());
  }
  // The main VM ran the FFI and the script; the new one holds only its base library.
  EXPECT_NE(totals[0], totals[1]);
  test::CommandResult wrong =
      test::run({test::ljprof_bin(), "heap", "-p", pid, "--global-state", "0x1000"});
  EXPECT_EQ(wrong.exit_code, 2);
  EXPECT_NE(wrong.err.find("0x1000 is not the global_State of a LuaJIT VM"), std::string::npos)
      << wrong.err;
}

// An OpenResty worker (OpenResty's luajit2 in libluajit-5.1.so, whose lua_State is longer than
// upstream's): its VM found by the scan, the structure its handler built held by the module's
// upvalue at the size the VM measured, and the total near the VM's own count.
TEST(LiveHeap, NginxLuaWorkerHeapMatchesTheVm) {
  test::TempDir dir;
  test::NginxLua nginx(dir.file("nginx"), false);
  ASSERT_EQ(nginx.error(), "");
  const test::HttpResponse built = test::http_get(nginx.port(), "/heap", 10000);
  ASSERT_EQ(built.status, 200) << nginx.logs();
  std::smatch m;
  ASSERT_TRUE(std::regex_match(built.body, m, std::regex(R"((\d+) (\d+))"))) << built.body;
  const double kept = std::stod(m[1]), total = std::stod(m[2]);
  test::CommandResult r =
      test::run({test::ljprof_bin(), "heap", "-p", std::to_string(nginx.worker()), "--stop",
                 "--json", "--top", "400"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = Json::parse(r.out);
  EXPECT_TRUE(j["malformed"].empty()) << j["malformed"].dump();
  // The worker is idle after the request; what it allocated after its count (its response) and
  // garbage the restarted collector has not yet freed are the difference.
  test::expect_within(j["vm_total_bytes"].get<double>(), total, 0.05, "g->gc.total");
  test::expect_within(j["total_bytes"].get<double>(), j["vm_total_bytes"].get<double>(), 0.02,
                      "objects counted");
  const Json* found =
      test::heap_retainer(j, R"(upvalue 'kept' of function <.*nginx_heap\.lua:\d+>)");
  ASSERT_NE(found, nullptr) << r.out;
  test::expect_within((*found)["retained_bytes"].get<double>(), kept, 0.05, "kept");
  EXPECT_EQ(nginx.stop(), 0) << nginx.logs();
}

}  // namespace
}  // namespace ljprof
