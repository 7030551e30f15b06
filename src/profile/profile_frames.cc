#include "profile/profile_frames.h"

#include <string_view>

#include <string>

#include "common/path.h"

namespace ljprof::profile {

namespace {

Frame native_profile_frame(const symbolize::Frame& w) {
  Frame f;
  f.kind = w.kind;
  f.function = w.symbol;
  f.module = w.module;
  f.build_id = w.build_id;
  f.address = w.pc;
  f.module_offset = w.module_offset;
  if (w.source) {
    f.file = w.source->file;
    f.line = w.source->line;
  }
  return f;
}

Frame unknown_profile_frame(const std::string& reason) {
  Frame f;
  f.kind = FrameKind::Unknown;
  f.function = "[unknown: " + reason + "]";
  return f;
}

// A Lua function of `lua`, named `call_name` by its caller if it was.
Frame lua_profile_frame(FrameKind kind, const symbolize::LuaLocation& lua,
                        const std::optional<symbolize::CallSiteName>& call_name, int32_t line) {
  Frame f;
  f.kind = kind;
  // lj_debug_shortname: "@path" is a file; anything else is a string chunk, shown short.
  f.file = lua.chunk.starts_with("@") ? lua.chunk.substr(1) : lua.short_src;
  f.line = line > 0 ? line : 0;
  f.start_line = lua.firstline;
  f.function =
      call_name ? call_name->name : symbolize::unnamed_lua_function(lua, display_file(f.file));
  return f;
}

}  // namespace

std::vector<Frame> profile_frames(const std::vector<symbolize::Frame>& walk) {
  std::vector<Frame> out;
  out.reserve(walk.size());
  for (size_t i = 0; i < walk.size(); ++i) {
    const symbolize::Frame& w = walk[i];
    switch (w.kind) {
      case FrameKind::Lua:
        if (!w.lua) {
          out.push_back(unknown_profile_frame(w.reason));
        } else {
          Frame f = lua_profile_frame(w.jit_trace != 0 ? FrameKind::Trace : FrameKind::Lua, *w.lua,
                                      w.call_name, w.lua->line);
          f.trace = w.jit_trace;
          out.push_back(std::move(f));
        }
        break;
      case FrameKind::Trace: {
        if (!w.trace) {
          out.push_back(unknown_profile_frame("JIT trace unreadable: " + w.reason));
          break;
        }
        // Resolved through its snapshot: the Lua frames it runs follow, marked JIT-compiled.
        if (w.trace->snapshot) break;
        // Else the fallback: the trace runs in the function of the next Lua frame out when it
        // starts in that function's prototype, which becomes the JIT-compiled frame at the
        // trace's first line.
        const symbolize::LuaLocation& start = w.trace->start;
        const symbolize::Frame* next = i + 1 < walk.size() ? &walk[i + 1] : nullptr;
        Frame f;
        if (next != nullptr && next->kind == FrameKind::Lua && next->lua &&
            next->lua->proto == start.proto) {
          f = lua_profile_frame(FrameKind::Trace, start, next->call_name, start.line);
          ++i;
        } else {
          f = lua_profile_frame(FrameKind::Trace, start, std::nullopt, start.line);
        }
        f.trace = w.trace->traceno;
        out.push_back(std::move(f));
        break;
      }
      case FrameKind::CFunc: {
        Frame f = native_profile_frame(w);
        if (w.call_name) f.function = w.call_name->name;
        out.push_back(std::move(f));
        break;
      }
      case FrameKind::Unknown:
        out.push_back(unknown_profile_frame(
            w.walk_end ? std::string(symbolize::walk_end_name(*w.walk_end)) : w.reason));
        break;
      default:
        out.push_back(native_profile_frame(w));
        break;
    }
  }
  return out;
}

std::string display_file(const std::string& file) {
  if (file.empty() || file.front() == '[' || file.front() == '=') return file;
  return basename_of(file);
}

bool is_idle_wait(const Sample& sample) {
  bool waits = false;
  for (const Frame& f : sample.frames) {
    if (f.kind == FrameKind::Lua || f.kind == FrameKind::CFunc || f.kind == FrameKind::Trace ||
        f.kind == FrameKind::Ffi) {
      return false;
    }
    for (std::string_view wait : {"epoll_wait", "epoll_pwait", "io_uring_enter"}) {
      waits = waits || f.function.find(wait) != std::string::npos;
    }
  }
  return waits;
}

}  // namespace ljprof::profile
