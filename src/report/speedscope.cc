#include "report/speedscope.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <tuple>
#include <vector>

#include "report/frames.h"
#include "report/json_text.h"
#include "report/write_file.h"

namespace ljprof::report {

namespace {

using Json = nlohmann::ordered_json;

// What one speedscope profile is: a thread, and for a Tarantool's tx thread the fiber on it.
struct TrackKey {
  uint32_t pid = 0;
  uint32_t tid = 0;
  std::string fiber;  // frames.h fiber_group_label without its "fiber:" prefix; "" for none
  auto operator<=>(const TrackKey&) const = default;
};

// One point of the timeline as a time interval of its thread.
struct Interval {
  int64_t start = 0;
  int64_t end = 0;
  uint32_t stack = 0;
};

// speedscope's shared.frames: each function once, by its top-table label.
class FrameTable {
 public:
  uint32_t id(const profile::Frame& f) {
    std::string label = function_label(f);
    auto [at, added] = ids_.try_emplace(label, static_cast<uint32_t>(frames_.size()));
    if (added) {
      Json frame = {{"name", label}};
      if ((f.kind == profile::FrameKind::Lua || f.kind == profile::FrameKind::Trace) &&
          !f.file.empty()) {
        frame["file"] = f.file;
        if (f.start_line > 0) frame["line"] = f.start_line;
      }
      frames_.push_back(std::move(frame));
    }
    return at->second;
  }
  Json take() { return std::move(frames_); }

 private:
  std::map<std::string, uint32_t> ids_;
  Json frames_ = Json::array();
};

std::string track_fiber(const profile::Sample& s) {
  const std::string group = fiber_group_label(s);
  return group.empty() ? group : group.substr(std::strlen("fiber:"));
}

std::string track_name(const TrackKey& k) {
  std::string name = fmt::format("pid {} tid {}", k.pid, k.tid);
  if (!k.fiber.empty()) name += " fiber " + k.fiber;
  return name;
}

// The timeline's points as intervals per track, each track's sorted by start.
std::map<TrackKey, std::vector<Interval>> tracks_of(const profile::Profile& p) {
  std::map<TrackKey, std::vector<Interval>> tracks;
  for (const profile::Timeline::Point& pt : p.timeline.points) {
    if (pt.stack >= p.timeline.stacks.size()) continue;
    const profile::Sample& s = p.timeline.stacks[pt.stack];
    const int64_t length = pt.off_cpu_ns > 0 ? pt.off_cpu_ns : p.period_ns;
    tracks[{s.pid, pt.tid, track_fiber(s)}].push_back({pt.time_ns - length, pt.time_ns, pt.stack});
  }
  for (auto& [key, intervals] : tracks) {
    std::stable_sort(intervals.begin(), intervals.end(),
                     [](const Interval& a, const Interval& b) { return a.start < b.start; });
  }
  return tracks;
}

// Opens and closes frames so that the open ones are always one stack, root first.
class EventWriter {
 public:
  EventWriter(Json& events, int64_t origin) : events_(events), origin_(origin) {}

  // The frames `stack` (root first) are what runs from `at` on.
  void run(const std::vector<uint32_t>& stack, int64_t at) {
    size_t common = 0;
    while (common < open_.size() && common < stack.size() && open_[common] == stack[common]) {
      ++common;
    }
    close_to(common, at);
    for (size_t i = common; i < stack.size(); ++i) {
      events_.push_back({{"type", "O"}, {"frame", stack[i]}, {"at", at - origin_}});
      open_.push_back(stack[i]);
    }
  }
  void close_all(int64_t at) { close_to(0, at); }

 private:
  void close_to(size_t depth, int64_t at) {
    while (open_.size() > depth) {
      events_.push_back({{"type", "C"}, {"frame", open_.back()}, {"at", at - origin_}});
      open_.pop_back();
    }
  }

  Json& events_;
  int64_t origin_;
  std::vector<uint32_t> open_;
};

Json evented_profile(const TrackKey& key, const std::vector<Interval>& intervals,
                     const std::vector<std::vector<uint32_t>>& stacks, int64_t period_ns,
                     int64_t origin, int64_t end) {
  Json events = Json::array();
  EventWriter writer(events, origin);
  int64_t last_end = intervals.front().start;
  for (const Interval& iv : intervals) {
    // An interval that would overlap the previous one (two CPUs' timers sample a thread that
    // moved between them a moment apart) starts where it ends, and keeps its length: each
    // sample stands for one period of the thread's time.
    const int64_t start = std::max(iv.start, last_end);
    // The thread did not run, or ran nothing sampled: nothing stays open across the gap.
    if (start - last_end > period_ns / 2) writer.close_all(last_end);
    writer.run(stacks[iv.stack], start);
    last_end = start + (iv.end - iv.start);
  }
  writer.close_all(last_end);
  return {{"type", "evented"}, {"name", track_name(key)},  {"unit", "nanoseconds"},
          {"startValue", 0},   {"endValue", end - origin}, {"events", std::move(events)}};
}

}  // namespace

Result<std::string> speedscope_json(const profile::Profile& profile, const std::string& name) {
  if (profile.timeline.points.empty()) {
    return make_error(
        "no timeline to write: only a recording keeps when each sample was taken (ljprof record "
        "--speedscope)");
  }
  FrameTable frames;
  std::vector<std::vector<uint32_t>> stacks;  // per timeline stack: frame ids, root first
  for (const profile::Sample& s : profile.timeline.stacks) {
    std::vector<uint32_t> ids;
    for (auto f = s.frames.rbegin(); f != s.frames.rend(); ++f) ids.push_back(frames.id(*f));
    stacks.push_back(std::move(ids));
  }
  const auto tracks = tracks_of(profile);
  int64_t origin = INT64_MAX, end = INT64_MIN;
  for (const auto& [key, intervals] : tracks) {
    origin = std::min(origin, intervals.front().start);
    for (const Interval& iv : intervals) end = std::max(end, iv.end);
  }
  Json profiles = Json::array();
  for (const auto& [key, intervals] : tracks) {
    profiles.push_back(evented_profile(key, intervals, stacks, profile.period_ns, origin, end));
  }
  Json doc = {{"$schema", "https://www.speedscope.app/file-format-schema.json"},
              {"shared", {{"frames", frames.take()}}},
              {"profiles", std::move(profiles)},
              {"name", name},
              {"activeProfileIndex", 0},
              {"exporter", "ljprof"}};
  return json_text(std::move(doc), -1);
}

Status write_speedscope(const profile::Profile& profile, const std::string& path) {
  const size_t slash = path.rfind('/');
  LJ_ASSIGN_OR_RETURN(
      std::string text,
      speedscope_json(profile, slash == std::string::npos ? path : path.substr(slash + 1)));
  return write_file(path, text + "\n");
}

}  // namespace ljprof::report
