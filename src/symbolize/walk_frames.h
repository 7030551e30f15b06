// symbolize/walk_frames.h: the one function that turns a walk (the walker's frames, leaf
// first) into Frames, used by `ljprof core` (a core file's memory) and `ljprof record` (a live
// process, after the sample). What differs between the two is only where memory and symbols
// come from and how long a reading stays valid, which each mode supplies as a FrameSource.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/result.h"
#include "symbolize/frame.h"
#include "symbolize/snapshot.h"

namespace ljprof::symbolize {

// One walker frame (bpf/abi/walk_types.h lj_walk_frame, or the ring buffer's lj_rec_frame).
struct WalkedFrame {
  uint32_t kind = 0;  // LJ_FRAME_*
  uint64_t pc = 0;    // native/root/trace: pc; lua/cfunc: the GCfunc
  uint64_t b = 0;     // lua: bytecode pc; cfunc: C entry; trace: the GCtrace
  uint32_t lua_state = 0;
};

struct WalkEnd {
  uint32_t end = 0;  // LJ_END_*
  uint64_t end_pc = 0;
};

// What the converter reads through its mode. `index` is the frame's position in the walk, so
// a mode can check what it recorded about that frame at sample time.
class FrameSource {
 public:
  virtual ~FrameSource() = default;
  // Fills module, build_id, module_offset, symbol, symbol_offset and source of frame.pc;
  // `exact_pc`: the pc is the instruction itself (the leaf, a C entry), not a return address.
  virtual void symbolize_native(Frame& frame, bool exact_pc) = 0;
  // Whether native `frame` is in lj_vm_ffi_call, the VM's trampoline for FFI calls: the frame
  // before it (leaf side) is then the C function an FFI call entered.
  virtual bool in_ffi_call_trampoline(const Frame& frame) = 0;
  virtual Result<LuaLocation> lua_location(size_t index, const WalkedFrame& frame) = 0;
  // The name the Lua frame at `caller_index` gave the function it called (call_site.h).
  virtual Result<std::optional<CallSiteName>> call_site_name(size_t caller_index,
                                                             const WalkedFrame& caller) = 0;
  virtual Result<TraceInfo> trace_info(size_t index, const WalkedFrame& frame) = 0;
  // The Lua frames trace frame `index` (its TraceInfo already read) runs at machine-code `pc`
  // (symbolize/snapshot.h), the last of them being `base`, the walker's Lua frame at the
  // trace's base.
  virtual Result<JitLuaFrames> jit_frames(size_t index, const Frame& trace, uint64_t pc,
                                          const Frame& base) = 0;
  // Why there is no LuaJIT layout, added to a walk that ended at a VM frame for lack of one.
  virtual std::string no_luajit_reason() const = 0;
};

// The frames of one walk, leaf first: every walker frame symbolized, FFI callees marked, Lua
// and C functions named from their caller's call site (only when the next frame out is the
// Lua function that made the call, in the same lua_State, as the VM's own traceback does), and
// JIT trace machine code resolved to the Lua frames it runs (the frames the trace inlined are
// inserted after the trace frame, the base frame gets its line; all are marked jit_trace), and
// one `unknown` frame saying how the walk ended unless it reached a root. Every string of the
// result is printable text (make_frame_printable): no writer sees a target's raw bytes.
// `leaf_first`: walk[0] is the sampled leaf (its pc is the instruction itself); false for a
// part of a walk that starts further out (every pc a return address).
std::vector<Frame> frames_of_walk(std::span<const WalkedFrame> walk, WalkEnd end,
                                  FrameSource& source, bool leaf_first = true);

}  // namespace ljprof::symbolize
