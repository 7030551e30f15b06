#include "report/stalls.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "profile/profile_frames.h"
#include "report/frames.h"
#include "report/json_text.h"
#include "report/write_file.h"

namespace ljprof::report {

namespace {

using Json = nlohmann::ordered_json;

// The innermost Lua frame of a sample ("" when it has none): what the stall's Lua code did.
std::string innermost_lua(const profile::Sample& s) {
  for (const profile::Frame& f : s.frames) {
    if (f.kind == profile::FrameKind::Lua || f.kind == profile::FrameKind::Trace) {
      return f.line > 0
                 ? fmt::format("{} ({}:{})", f.function, profile::display_file(f.file), f.line)
                 : f.function;
    }
  }
  return {};
}

// p (0..1) of sorted `v`: the nearest rank.
int64_t percentile(const std::vector<int64_t>& v, double p) {
  if (v.empty()) return 0;
  size_t rank = static_cast<size_t>(p * static_cast<double>(v.size()) + 0.999999);
  rank = std::clamp<size_t>(rank, 1, v.size());
  return v[rank - 1];
}

// Per innermost Lua frame, the stall's CPU samples and off-CPU ns, most first.
std::vector<std::pair<std::string, std::pair<int64_t, int64_t>>> lua_tops(
    const profile::LoopStall& stall) {
  std::map<std::string, std::pair<int64_t, int64_t>> by;
  for (const profile::Sample& s : stall.samples) {
    std::string lua = innermost_lua(s);
    auto& [samples, off_cpu] = by[lua.empty() ? "(no Lua frame)" : lua];
    samples += s.count;
    off_cpu += s.off_cpu_ns;
  }
  std::vector<std::pair<std::string, std::pair<int64_t, int64_t>>> out(by.begin(), by.end());
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.second.first * 1000000 + a.second.second > b.second.first * 1000000 + b.second.second;
  });
  return out;
}

}  // namespace

std::string stalls_text(const std::vector<profile::LoopStall>& stalls, size_t worst) {
  if (stalls.empty()) return "no event-loop stalls over the threshold\n";
  std::vector<int64_t> durations;
  for (const profile::LoopStall& s : stalls) durations.push_back(s.duration_ns);
  std::sort(durations.begin(), durations.end());
  std::string out =
      fmt::format("{} event-loop stall{}: p50 {:.1f} ms, p99 {:.1f} ms, max {:.1f} ms\n",
                  stalls.size(), stalls.size() == 1 ? "" : "s", percentile(durations, 0.5) / 1e6,
                  percentile(durations, 0.99) / 1e6, durations.back() / 1e6);
  std::vector<const profile::LoopStall*> order;
  for (const profile::LoopStall& s : stalls) order.push_back(&s);
  std::sort(order.begin(), order.end(),
            [](const auto* a, const auto* b) { return a->duration_ns > b->duration_ns; });
  const int64_t first = stalls.front().start_ns;
  for (size_t i = 0; i < std::min(worst, order.size()); ++i) {
    const profile::LoopStall& s = *order[i];
    out += fmt::format("  {:.1f} ms in pid {} tid {} at +{:.3f} s:", s.duration_ns / 1e6, s.pid,
                       s.tid, (s.start_ns - first) / 1e9);
    const auto tops = lua_tops(s);
    if (tops.empty()) out += " no sample inside it";
    for (size_t t = 0; t < std::min<size_t>(3, tops.size()); ++t) {
      const auto& [lua, v] = tops[t];
      out += fmt::format(" {}{} ({} samples, {:.1f} ms off-CPU)", t ? "; " : "", lua, v.first,
                         v.second / 1e6);
    }
    out += "\n";
  }
  return out;
}

Json stalls_json(const std::vector<profile::LoopStall>& stalls) {
  Json out = Json::array();
  for (const profile::LoopStall& s : stalls) {
    Json stacks = Json::array();
    for (const profile::Sample& sample : aggregate_samples(s.samples)) {
      Json frames = Json::array();
      for (const profile::Frame& f : sample.frames) frames.push_back(frame_label(f));
      stacks.push_back(
          {{"frames", frames}, {"samples", sample.count}, {"off_cpu_ns", sample.off_cpu_ns}});
    }
    out.push_back({{"pid", s.pid},
                   {"tid", s.tid},
                   {"start_ns", s.start_ns},
                   {"duration_ns", s.duration_ns},
                   {"stacks", std::move(stacks)}});
  }
  return out;
}

Status write_stalls_json(const std::vector<profile::LoopStall>& stalls, const std::string& path) {
  return write_file(path, json_text(stalls_json(stalls)) + "\n");
}

}  // namespace ljprof::report
