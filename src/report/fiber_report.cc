#include "report/fiber_report.h"

#include <fmt/format.h>

#include "common/printable.h"
#include "report/backtrace.h"

namespace ljprof::report {

using Json = nlohmann::ordered_json;

Json fiber_report_json(const FiberReport& report) {
  Json fibers = Json::array(), cords = Json::array();
  uint64_t rereads = 0, unsettled = 0;
  for (const auto& [tid, snapshot] : report.cords) {
    cords.push_back(snapshot.cord);
    rereads += snapshot.rereads;
    unsettled += snapshot.unsettled;
    for (const core::FiberStack& f : snapshot.fibers) {
      Json frames = Json::array();
      for (const symbolize::Frame& frame : f.stack->frames) {
        frames.push_back(backtrace_frame_json(frame));
      }
      Json j = {{"id", f.fiber.id},
                {"name", f.fiber.name},
                {"state", core::fiber_state_name(f.state)},
                {"cord", snapshot.cord},
                {"tid", tid},
                {"frames", std::move(frames)},
                {"reached_root", f.stack->reached_root}};
      if (!f.stack->end.empty()) j["end"] = f.stack->end;
      if (!f.note.empty()) j["note"] = f.note;
      fibers.push_back(std::move(j));
    }
  }
  Json out = {
      {"pid", report.pid},
      {"cord", report.cords.empty() ? Json(nullptr) : Json(report.cords.front().snapshot.cord)},
      {"cords", std::move(cords)},
      {"fibers", std::move(fibers)},
      {"rereads", rereads},
      {"unsettled", unsettled}};
  if (!report.cords_error.empty()) out["cords_error"] = printable_text(report.cords_error);
  return out;
}

namespace {

std::string snapshot_text(const CordFibers& cord, uint32_t pid) {
  const core::FiberSnapshot& snapshot = cord.snapshot;
  std::string text = fmt::format("Process {}, cord \"{}\" (thread {}): {} fibers\n\n", pid,
                                 snapshot.cord, cord.tid, snapshot.fibers.size());
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

}  // namespace

std::string fiber_report_text(const FiberReport& report) {
  std::string text;
  for (const CordFibers& cord : report.cords) text += snapshot_text(cord, report.pid);
  if (!report.cords_error.empty()) {
    text +=
        fmt::format("Other cords' fibers: not listed: {}\n", printable_text(report.cords_error));
  }
  return text;
}

}  // namespace ljprof::report
