// symbolize/frame.h: the one frame model (DESIGN.md "Frame model") that `ljprof core` and
// `ljprof record` both produce from a walk (walk_frames.h) and that every writer reads: the
// backtrace text and JSON of core mode and, through profile::profile_frames, the profiles.
// Its strings are printable text (common/printable.h): frames_of_walk, where target bytes
// enter the model, makes them so.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "symbolize/call_site.h"
#include "symbolize/source_line.h"
#include "symbolize/symbolize.h"
#include "symbolize/trace.h"

namespace ljprof::symbolize {

// Ffi: the C function an FFI call from the interpreter entered (the native frame that
// lj_vm_ffi_call called); otherwise a native frame.
enum class FrameKind { Native, Lua, CFunc, Ffi, Trace, Root, Unknown };
// "native", "lua", "cfunc", "ffi", "trace", "root", "unknown"
const char* frame_kind_name(FrameKind kind);
// Inverse of frame_kind_name(); nullopt for anything else.
std::optional<FrameKind> frame_kind_from_name(std::string_view name);

struct Frame {
  FrameKind kind = FrameKind::Native;
  uint64_t pc = 0;             // native/root/cfunc/ffi/trace: code address; lua: 0
  std::string module;          // mapped file of pc (native, root, cfunc, ffi)
  std::string build_id;        // hex GNU build-id of `module`, "" if it has none
  uint64_t module_offset = 0;  // pc - load bias (the link-time address)
  std::string symbol;          // ELF symbol containing the pc, "" if none
  uint64_t symbol_offset = 0;
  std::optional<SourceLine> source;  // native/ffi/root/cfunc: DWARF file:line
  uint64_t gcfunc = 0;               // lua/cfunc: the GCfunc object
  uint64_t bcpc = 0;                 // lua: bytecode pc (0 = unknown)
  std::optional<LuaLocation> lua;
  // lua/cfunc: the name the calling Lua frame gave this function (symbolize/call_site), when
  // the next frame out is that caller; name_error says why reading it failed, if it did.
  std::optional<CallSiteName> call_name;
  std::string name_error;
  uint32_t lua_state = 0;  // which lua_State segment (lua/cfunc/trace)
  // lua: nonzero when the frame runs as machine code of JIT trace `jit_trace`: its line and the
  // frames the trace inlined come from the trace's snapshot (symbolize/snapshot.h).
  uint32_t jit_trace = 0;
  uint64_t gctrace = 0;  // trace: the GCtrace object (pc is the machine-code pc)
  std::optional<TraceInfo> trace;
  // unknown: why; lua/trace: why the prototype or trace could not be read, if it could not.
  std::string reason;
  // unknown: the walk's end (LJ_END_*) when this frame says how the walk ended.
  std::optional<uint32_t> walk_end;
};

// How a Lua function is called where no call-site name is known, as luaL_traceback words it
// (lj_debug.c): "main chunk" for a prototype with firstline 0, else "function <source:line>"
// (`source`: the chunk as the caller shows it — short_src in backtraces, a file's last
// component in profile labels).
std::string unnamed_lua_function(const LuaLocation& lua, std::string_view source);

// Every string of `frame` (names, paths, build-id, reasons) made printable by the one rule of
// common/printable.h.
void make_frame_printable(Frame& frame);

}  // namespace ljprof::symbolize
