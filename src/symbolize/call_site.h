// symbolize/call_site.h: the name a function was called by, read from the calling Lua
// function's bytecode the way LuaJIT 2.1 itself does it for debug.traceback() and error
// messages (lj_debug.c lj_debug_funcname / lj_debug_slotname / debug_varname), so that ljprof
// names frames exactly as the VM's own traceback does: "in function 'gsub'", "'__index'", and
// no name at all for a function called from C or by pcall.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "abi/read_mem.h"
#include "common/result.h"

extern "C" {
#include "abi/luajit_info.h"
}

namespace ljprof::symbolize {

// Where the called value came from (lj_debug.c's "namewhat"): "global", "local", "method",
// "field", "upvalue" or "metamethod".
struct CallSiteName {
  std::string what;
  std::string name;  // as the traceback prints it: "gsub", "fib", "__index", ...
};

// Operand A's role in one opcode (lj_bc.h BCMode, only what naming needs): Base clobbers A and
// every slot above it, Dst writes A alone.
enum class BcOperandA : uint8_t { None, Dst, Base, Var, RBase, Uv };

struct BytecodeOp {
  const char* name;        // as jit.vmdef's bcnames spells it
  BcOperandA a;            // operand A
  const char* metamethod;  // what the opcode may call (lj_bc.h BCDEF "mm"), nullptr: none
};

// LuaJIT 2.1's bytecode set in opcode order (lj_bc.h BCDEF): 97 opcodes, shared by Debian's
// luajit 2.1.0-beta3, OpenResty's luajit2 and Tarantool's fork (tests compare the names with
// each build's jit.vmdef and the modes with tarantool's lj_bc_mode table).
std::span<const BytecodeOp> luajit21_bytecodes();

// The name the caller gave a callee: `caller_gcfunc` is the Lua function one frame further out
// and `caller_bcpc` its bytecode pc as the walker reports it (the return pc, one past the call
// instruction). nullopt when the call site names nothing (an expression, a caller that is not
// at a call or metamethod instruction), as lj_debug_funcname returns NULL. An error when the
// prototype, its bytecode or its debug info cannot be read or does not decode; never a guess.
Result<std::optional<CallSiteName>> call_site_name(const ljprof_mem_reader& mem,
                                                   const lj_luajit_info& info,
                                                   uint64_t caller_gcfunc, uint64_t caller_bcpc);

// The same from the caller's prototype: for a caller whose function object may be gone by the
// time it is read (record mode: a closure collected after the sample), while its prototype,
// which the kernel read at sample time, is checked otherwise.
Result<std::optional<CallSiteName>> call_site_name_in_proto(const ljprof_mem_reader& mem,
                                                            const lj_luajit_info& info,
                                                            uint64_t caller_proto,
                                                            uint64_t caller_bcpc);

}  // namespace ljprof::symbolize
