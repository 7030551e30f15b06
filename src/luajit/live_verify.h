// `ljprof inspect --verify-live PID`: checks extracted offsets against a running process.
//
// The process is stopped only briefly (PTRACE_SEIZE + PTRACE_INTERRUPT, registers and a few
// process_vm_readv reads, PTRACE_DETACH), repeatedly until a stop lands inside the VM
// interval; G comes from the DISPATCH/GL register (x86-64: G = DISPATCH - GG_G2DISP;
// AArch64: GL = G). The same checks run on any memory source (a core file in tests).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "abi/read_mem.h"
#include "common/result.h"
#include "luajit/proc_info.h"

namespace ljprof::luajit {

struct VmCheck {
  std::string name;
  bool pass = false;
  std::string detail;
};

// What one stop saw.
struct VmSnapshot {
  uint64_t pc = 0;
  uint64_t g = 0;  // global_State address
  // The interpreter's BASE register (x86-64 rdx, AArch64 x19) when the stop is in the VM.
  std::optional<uint64_t> base_register;
};

// The checks of the issue, for a process (or core) whose LuaJIT module is loaded at `bias`:
// G->cur_L is a lua_State whose glref is G; L->stack <= L->base <= L->top <= L->maxstack;
// jit_base is 0 or inside L's stack; vmstate is a VM state or a trace number; dispatch[0] is
// a VM handler; the running Lua function's chunk name reads as a NUL-terminated GCstr at the
// extracted header size.
std::vector<VmCheck> check_vm_state(const LuaJITProcInfo& info, uint64_t bias,
                                    const VmSnapshot& snap, const ljprof_mem_reader& mem);

struct LiveReport {
  pid_t pid = 0;
  std::string module;  // the file whose LuaJIT was checked
  uint64_t bias = 0;
  unsigned attempts = 0;
  VmSnapshot snapshot;
  std::vector<VmCheck> checks;
  bool all_pass() const;
};

// Finds the LuaJIT module of `pid` (its executable if that links LuaJIT in, else a mapped
// libluajit-5.1.so*), extracts its LuaJITProcInfo, then stops the main thread up to
// `max_attempts` times until a stop lands in the VM interval with a Lua frame at BASE.
Result<LiveReport> verify_live(pid_t pid, unsigned max_attempts = 2000);

}  // namespace ljprof::luajit
