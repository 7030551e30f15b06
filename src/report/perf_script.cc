#include "report/perf_script.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <tuple>
#include <vector>

#include "common/printable.h"
#include "profile/profile_frames.h"
#include "report/frames.h"
#include "report/write_file.h"

namespace ljprof::report {

namespace {

// What the importer reads between the pc and " (module)": anything (a label is printable text,
// frames.h: no line break) that does not start with '(' (a process name to the importer); a
// "+0x.." at its end is cut off as a symbol offset, so a label ending so gets a trailing space.
std::string frame_text(const profile::Frame& f) {
  std::string label = function_label(f);
  if (label.empty() || label.front() == '(') label.insert(0, "?");
  const size_t plus = label.rfind("+0x");
  if (plus != std::string::npos &&
      label.find_first_not_of("0123456789abcdef", plus + 3) == std::string::npos) {
    label += " ";
  }
  return label;
}

// The importer's module: what is between the last " (" and ")" of the line, no ')' inside.
std::string where_text(const profile::Frame& f) {
  const bool lua = f.kind == profile::FrameKind::Lua || f.kind == profile::FrameKind::Trace;
  std::string where = lua ? profile::display_file(f.file) : f.module;
  const size_t slash = where.rfind('/');
  if (!lua && slash != std::string::npos) where = where.substr(slash + 1);
  std::replace(where.begin(), where.end(), ')', ']');
  std::replace(where.begin(), where.end(), '(', '[');
  return where.empty() ? "unknown" : printable_text(where);
}

std::string sample_block(const std::string& thread, uint32_t pid, uint32_t tid, int64_t time_ns,
                         int64_t period_ns, const char* event,
                         const std::vector<std::string>& frames) {
  std::string out =
      fmt::format("{} {}/{} {}.{:06}: {} {}:\n", thread, pid, tid, time_ns / 1000000000,
                  (time_ns % 1000000000) / 1000, period_ns, event);
  for (const std::string& f : frames) out += f;
  return out + "\n";
}

// Per timeline stack: its frame lines, leaf first.
std::vector<std::vector<std::string>> frame_lines(const profile::Timeline& t) {
  std::vector<std::vector<std::string>> out;
  for (const profile::Sample& s : t.stacks) {
    std::vector<std::string> lines;
    for (const profile::Frame& f : s.frames) {
      lines.push_back(fmt::format("\t{:x} {} ({})\n", f.address, frame_text(f), where_text(f)));
    }
    out.push_back(std::move(lines));
  }
  return out;
}

}  // namespace

Result<std::string> perf_script_text(const profile::Profile& profile) {
  const profile::Timeline& t = profile.timeline;
  if (t.points.empty()) {
    return make_error(
        "no timeline to write: only a recording keeps when each sample was taken (ljprof record "
        "--firefox)");
  }
  const auto lines = frame_lines(t);
  const int64_t period = std::max<int64_t>(profile.period_ns, 1);
  std::vector<const profile::Timeline::Point*> points;
  for (const auto& p : t.points) {
    if (p.stack < t.stacks.size()) points.push_back(&p);
  }
  std::stable_sort(points.begin(), points.end(), [](const auto* a, const auto* b) {
    return std::tie(a->tid, a->time_ns) < std::tie(b->tid, b->time_ns);
  });
  std::string out;
  for (const profile::Timeline::Point* p : points) {
    const profile::Sample& s = t.stacks[p->stack];
    const std::string thread =
        s.fiber.present() ? fiber_group_label(s) : fmt::format("pid {}", s.pid);
    if (p->off_cpu_ns <= 0) {
      out += sample_block(thread, s.pid, p->tid, p->time_ns, period, "cpu-clock", lines[p->stack]);
      continue;
    }
    const int64_t n = std::clamp<int64_t>(p->off_cpu_ns / period, 1, kMaxSamplesPerInterval);
    for (int64_t i = n - 1; i >= 0; --i) {
      out += sample_block(thread, s.pid, p->tid, p->time_ns - i * period, period, "off-cpu",
                          lines[p->stack]);
    }
  }
  return out;
}

Status write_perf_script(const profile::Profile& profile, const std::string& path) {
  LJ_ASSIGN_OR_RETURN(std::string text, perf_script_text(profile));
  return write_file(path, text);
}

}  // namespace ljprof::report
