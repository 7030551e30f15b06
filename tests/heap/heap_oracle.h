// What tests/walker/workloads/heap_census.lua prints about the heap it built (its oracle: the
// VM's own collectgarbage("count") deltas and total), and the checks of an `ljprof heap --json`
// report against it, shared by the core and the live tests.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>

namespace ljprof::test {

struct HeapPrinted {
  std::map<std::string, double> sizes;  // "ljprof-heap NAME BYTES"
  std::string held_line;                // the line the coroutine holding `held` is suspended at
  double total = 0;                     // collectgarbage("count") * 1024 at the end
  // Tarantool: the fiber holding `kept` (its id, the line it sleeps at, the tables' size).
  std::string fiber_id, fiber_line;
  double fiber_kept = 0;
};

HeapPrinted heap_printed(const std::string& out);

// The table retainer whose path matches `path_re` (the first, biggest; an upvalue object or a
// function on the way has the same path), or nullptr.
const nlohmann::json* heap_retainer(const nlohmann::json& report, const std::string& path_re);

void expect_within(double got, double want, double fraction, const std::string& what);

// The report's totals, types and the six structures' paths and retained sizes against what the
// workload printed; on Tarantool also the fiber's `kept`, at a path naming the fiber.
void expect_heap_matches_vm(const nlohmann::json& report, const HeapPrinted& vm);

}  // namespace ljprof::test
