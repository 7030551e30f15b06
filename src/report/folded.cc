#include "report/folded.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>

#include "report/frames.h"

namespace ljprof::report {

std::string folded_frame(const profile::Frame& frame) {
  std::string s = frame_label(frame);  // printable: no line break can split a stack's line
  for (char& c : s) {
    if (c == ';') c = ':';
  }
  return s;
}

std::string folded_text(const profile::Profile& profile) {
  std::map<std::string, int64_t> stacks;
  for (const profile::Sample& s : profile.samples) {
    if (s.frames.empty() || s.count <= 0) continue;
    std::string line;
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

void write_folded(const profile::Profile& profile, std::ostream& out) {
  out << folded_text(profile);
}

Status write_folded(const profile::Profile& profile, const std::string& path) {
  if (path == "-") {
    write_folded(profile, std::cout);
    std::cout.flush();
    if (!std::cout) return make_error("stdout: writing folded stacks failed");
    return Ok{};
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return make_error("{}: cannot create: {}", path, strerror(errno));
  write_folded(profile, out);
  out.close();
  if (!out) return make_error("{}: write failed", path);
  return Ok{};
}

}  // namespace ljprof::report
