// The Lua VM's own debug.traceback(), as the walker workloads print it between the lines
// "ljprof-traceback-begin" and "ljprof-traceback-end": the oracle for the Lua frames of a core.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ljprof::test {

struct ExpectedFrame {
  bool gap = false;  // traceback's "..." (levels it skipped in a deep stack)
  bool is_c = false;
  std::string source;  // Lua
  int line = 0;
  std::optional<int> firstline;  // "in function <src:N>"
  bool main_chunk = false;
  std::optional<uint64_t> c_entry;  // "[C]: at 0x..."
  // "in function 'NAME'": the call-site name (lj_debug_funcname); none for "<src:N>", "main
  // chunk", "?" and "at 0x...". Unset for the synthetic resume entries, which are not checked.
  std::optional<std::string> name;
  bool check_name = true;
  std::string text;  // the traceback line, for messages
};

std::vector<std::string> lines_of(const std::string& text);

// The traceback blocks the workload printed, in print order.
std::vector<std::vector<ExpectedFrame>> parse_tracebacks(const std::string& out);

}  // namespace ljprof::test
