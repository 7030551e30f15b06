// report/stalls.h: what `ljprof record --loop-stalls` reports — every event-loop stall over the
// threshold (profile::LoopStall) as a text summary (count, p50/p99/max, the worst stalls with the
// Lua functions sampled inside them) and as the JSON document
// [{"pid", "tid", "start_ns", "duration_ns", "stacks": [{"frames", "samples", "off_cpu_ns"}]}].
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/result.h"
#include "profile/profile.h"

namespace ljprof::report {

// `worst`: how many stalls the summary details, longest first.
std::string stalls_text(const std::vector<profile::LoopStall>& stalls, size_t worst = 5);
nlohmann::ordered_json stalls_json(const std::vector<profile::LoopStall>& stalls);
Status write_stalls_json(const std::vector<profile::LoopStall>& stalls, const std::string& path);

}  // namespace ljprof::report
