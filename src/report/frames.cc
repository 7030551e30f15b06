#include "report/frames.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <tuple>

namespace ljprof::report {

namespace {

std::string basename_of(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string where(const Frame& f, int64_t line) {
  if (f.file.empty()) return "";
  if (line <= 0) return fmt::format(" ({})", f.file);
  return fmt::format(" ({}:{})", f.file, line);
}

std::string native_name(const Frame& f) {
  if (!f.function.empty()) return f.function;
  if (!f.module.empty()) return fmt::format("{}+{:#x}", basename_of(f.module), f.module_offset);
  return fmt::format("{:#x}", f.address);
}

std::string label(const Frame& f, int64_t line) {
  switch (f.kind) {
    case FrameKind::Lua:
      return (f.function.empty() ? std::string("?") : f.function) + where(f, line);
    case FrameKind::Native:
      return native_name(f);
    case FrameKind::CFunc:
    case FrameKind::Ffi:
    case FrameKind::Root:
      return fmt::format("{} [{}]", native_name(f), frame_kind_name(f.kind));
    case FrameKind::Trace: {
      // Producers name a trace "trace 12"; brackets mark it as not a function of the program.
      std::string name = f.function.empty() ? std::string("trace") : f.function;
      return fmt::format("[{}]{}", name, where(f, line));
    }
    case FrameKind::Unknown:
      // The producer already writes "[unknown: reason]"; a bare reason gets the same shape.
      if (f.function.starts_with("[unknown")) return f.function;
      if (f.function.empty()) return "[unknown]";
      return fmt::format("[unknown: {}]", f.function);
  }
  return f.function;
}

}  // namespace

std::optional<FrameKind> frame_kind_from_name(std::string_view name) {
  for (FrameKind k : {FrameKind::Native, FrameKind::Lua, FrameKind::CFunc, FrameKind::Ffi,
                      FrameKind::Trace, FrameKind::Root, FrameKind::Unknown}) {
    if (name == frame_kind_name(k)) return k;
  }
  return std::nullopt;
}

std::string frame_label(const Frame& frame) {
  return label(frame, frame.line);
}

std::string function_label(const Frame& frame) {
  // Only Lua has a distinct "function" line; a trace's line is where the trace starts.
  return label(frame, frame.kind == FrameKind::Lua ? frame.start_line : frame.line);
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

std::string valid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    // Length of the sequence and the allowed range of its second byte (the one that rules
    // out overlongs, surrogates and > U+10FFFF); later bytes are plain 80..BF.
    size_t len = 0;
    unsigned char lo = 0x80, hi = 0xbf;
    if (c < 0x80) {
      len = 1;
    } else if (c >= 0xc2 && c <= 0xdf) {
      len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
      len = 3;
      if (c == 0xe0) lo = 0xa0;
      if (c == 0xed) hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4;
      if (c == 0xf0) lo = 0x90;
      if (c == 0xf4) hi = 0x8f;
    }
    bool ok = len > 0 && i + len <= s.size();
    for (size_t k = 1; ok && k < len; ++k) {
      auto b = static_cast<unsigned char>(s[i + k]);
      ok = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xbf);
    }
    if (ok) {
      out.append(s.substr(i, len));
      i += len;
    } else {
      out += "\xef\xbf\xbd";  // U+FFFD for this one byte; resynchronize at the next
      ++i;
    }
  }
  return out;
}

bool same_sample(const Sample& a, const Sample& b) {
  return a.frames == b.frames && a.count == b.count && a.pid == b.pid && a.tid == b.tid;
}

}  // namespace ljprof::report
