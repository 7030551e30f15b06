#include "heap/heap_oracle.h"

#include <gtest/gtest.h>

#include <cmath>
#include <regex>

#include "walker/traceback_oracle.h"

namespace ljprof::test {

using Json = nlohmann::json;

HeapPrinted heap_printed(const std::string& out) {
  HeapPrinted p;
  const std::regex size_re(R"(^ljprof-heap (\w+) (\d+)$)");
  const std::regex total_re(R"(^ljprof-heap-total (\d+)$)");
  const std::regex held_re(R"(^ljprof-heap-held-line (\d+)$)");
  const std::regex fiber_re(R"(^ljprof-heap-fiber (\d+) (\d+) (\d+)$)");
  for (const std::string& line : lines_of(out)) {
    std::smatch m;
    if (std::regex_match(line, m, size_re)) p.sizes[m[1]] = std::stod(m[2]);
    if (std::regex_match(line, m, total_re)) p.total = std::stod(m[1]);
    if (std::regex_match(line, m, held_re)) p.held_line = m[1];
    if (std::regex_match(line, m, fiber_re)) {
      p.fiber_id = m[1];
      p.fiber_line = m[2];
      p.fiber_kept = std::stod(m[3]);
    }
  }
  return p;
}

const Json* heap_retainer(const Json& report, const std::string& path_re) {
  const std::regex re(path_re);
  for (const Json& r : report["retainers"]) {
    if (r["type"] == "table" && std::regex_match(r["path"].get<std::string>(), re)) return &r;
  }
  return nullptr;
}

void expect_within(double got, double want, double fraction, const std::string& what) {
  EXPECT_LE(std::fabs(got - want), fraction * want)
      << what << ": ljprof " << got << ", the VM " << want << " (allowed " << fraction * 100
      << "%)";
}

void expect_heap_matches_vm(const Json& j, const HeapPrinted& vm) {
  EXPECT_TRUE(j["malformed"].empty()) << j["malformed"].dump();
  // The total: what the census counts against the VM's count printed at the end (an abort's
  // own few allocations follow it).
  expect_within(j["total_bytes"].get<double>(), vm.total, 0.02, "total bytes");
  expect_within(j["vm_total_bytes"].get<double>(), vm.total, 0.005, "g->gc.total read");
  // Strings: the VM's own count of interned strings.
  EXPECT_EQ(j["types"]["string"]["count"], j["string_table_count"]);
  EXPECT_GE(j["types"]["string"]["count"].get<double>(), 20000);
  EXPECT_GE(j["types"]["userdata"]["count"].get<double>(), 200);
  EXPECT_GE(j["types"]["cdata"]["count"].get<double>(), 200);
  EXPECT_GE(j["types"]["thread"]["count"].get<double>(), 2);
  EXPECT_EQ(j["registry_found"], true);
  const std::map<std::string, std::string> paths = {
      {"names", R"(_G\.names)"},
      {"cache", R"(upvalue 'cache' of function <heap_census\.lua:\d+>)"},
      // The local's name from the prototype's debug info, at the line the VM reported.
      {"held", "local 'held' of thread 0x[0-9a-f]+ at heap_census\\.lua:" + vm.held_line},
      {"cycle", R"(_G\.cycle)"},
      {"proxies", R"(_G\.proxies)"},
      {"cdatas", R"(_G\.cdatas)"},
  };
  for (const auto& [name, re] : paths) {
    SCOPED_TRACE(name);
    const Json* found = heap_retainer(j, re);
    ASSERT_NE(found, nullptr) << "no retainer at " << re << "\n" << j.dump(1);
    expect_within((*found)["retained_bytes"].get<double>(), vm.sizes.at(name), 0.05, name);
  }
  if (!vm.fiber_id.empty()) {
    const std::string re = "local 'kept' of fiber " + vm.fiber_id +
                           " \"ljprof-holder\" at heap_census\\.lua:" + vm.fiber_line;
    const Json* found = heap_retainer(j, re);
    ASSERT_NE(found, nullptr) << "no retainer at " << re << "\n" << j.dump(1);
    expect_within((*found)["retained_bytes"].get<double>(), vm.fiber_kept, 0.05, "kept");
  }
}

}  // namespace ljprof::test
