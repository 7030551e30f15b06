// symbolize/trace.h: what a JIT trace frame shows — the trace number and where in Lua the
// trace starts (its start prototype and bytecode pc: lj_jit.h GCtrace startpt/startpc).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "abi/read_mem.h"
#include "common/result.h"
#include "symbolize/symbolize.h"

extern "C" {
#include "abi/luajit_info.h"
}

namespace ljprof::symbolize {

struct TraceInfo {
  uint32_t traceno = 0;
  LuaLocation start;  // start.line: the line of the trace's first bytecode
  // The snapshot whose machine code holds the pc (symbolize/snapshot.h), when the Lua frames
  // the trace runs there were proven; else why not, and the trace shows at its start.
  std::optional<uint32_t> snapshot;
  std::string snapshot_error;
};

// Reads GCtrace `gctrace` (already proven by the walker: gct ~LJ_TTRACE, holds the pc).
Result<TraceInfo> trace_info(const ljprof_mem_reader& mem, const lj_luajit_info& info,
                             uint64_t gctrace);

}  // namespace ljprof::symbolize
