// What the golden walker tests share: running a workload (tests/walker/workloads) under a
// target until it dumps a core, and the Lua-frame oracle against its printed tracebacks.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "traceback_oracle.h"

namespace ljprof::test {

struct Target {
  std::string label;
  std::string exe;  // the program the workload runs under
  bool arm64 = false;
};

// gtest prints parameters in test names and failures: show the target, not its bytes.
void PrintTo(const Target& target, std::ostream* os);

// A core dumped in a directory of its own (dir, from mkdtemp), removed with the Dump: a test
// that stops early (a failed ASSERT) leaves nothing behind either — cores are tens of MB.
struct Dump {
  std::string dir;
  std::string core;
  std::string out;

  Dump() = default;
  Dump(Dump&& other) noexcept
      : dir(std::exchange(other.dir, {})), core(std::move(other.core)), out(std::move(other.out)) {}
  Dump(const Dump&) = delete;
  Dump& operator=(const Dump&) = delete;
  Dump& operator=(Dump&&) = delete;
  ~Dump();
};

// Workloads named spin_* never crash: they loop in Lua after printing their traceback and are
// dumped live with gcore, so the leaf pc is in the interpreter, not in a C function.
bool is_live(const std::string& workload);

// Runs `workload` under `target` in a fresh directory and returns the core it dumped.
Dump dump_core(const Target& target, const std::string& workload);

// A JSON "0x…" address.
uint64_t hex(const nlohmann::json& v);
// The frames, one JSON object a line, for failure messages.
std::string describe(const nlohmann::json& frames);

// The Lua and C-function frames of `frames` equal the traceback blocks (innermost printed last),
// with `c_frames_between_blocks` unchecked C frames between blocks (the resume calls) and, when
// `leading_ffi_call`, one leading C function (the call made after the traceback was printed).
void expect_lua_frames_match(const nlohmann::json& frames,
                             std::vector<std::vector<ExpectedFrame>> blocks,
                             size_t c_frames_between_blocks, bool leading_ffi_call);

// "TAG ID NAME" lines a fiber workload printed (named_fibers.lua).
struct PrintedFiber {
  uint64_t id = 0;
  std::string name;
};

std::vector<PrintedFiber> printed_fibers(const std::string& out, const std::string& tag);

// The --all-fibers coroutine object of fiber `id`, or nullptr.
const nlohmann::json* coroutine_of_fiber(const nlohmann::json& j, uint64_t id);

// A C function name as fiber.info() and our frames both show it, without a C++ signature.
std::string bare_name(const std::string& name);

// One frame of a fiber.info() backtrace: its pc and the name the process gave it (from .dynsym
// alone in a stripped executable: often another function's).
struct FiberInfoFrame {
  uint64_t pc = 0;
  std::string name;
};
// Per fiber id, the frames of the fiber.info() backtrace a workload printed between
// "ljprof-fiber-info-begin" and "ljprof-fiber-info-end", outermost last, frame #0 (no call site
// for a switched-out fiber) left out.
std::map<uint64_t, std::vector<FiberInfoFrame>> fiber_info_frames(const std::string& out);
bool vm_frame_name(const std::string& name);  // lj_BC_*, lj_vm_*

// Per fiber id, the C function names of the fiber.info() backtrace a workload printed between
// "ljprof-fiber-info-begin" and "ljprof-fiber-info-end", outermost last; unnamed frames, the
// LuaJIT VM's own (lj_BC_*, lj_vm_*: shown as the Lua frames they run) and frame #0 (no call
// site for a switched-out fiber) left out.
std::map<uint64_t, std::vector<std::string>> fiber_info_backtraces(const std::string& out);

// What tests/walker/cord_oracle.py prints, gdb reading a Tarantool's cords through its own TLS
// and DWARF support: each thread's cord, its running fiber and its switched-out fibers.
struct GdbFiber {
  uint64_t id = 0;
  std::string saved_return;  // "0x59cfae": the first pc of the fiber's stack
  std::string symbol;        // gdb's `info symbol` there
  std::string name;
};
struct GdbCord {
  std::string name;
  uint64_t running = 0;  // the running fiber's id
  std::vector<GdbFiber> fibers;
};
// By thread id; `target`: gdb's arguments naming what it reads ({EXE, CORE} or {"-p", PID}).
std::map<uint32_t, GdbCord> gdb_cords(const std::vector<std::string>& target);

// The symbols of the non-Lua frames of `frames` hold `want` (fiber_info_backtraces), in order.
void expect_native_names_in_order(const nlohmann::json& frames,
                                  const std::vector<std::string>& want);

}  // namespace ljprof::test
