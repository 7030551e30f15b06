// record/counters.h: the recorder's counters (bpf/abi/record_types.h LJ_REC_COUNTERS, and
// the walk ends of walk_types.h LJ_WALK_ENDS) as tables for the summary, the metric names and a
// profile's counters.
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

// The registry's entry of counter `id` (an LJ_REC_CTR_* value); null for an id it does not hold.
constexpr const CounterSpec* find_counter(uint32_t id) {
  for (const CounterSpec& spec : kCounterSpecs) {
    if (spec.id == id) return &spec;
  }
  return nullptr;
}

// The text of counter `id` (CounterSpec::text); "?" for an id the registry does not hold.
constexpr std::string_view counter_text(uint32_t id) {
  const CounterSpec* spec = find_counter(id);
  return spec != nullptr ? spec->text : "?";
}

// The headline counters, in this order: the first line of the end-of-run summary (not reasons
// under it), the first families of the metrics page (ljprof_<metric>_total, help = the
// counter's text) and the counters a profile opens with, under `profile_name` (the pprof comment
// "counter NAME=VALUE"). RecordStats::headline_count gives their values.
struct HeadlineCounter {
  const CounterSpec* spec;  // its entry in kCounterSpecs
  std::string_view profile_name;
};

inline constexpr HeadlineCounter kHeadlineCounters[] = {
    {find_counter(LJ_REC_CTR_SAMPLES), "samples"},
    {find_counter(LJ_REC_CTR_DELIVERED), "samples delivered"},
    {find_counter(LJ_REC_CTR_REACHED_ROOT), "samples unwound to a proven root"},
    {find_counter(LJ_REC_CTR_WITHOUT_CONTEXT), "samples without an unwind context"},
};

// Whether counter `id` is one of kHeadlineCounters.
constexpr bool is_headline_counter(uint32_t id) {
  for (const HeadlineCounter& h : kHeadlineCounters) {
    if (h.spec->id == id) return true;
  }
  return false;
}

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
