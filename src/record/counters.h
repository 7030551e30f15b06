// record/counters.h: the recorder's counters (bpf/abi/record_types.h LJ_REC_COUNTERS, and
// the walk ends of walk_types.h LJ_WALK_ENDS) as a table for the summary and metric names.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

extern "C" {
#include <stdint.h>

#include "abi/record_types.h"
}

namespace ljprof::record {

enum class CounterWhere : uint8_t { KERNEL, AGENT };

struct CounterSpec {
  uint32_t id;
  CounterWhere where;
  std::string_view metric;  // stable snake_case name
  std::string_view text;    // what the summary says
};

inline constexpr CounterSpec kCounterSpecs[] = {
#define LJ_REC_COUNTER_SPEC(id, value, where, metric, text) \
  {value, CounterWhere::where, metric, text},
    LJ_REC_COUNTERS(LJ_REC_COUNTER_SPEC)
#undef LJ_REC_COUNTER_SPEC
};

// The recorder's levels (LJ_REC_GAUGES), indexed by enum lj_rec_gauge.
struct GaugeSpec {
  std::string_view metric;  // stable snake_case name
  std::string_view text;    // what `record --stats` and the agent's summary say
};

inline constexpr GaugeSpec kGaugeSpecs[] = {
#define LJ_REC_GAUGE_SPEC(id, metric, text) {metric, text},
    LJ_REC_GAUGES(LJ_REC_GAUGE_SPEC)
#undef LJ_REC_GAUGE_SPEC
};
static_assert(std::size(kGaugeSpecs) == LJ_REC_NGAUGES);

// The agent's counts, indexed by counter id (only AGENT ids are incremented here).
using AgentCounts = std::array<uint64_t, LJ_REC_COUNTER_IDS>;

}  // namespace ljprof::record
