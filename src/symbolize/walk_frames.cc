#include "symbolize/walk_frames.h"

#include <fmt/format.h>

#include <iterator>

extern "C" {
#include <stdint.h>

#include "abi/walk_types.h"
}

namespace ljprof::symbolize {

namespace {

// The trampoline a signal handler returns to is named as gdb names it: glibc's __restore_rt is
// a local symbol that stripped libraries do not have, and what a handler ran for is the point.
void name_signal_trampoline(Frame& f) {
  f.symbol = "<signal handler called>";
  f.symbol_offset = 0;
  f.source.reset();
}

Frame symbolize_one(size_t i, const WalkedFrame& wf, FrameSource& source, bool leaf) {
  Frame f;
  f.lua_state = wf.lua_state;
  switch (wf.kind) {
    case LJ_FRAME_LUA: {
      f.kind = FrameKind::Lua;
      f.gcfunc = wf.pc;
      f.bcpc = wf.b;
      auto loc = source.lua_location(i, wf);
      if (loc.ok()) {
        f.lua = std::move(*loc);
      } else {
        f.reason = loc.message();
      }
      break;
    }
    case LJ_FRAME_CFUNC:
      f.kind = FrameKind::CFunc;
      f.gcfunc = wf.pc;
      f.pc = wf.b;
      source.symbolize_native(f, true);
      break;
    case LJ_FRAME_TRACE: {
      f.kind = FrameKind::Trace;
      f.pc = wf.pc;
      f.gctrace = wf.b;
      auto trace = source.trace_info(i, wf);
      if (trace.ok()) {
        f.trace = std::move(*trace);
      } else {
        f.reason = trace.message();
      }
      break;
    }
    case LJ_FRAME_C_GAP:
      f.kind = FrameKind::Unknown;
      f.pc = wf.pc;
      f.reason = "C code called from Lua here (a Lua-only walk does not step its native frames)";
      break;
    case LJ_FRAME_ROOT:
      f.kind = FrameKind::Root;
      f.pc = wf.pc;
      source.symbolize_native(f, leaf);
      break;
    default:
      f.kind = FrameKind::Native;
      f.pc = wf.pc;
      // The pc a signal interrupted is exact, like a sampled leaf's, not a return address.
      source.symbolize_native(f, leaf || wf.b == LJ_NATIVE_INTERRUPTED);
      if (wf.b == LJ_NATIVE_SIGNAL_TRAMPOLINE) name_signal_trampoline(f);
      break;
  }
  return f;
}

// Names from call sites (lj_debug.c lj_debug_funcname): only when the next frame out is the
// Lua function that made the call, in the same lua_State; a function called from C, by pcall
// or by the VM entry has a C frame (or none) there and gets no name, as in the VM's own
// traceback.
void name_from_call_sites(std::span<const WalkedFrame> walk, std::vector<Frame>& frames,
                          FrameSource& source) {
  for (size_t i = 0; i + 1 < frames.size() && i + 1 < walk.size(); ++i) {
    Frame& f = frames[i];
    const Frame& caller = frames[i + 1];
    if (f.kind != FrameKind::Lua && f.kind != FrameKind::CFunc) continue;
    if (caller.kind != FrameKind::Lua || caller.lua_state != f.lua_state || caller.bcpc == 0)
      continue;
    auto name = source.call_site_name(i + 1, walk[i + 1]);
    if (name.ok()) {
      f.call_name = std::move(*name);
    } else {
      f.name_error = name.message();
    }
  }
}

// A trace frame followed by the Lua frame at the trace's base (the walker leaves its pc
// unknown): the snapshot at the trace's pc gives that frame's line and the frames the trace
// inlined above it. Backwards, so an insertion does not move a trace frame not yet resolved
// (frames and walk indices still agree below it).
void resolve_jit_frames(std::vector<Frame>& frames, FrameSource& source, bool leaf_first) {
  for (size_t i = frames.size(); i-- > 0;) {
    Frame& trace = frames[i];
    if (trace.kind != FrameKind::Trace || !trace.trace || i + 1 >= frames.size()) continue;
    Frame& base = frames[i + 1];
    if (base.kind != FrameKind::Lua || !base.lua || base.lua_state != trace.lua_state ||
        base.bcpc != 0) {
      trace.trace->snapshot_error = "no Lua frame of the trace's base follows it";
      continue;
    }
    // A return address belongs to the call before it.
    auto jit = source.jit_frames(i, trace, leaf_first && i == 0 ? trace.pc : trace.pc - 1, base);
    if (!jit.ok()) {
      trace.trace->snapshot_error = jit.message();
      continue;
    }
    const uint32_t traceno = trace.trace->traceno;
    trace.trace->snapshot = jit->snapshot;
    // The last frame is the base: it keeps its walker fields and name, and gets its pc.
    JitLuaFrame& at_base = jit->frames.back();
    base.bcpc = at_base.bcpc;
    base.lua = std::move(at_base.lua);
    base.jit_trace = traceno;
    std::vector<Frame> inlined(jit->frames.size() - 1);
    for (size_t k = 0; k < inlined.size(); ++k) {
      JitLuaFrame& j = jit->frames[k];
      Frame& f = inlined[k];
      f.kind = FrameKind::Lua;
      f.lua_state = trace.lua_state;
      f.gcfunc = j.gcfunc;
      f.bcpc = j.bcpc;
      f.lua = std::move(j.lua);
      f.call_name = std::move(j.call_name);
      f.name_error = std::move(j.name_error);
      f.jit_trace = traceno;
    }
    frames.insert(frames.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                  std::make_move_iterator(inlined.begin()), std::make_move_iterator(inlined.end()));
  }
}

}  // namespace

std::vector<Frame> frames_of_walk(std::span<const WalkedFrame> walk, WalkEnd end,
                                  FrameSource& source, bool leaf_first) {
  std::vector<Frame> frames;
  frames.reserve(walk.size() + 1);
  for (size_t i = 0; i < walk.size(); ++i) {
    frames.push_back(symbolize_one(i, walk[i], source, leaf_first && i == 0));
  }
  for (size_t i = 0; i + 1 < frames.size(); ++i) {
    if (frames[i].kind == FrameKind::Native && source.in_ffi_call_trampoline(frames[i + 1])) {
      frames[i].kind = FrameKind::Ffi;
    }
  }
  name_from_call_sites(walk, frames, source);
  resolve_jit_frames(frames, source, leaf_first);
  if (end.end != LJ_END_ROOT && end.end != LJ_END_RA_ZERO) {
    Frame unknown;
    unknown.kind = FrameKind::Unknown;
    unknown.pc = end.end_pc;
    unknown.walk_end = end.end;
    unknown.reason = fmt::format("{} at {:#x}", walk_end_name(end.end), end.end_pc);
    const std::string why = source.no_luajit_reason();
    if (end.end == LJ_END_NO_LUAJIT && !why.empty()) unknown.reason += ": " + why;
    frames.push_back(std::move(unknown));
  }
  // Here target bytes become the frame model every writer reads (names and paths from the
  // target's memory and files, reasons quoting them); the resolution above still compared
  // them raw (a module path against the VM's file).
  for (Frame& f : frames) make_frame_printable(f);
  return frames;
}

}  // namespace ljprof::symbolize
