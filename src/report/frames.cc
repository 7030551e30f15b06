#include "report/frames.h"

#include "common/path.h"
#include "common/printable.h"
#include "profile/profile_frames.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <tuple>

namespace ljprof::report {

namespace {

std::string where(const profile::Frame& f, int64_t line) {
  if (f.file.empty()) return "";
  const std::string file = f.kind == profile::FrameKind::Lua || f.kind == profile::FrameKind::Trace
                               ? profile::display_file(f.file)
                               : f.file;
  if (line <= 0) return fmt::format(" ({})", file);
  return fmt::format(" ({}:{})", file, line);
}

std::string native_name(const profile::Frame& f) {
  if (!f.function.empty()) return f.function;
  if (!f.module.empty()) return fmt::format("{}+{:#x}", basename_of(f.module), f.module_offset);
  return fmt::format("{:#x}", f.address);
}

std::string raw_label(const profile::Frame& f, int64_t line) {
  switch (f.kind) {
    case profile::FrameKind::Lua:
    case profile::FrameKind::Trace:
      return (f.function.empty() ? std::string("?") : f.function) + where(f, line);
    case profile::FrameKind::Native:
      return native_name(f);
    case profile::FrameKind::CFunc:
    case profile::FrameKind::Ffi:
    case profile::FrameKind::Root:
      return fmt::format("{} [{}]", native_name(f), profile::frame_kind_name(f.kind));
    case profile::FrameKind::Unknown:
      // The producer already writes "[unknown: reason]"; a bare reason gets the same shape.
      if (f.function.starts_with("[unknown")) return f.function;
      if (f.function.empty()) return "[unknown]";
      return fmt::format("[unknown: {}]", f.function);
  }
  return f.function;
}

std::string label(const profile::Frame& f, int64_t line) {
  std::string s = raw_label(f, line);
  make_printable(s);
  return s;
}

}  // namespace

std::string frame_label(const profile::Frame& frame) {
  return label(frame, frame.line);
}

std::string function_label(const profile::Frame& frame) {
  const bool lua = frame.kind == profile::FrameKind::Lua || frame.kind == profile::FrameKind::Trace;
  return label(frame, lua ? frame.start_line : frame.line);
}

std::string fiber_group_label(const profile::Sample& s) {
  if (!s.fiber.present()) return "";
  std::string label = s.fiber.name.empty() ? fmt::format("fiber:#{}", s.fiber.id)
                                           : "fiber:" + printable_text(s.fiber.name);
  // Another thread's cord: its fibers' names and ids repeat the main cord's ("main", 101...).
  if (!s.fiber.cord.empty() && s.fiber.cord != "main") {
    label += " (" + printable_text(s.fiber.cord) + ")";
  }
  return label;
}

std::vector<profile::Sample> aggregate_samples(const std::vector<profile::Sample>& samples) {
  // The key points into `samples`: (pid, tid, fiber, state, frames), compared in that order.
  struct Key {
    const profile::Sample* s;
    bool operator<(const Key& o) const {
      return std::tie(s->pid, s->tid, s->fiber, s->state, s->frames) <
             std::tie(o.s->pid, o.s->tid, o.s->fiber, o.s->state, o.s->frames);
    }
  };
  // count, off-CPU ns, bytes. A heap sample (bytes != 0) sums signed values: a diff against a
  // base profile (ljprof heap --base) has negative ones.
  struct Values {
    int64_t count = 0, off_cpu_ns = 0, bytes = 0;
  };
  std::map<Key, Values> merged;
  for (const profile::Sample& s : samples) {
    if (s.bytes != 0) {
      Values& v = merged[Key{&s}];
      v.count += s.count;
      v.bytes += s.bytes;
      continue;
    }
    if (s.count <= 0 && s.off_cpu_ns <= 0) continue;
    Values& v = merged[Key{&s}];
    v.count += std::max<int64_t>(s.count, 0);
    v.off_cpu_ns += std::max<int64_t>(s.off_cpu_ns, 0);
  }
  std::vector<profile::Sample> out;
  out.reserve(merged.size());
  for (const auto& [key, values] : merged) {
    profile::Sample s;
    s.frames = key.s->frames;
    s.pid = key.s->pid;
    s.tid = key.s->tid;
    s.fiber = key.s->fiber;
    s.state = key.s->state;
    s.count = values.count;
    s.off_cpu_ns = values.off_cpu_ns;
    s.bytes = values.bytes;
    out.push_back(std::move(s));
  }
  return out;
}

bool same_sample(const profile::Sample& a, const profile::Sample& b) {
  return a.frames == b.frames && a.count == b.count && a.pid == b.pid && a.tid == b.tid &&
         a.fiber == b.fiber && a.state == b.state && a.off_cpu_ns == b.off_cpu_ns;
}

}  // namespace ljprof::report
