// report/fiber_report.h: what `ljprof fibers -p PID` prints — every fiber of every cord (the
// main one first) with its state and stack — as text (frames worded like `ljprof core`'s) and as
// the JSON document {"pid", "cord", "cords", "fibers": [{"id", "name", "state", "cord", "tid",
// "frames", ...}], ...}.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/fiber_snapshot.h"

namespace ljprof::report {

// What was read: the main cord's snapshot first, then the other cords'; `cords_error`: why the
// other cords are not listed ("" when they are, or there are none).
struct CordFibers {
  uint32_t tid = 0;  // the thread that runs the cord: cords' names repeat ("coio" per worker)
  core::FiberSnapshot snapshot;
};
struct FiberReport {
  uint32_t pid = 0;
  std::vector<CordFibers> cords;
  std::string cords_error;
};

nlohmann::ordered_json fiber_report_json(const FiberReport& report);
std::string fiber_report_text(const FiberReport& report);

}  // namespace ljprof::report
