#include "traceback_oracle.h"

#include <gtest/gtest.h>

#include <regex>
#include <sstream>

namespace ljprof::test {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::vector<std::vector<ExpectedFrame>> parse_tracebacks(const std::string& out) {
  static const std::regex c_named(R"(^\t\[C\]: in (function '(.*)'|\?)$)");
  static const std::regex c_at(R"(^\t\[C\]: at 0x([0-9a-f]+)$)");
  static const std::regex lua_main(R"(^\t(.+):(\d+): in main chunk$)");
  static const std::regex lua_anon(R"(^\t(.+):(\d+): in function <(.+):(\d+)>$)");
  static const std::regex lua_named(R"(^\t(.+):(\d+): in function '(.*)'$)");
  std::vector<std::vector<ExpectedFrame>> blocks;
  bool inside = false;
  for (const std::string& line : lines_of(out)) {
    if (line == "ljprof-traceback-begin") {
      inside = true;
      blocks.emplace_back();
      continue;
    }
    if (line == "ljprof-traceback-end") {
      inside = false;
      continue;
    }
    if (!inside || line.empty() || line == "stack traceback:") continue;
    ExpectedFrame f;
    f.text = line;
    std::smatch m;
    if (line == "\t...") {
      f.gap = true;
    } else if (std::regex_match(line, m, c_at)) {
      f.is_c = true;
      f.c_entry = std::stoull(m[1], nullptr, 16);
    } else if (std::regex_match(line, m, c_named)) {
      f.is_c = true;
      if (m[2].matched) f.name = m[2];
    } else if (std::regex_match(line, m, lua_main)) {
      f.source = m[1];
      f.line = std::stoi(m[2]);
      f.main_chunk = true;
    } else if (std::regex_match(line, m, lua_anon)) {
      f.source = m[1];
      f.line = std::stoi(m[2]);
      f.firstline = std::stoi(m[4]);
    } else if (std::regex_match(line, m, lua_named)) {
      f.source = m[1];
      f.line = std::stoi(m[2]);
      f.name = m[3];
    } else {
      ADD_FAILURE() << "unparsed traceback line: " << line;
      continue;
    }
    blocks.back().push_back(f);
  }
  return blocks;
}

}  // namespace ljprof::test
