// report/fiber_report.h: what `ljprof fibers -p PID` prints — every fiber of every cord (the
// main one first) with its state and stack — as text (frames worded like `ljprof core`'s) and as
// the JSON document {"pid", "cord", "cords", "fibers": [{"id", "name", "state", "cord", "frames",
// ...}], ...}.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>

#include "core/fiber_snapshot.h"

namespace ljprof::report {

// What was read: the main cord's snapshot first, then the other cords'; `cords_error`: why the
// other cords are not listed ("" when they are, or there are none).
struct FiberReport {
  uint32_t pid = 0;
  std::span<const core::FiberSnapshot> cords;
  std::string cords_error;
};

nlohmann::ordered_json fiber_report_json(const FiberReport& report);
std::string fiber_report_text(const FiberReport& report);

}  // namespace ljprof::report
