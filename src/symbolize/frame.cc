#include "symbolize/frame.h"

#include <fmt/format.h>

#include "common/printable.h"

namespace ljprof::symbolize {

namespace {
constexpr FrameKind kKinds[] = {FrameKind::Native, FrameKind::Lua,   FrameKind::CFunc,
                                FrameKind::Ffi,    FrameKind::Trace, FrameKind::Root,
                                FrameKind::Unknown};
}  // namespace

const char* frame_kind_name(FrameKind kind) {
  switch (kind) {
    case FrameKind::Native:
      return "native";
    case FrameKind::Lua:
      return "lua";
    case FrameKind::CFunc:
      return "cfunc";
    case FrameKind::Ffi:
      return "ffi";
    case FrameKind::Trace:
      return "trace";
    case FrameKind::Root:
      return "root";
    case FrameKind::Unknown:
      return "unknown";
  }
  return "unknown";
}

std::optional<FrameKind> frame_kind_from_name(std::string_view name) {
  for (FrameKind k : kKinds) {
    if (name == frame_kind_name(k)) return k;
  }
  return std::nullopt;
}

std::string unnamed_lua_function(const LuaLocation& lua, std::string_view source) {
  if (lua.main_chunk) return "main chunk";
  return fmt::format("function <{}:{}>", source, lua.firstline);
}

namespace {
void make_location_printable(LuaLocation& lua) {
  make_printable(lua.chunk);
  make_printable(lua.short_src);
}
}  // namespace

void make_frame_printable(Frame& frame) {
  make_printable(frame.module);
  make_printable(frame.build_id);
  make_printable(frame.symbol);
  if (frame.source) make_printable(frame.source->file);
  if (frame.lua) make_location_printable(*frame.lua);
  if (frame.call_name) {
    make_printable(frame.call_name->what);
    make_printable(frame.call_name->name);
  }
  make_printable(frame.name_error);
  if (frame.trace) {
    make_location_printable(frame.trace->start);
    make_printable(frame.trace->snapshot_error);
  }
  make_printable(frame.reason);
}

}  // namespace ljprof::symbolize
