#include "symbolize/frame.h"

#include <fmt/format.h>

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

}  // namespace ljprof::symbolize
