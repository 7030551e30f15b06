// report/fiber_report.h: what `ljprof fibers -p PID` prints — every fiber of the main cord with
// its state and stack — as text (frames worded like `ljprof core`'s) and as the JSON document
// {"pid", "cord", "fibers": [{"id", "name", "state", "cord", "frames", ...}], ...}.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "core/fiber_snapshot.h"

namespace ljprof::report {

nlohmann::ordered_json fiber_snapshot_json(const core::FiberSnapshot& snapshot, uint32_t pid);
std::string fiber_snapshot_text(const core::FiberSnapshot& snapshot, uint32_t pid);

}  // namespace ljprof::report
