#include "report/frames.h"

#include "common/path.h"
#include "common/printable.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <tuple>

namespace ljprof::report {

namespace {

// A Lua chunk's file as labels show it: a path's last component ("app.lua"); a string chunk's
// short form ("[string \"...\"]", "=stdin") as it is.
std::string display_file(const std::string& file) {
  if (file.empty() || file.front() == '[' || file.front() == '=') return file;
  return basename_of(file);
}

std::string where(const Frame& f, int64_t line) {
  if (f.file.empty()) return "";
  const std::string file =
      f.kind == FrameKind::Lua || f.kind == FrameKind::Trace ? display_file(f.file) : f.file;
  if (line <= 0) return fmt::format(" ({})", file);
  return fmt::format(" ({}:{})", file, line);
}

std::string native_name(const Frame& f) {
  if (!f.function.empty()) return f.function;
  if (!f.module.empty()) return fmt::format("{}+{:#x}", basename_of(f.module), f.module_offset);
  return fmt::format("{:#x}", f.address);
}

std::string raw_label(const Frame& f, int64_t line) {
  switch (f.kind) {
    case FrameKind::Lua:
    case FrameKind::Trace:
      return (f.function.empty() ? std::string("?") : f.function) + where(f, line);
    case FrameKind::Native:
      return native_name(f);
    case FrameKind::CFunc:
    case FrameKind::Ffi:
    case FrameKind::Root:
      return fmt::format("{} [{}]", native_name(f), frame_kind_name(f.kind));
    case FrameKind::Unknown:
      // The producer already writes "[unknown: reason]"; a bare reason gets the same shape.
      if (f.function.starts_with("[unknown")) return f.function;
      if (f.function.empty()) return "[unknown]";
      return fmt::format("[unknown: {}]", f.function);
  }
  return f.function;
}

std::string label(const Frame& f, int64_t line) {
  std::string s = raw_label(f, line);
  make_printable(s);
  return s;
}

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

std::string frame_label(const Frame& frame) {
  return label(frame, frame.line);
}

std::string function_label(const Frame& frame) {
  const bool lua = frame.kind == FrameKind::Lua || frame.kind == FrameKind::Trace;
  return label(frame, lua ? frame.start_line : frame.line);
}

std::vector<Sample> aggregate_samples(const std::vector<Sample>& samples) {
  using Key = std::tuple<const std::vector<Frame>*, uint32_t, uint32_t>;
  auto less = [](const Key& a, const Key& b) {
    if (std::get<1>(a) != std::get<1>(b)) return std::get<1>(a) < std::get<1>(b);
    if (std::get<2>(a) != std::get<2>(b)) return std::get<2>(a) < std::get<2>(b);
    return *std::get<0>(a) < *std::get<0>(b);
  };
  std::map<Key, int64_t, decltype(less)> merged(less);
  for (const Sample& s : samples) {
    if (s.count <= 0) continue;
    merged[Key{&s.frames, s.pid, s.tid}] += s.count;
  }
  std::vector<Sample> out;
  out.reserve(merged.size());
  for (const auto& [key, count] : merged) {
    Sample s;
    s.frames = *std::get<0>(key);
    s.pid = std::get<1>(key);
    s.tid = std::get<2>(key);
    s.count = count;
    out.push_back(std::move(s));
  }
  return out;
}

bool same_sample(const Sample& a, const Sample& b) {
  return a.frames == b.frames && a.count == b.count && a.pid == b.pid && a.tid == b.tid;
}

}  // namespace ljprof::report
