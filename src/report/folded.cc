#include "report/folded.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>

#include "report/frames.h"

namespace ljprof::report {

namespace {

// ';' separates frames: in a frame's text it becomes ':'.
std::string folded_escape(std::string s) {
  for (char& c : s) {
    if (c == ';') c = ':';
  }
  return s;
}

}  // namespace

std::string folded_frame(const profile::Frame& frame) {
  return folded_escape(frame_label(frame));  // printable: no line break can split a stack's line
}

std::string folded_text(const profile::Profile& profile, GroupBy group_by) {
  std::map<std::string, int64_t> stacks;
  for (const profile::Sample& s : profile.samples) {
    if (s.frames.empty() || s.count <= 0) continue;
    std::string line;
    if (group_by == GroupBy::Fiber) line = folded_escape(fiber_group_label(s));
    for (auto it = s.frames.rbegin(); it != s.frames.rend(); ++it) {  // leaf first -> root first
      if (!line.empty()) line += ';';
      line += folded_frame(*it);
    }
    stacks[line] += s.count;
  }
  std::string out;
  for (const auto& [stack, count] : stacks) out += fmt::format("{} {}\n", stack, count);
  return out;
}

void write_folded(const profile::Profile& profile, std::ostream& out, GroupBy group_by) {
  out << folded_text(profile, group_by);
}

Status write_folded(const profile::Profile& profile, const std::string& path, GroupBy group_by) {
  if (path == "-") {
    write_folded(profile, std::cout, group_by);
    std::cout.flush();
    if (!std::cout) return make_error("stdout: writing folded stacks failed");
    return Ok{};
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return make_error("{}: cannot create: {}", path, strerror(errno));
  write_folded(profile, out, group_by);
  out.close();
  if (!out) return make_error("{}: write failed", path);
  return Ok{};
}

}  // namespace ljprof::report
