#include "record/counters.h"

namespace ljprof::record {

// The registry's rules: ids below their bound and unique, kernel ids inside the BPF array and
// above the walk ends, agent ids outside it, metric names unique.
static_assert(
    [] {
      for (size_t i = 0; i < std::size(kCounterSpecs); ++i) {
        const CounterSpec& a = kCounterSpecs[i];
        if (a.id >= LJ_REC_COUNTER_IDS) return false;
        const bool kernel = a.where == CounterWhere::KERNEL;
        if (kernel != (a.id < LJ_REC_NCOUNTERS) || (kernel && a.id < LJ_END_COUNT)) return false;
        for (size_t j = i + 1; j < std::size(kCounterSpecs); ++j) {
          if (a.id == kCounterSpecs[j].id || a.metric == kCounterSpecs[j].metric) return false;
        }
      }
      return true;
    }(),
    "LJ_REC_COUNTERS: ids unique and in their range, metric names unique");

// Every headline counter is in the registry, once; its profile name is its own (a profile's
// counters hold the reasons under their texts too).
static_assert(
    [] {
      for (size_t i = 0; i < std::size(kHeadlineCounters); ++i) {
        if (kHeadlineCounters[i].spec == nullptr) return false;
        for (const CounterSpec& c : kCounterSpecs) {
          if (c.text == kHeadlineCounters[i].profile_name) return false;
        }
        for (size_t j = i + 1; j < std::size(kHeadlineCounters); ++j) {
          if (kHeadlineCounters[i].spec == kHeadlineCounters[j].spec ||
              kHeadlineCounters[i].profile_name == kHeadlineCounters[j].profile_name) {
            return false;
          }
        }
      }
      return true;
    }(),
    "kHeadlineCounters: each a counter of the registry, once, under a profile name of its own");

// A gauge's name is its own: unique among the gauges and no counter's.
static_assert(
    [] {
      for (size_t i = 0; i < std::size(kGaugeSpecs); ++i) {
        for (size_t j = i + 1; j < std::size(kGaugeSpecs); ++j) {
          if (kGaugeSpecs[i].metric == kGaugeSpecs[j].metric) return false;
        }
        for (const CounterSpec& c : kCounterSpecs) {
          if (c.metric == kGaugeSpecs[i].metric) return false;
        }
      }
      return true;
    }(),
    "LJ_REC_GAUGES: metric names unique, and none a counter's");

}  // namespace ljprof::record
