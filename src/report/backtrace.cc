#include "report/backtrace.h"

#include "common/hex.h"

#include "common/path.h"

#include <fmt/format.h>

namespace ljprof::report {

namespace {

using Json = nlohmann::ordered_json;
using symbolize::frame_kind_name;
using symbolize::FrameKind;

// The call-site name of a Lua or C function frame, as JSON fields.
void add_call_name(Json& j, const symbolize::Frame& f) {
  j["name"] = f.call_name ? Json(f.call_name->name) : Json(nullptr);
  j["namewhat"] = f.call_name ? Json(f.call_name->what) : Json(nullptr);
  if (!f.name_error.empty()) j["name_error"] = f.name_error;
}

std::string native_text(const symbolize::Frame& f) {
  std::string where =
      f.symbol.empty() ? std::string("??") : fmt::format("{}+{:#x}", f.symbol, f.symbol_offset);
  std::string module = f.module.empty()
                           ? std::string("?")
                           : fmt::format("{}+{:#x}", basename_of(f.module), f.module_offset);
  std::string at = f.source ? fmt::format(" at {}:{}", f.source->file, f.source->line) : "";
  return fmt::format("{:#018x} in {} ({}){}", f.pc, where, module, at);
}

}  // namespace

Json backtrace_frame_json(const symbolize::Frame& f) {
  Json j;
  j["kind"] = profile::frame_kind_name(f.kind);
  switch (f.kind) {
    case profile::FrameKind::Lua:
      j["function"] = hex(f.gcfunc);
      j["bcpc"] = f.bcpc ? Json(hex(f.bcpc)) : Json(nullptr);
      if (f.lua) {
        j["chunk"] = f.lua->chunk;
        j["source"] = f.lua->short_src;
        j["line"] = f.lua->line >= 0 ? Json(f.lua->line) : Json(nullptr);
        j["firstline"] = f.lua->firstline;
        j["main_chunk"] = f.lua->main_chunk;
        add_call_name(j, f);
      } else {
        j["error"] = f.reason;
      }
      if (f.jit_trace != 0) j["jit_trace"] = f.jit_trace;
      j["lua_state"] = f.lua_state;
      break;
    case profile::FrameKind::Unknown:
      j["pc"] = hex(f.pc);
      j["reason"] = f.reason;
      break;
    case profile::FrameKind::Trace:
      j["pc"] = hex(f.pc);
      j["gctrace"] = hex(f.gctrace);
      if (f.trace) {
        j["trace"] = f.trace->traceno;
        j["start_chunk"] = f.trace->start.chunk;
        j["start_source"] = f.trace->start.short_src;
        j["start_line"] = f.trace->start.line >= 0 ? Json(f.trace->start.line) : Json(nullptr);
        if (f.trace->snapshot) {
          j["snapshot"] = *f.trace->snapshot;
        } else {
          j["snapshot_error"] = f.trace->snapshot_error;
        }
      } else {
        j["error"] = f.reason;
      }
      j["lua_state"] = f.lua_state;
      break;
    default:
      if (f.kind == profile::FrameKind::CFunc) {
        j["function"] = hex(f.gcfunc);
        j["lua_state"] = f.lua_state;
        add_call_name(j, f);
      }
      j["pc"] = hex(f.pc);
      j["module"] = f.module.empty() ? Json(nullptr) : Json(f.module);
      j["module_offset"] = f.module.empty() ? Json(nullptr) : Json(hex(f.module_offset));
      j["symbol"] = f.symbol.empty() ? Json(nullptr) : Json(f.symbol);
      j["symbol_offset"] = f.symbol_offset;
      j["file"] = f.source ? Json(f.source->file) : Json(nullptr);
      j["line"] = f.source ? Json(f.source->line) : Json(nullptr);
      break;
  }
  return j;
}

std::string backtrace_frame_text(const symbolize::Frame& f) {
  switch (f.kind) {
    case profile::FrameKind::Lua: {
      if (!f.lua) return fmt::format("lua     [unknown: {}]", f.reason);
      std::string line = f.lua->line >= 0 ? std::to_string(f.lua->line) : "?";
      // As luaL_traceback words it: a call-site name first, then the main chunk.
      std::string what = f.call_name ? fmt::format("function '{}'", f.call_name->name)
                                     : symbolize::unnamed_lua_function(*f.lua, f.lua->short_src);
      const std::string jit = f.jit_trace != 0 ? fmt::format(" [JIT trace {}]", f.jit_trace) : "";
      return fmt::format("lua     {}:{} in {}{}", f.lua->short_src, line, what, jit);
    }
    case profile::FrameKind::CFunc:
      if (f.call_name) {
        return fmt::format("cfunc   {} as '{}'", native_text(f), f.call_name->name);
      }
      return "cfunc   " + native_text(f);
    case profile::FrameKind::Root:
      return "root    " + native_text(f);
    case profile::FrameKind::Ffi:
      return "ffi     " + native_text(f);
    case profile::FrameKind::Unknown:
      return fmt::format("[unknown: {}]", f.reason);
    case profile::FrameKind::Trace:
      if (!f.trace) return fmt::format("trace   {:#018x} [unknown: {}]", f.pc, f.reason);
      if (f.trace->snapshot) {
        return fmt::format("trace   {:#018x} in trace {} snapshot {} (starts at {}:{})", f.pc,
                           f.trace->traceno, *f.trace->snapshot, f.trace->start.short_src,
                           f.trace->start.line);
      }
      return fmt::format(
          "trace   {:#018x} in trace {} (starts at {}:{}; Lua frames unresolved: {})", f.pc,
          f.trace->traceno, f.trace->start.short_src, f.trace->start.line, f.trace->snapshot_error);
    case profile::FrameKind::Native:
      break;
  }
  return "native  " + native_text(f);
}

}  // namespace ljprof::report
