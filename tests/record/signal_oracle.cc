#include "signal_oracle.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <regex>

#include "split_oracle.h"

namespace ljprof::record_oracle {

SignalLines signal_lines(const std::string& workload_out) {
  std::smatch m;
  if (!std::regex_search(workload_out, m, std::regex(R"(clock_line=(\d+) loop_line=(\d+))"))) {
    return {};
  }
  return {fmt::format("spin (signal_interrupted.lua:{})", m[1].str()),
          fmt::format("spin (signal_interrupted.lua:{})", m[2].str())};
}

SignalTally tally_signal_stacks(const std::string& folded_path, const SignalLines& lines) {
  SignalTally t;
  for (const FoldedStack& s : read_folded(folded_path)) {
    t.walked += s.count;
    t.rooted += s.rooted() ? s.count : 0;
    auto sig = std::find(s.frames.begin(), s.frames.end(), "<signal handler called>");
    if (sig == s.frames.end() || std::next(sig) == s.frames.end() || *std::next(sig) != "on_alarm")
      continue;
    t.in_handler += s.count;
    // Root first: the frames before the signal frame are the interrupted ones; the Lua function
    // the signal found running is the last Lua frame among them.
    auto lua = std::find_if(std::make_reverse_iterator(sig), s.frames.rend(),
                            [](const std::string& f) { return f.starts_with("spin ("); });
    if (lua == s.frames.rend()) continue;
    t.interrupted_lua += s.count;
    if (*lua == lines.loop) t.at_loop += s.count;
    if (*lua == lines.clock) t.at_clock += s.count;
  }
  return t;
}

}  // namespace ljprof::record_oracle
