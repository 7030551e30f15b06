#include "report/fiber_report.h"

#include <fmt/format.h>

#include "report/backtrace.h"

namespace ljprof::report {

using Json = nlohmann::ordered_json;

Json fiber_snapshot_json(const core::FiberSnapshot& snapshot, uint32_t pid) {
  Json fibers = Json::array();
  for (const core::FiberStack& f : snapshot.fibers) {
    Json frames = Json::array();
    for (const symbolize::Frame& frame : f.stack->frames) {
      frames.push_back(backtrace_frame_json(frame));
    }
    Json j = {{"id", f.fiber.id},
              {"name", f.fiber.name},
              {"state", core::fiber_state_name(f.state)},
              {"cord", snapshot.cord},
              {"frames", std::move(frames)},
              {"reached_root", f.stack->reached_root}};
    if (!f.stack->end.empty()) j["end"] = f.stack->end;
    if (!f.note.empty()) j["note"] = f.note;
    fibers.push_back(std::move(j));
  }
  return {{"pid", pid},
          {"cord", snapshot.cord},
          {"fibers", std::move(fibers)},
          {"rereads", snapshot.rereads},
          {"unsettled", snapshot.unsettled}};
}

std::string fiber_snapshot_text(const core::FiberSnapshot& snapshot, uint32_t pid) {
  std::string text = fmt::format("Process {}, cord \"{}\": {} fibers\n\n", pid, snapshot.cord,
                                 snapshot.fibers.size());
  for (const core::FiberStack& f : snapshot.fibers) {
    text += fmt::format("Fiber {} \"{}\" ({})", f.fiber.id, f.fiber.name,
                        core::fiber_state_name(f.state));
    if (f.stack->frames.empty()) {
      text += fmt::format(": {}\n\n", f.note.empty() ? "no frames" : f.note);
      continue;
    }
    text += ":\n";
    if (!f.note.empty()) text += fmt::format("  (Lua frames only: {})\n", f.note);
    for (size_t i = 0; i < f.stack->frames.size(); ++i) {
      text += fmt::format("  #{:<3} {}\n", i, backtrace_frame_text(f.stack->frames[i]));
    }
    text += "\n";
  }
  if (snapshot.rereads != 0 || snapshot.unsettled != 0) {
    text += fmt::format("{} fibers read again because they ran under the read; {} kept changing\n",
                        snapshot.rereads, snapshot.unsettled);
  }
  return text;
}

}  // namespace ljprof::report
