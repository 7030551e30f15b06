// record/record_statistics.cc: the recording's counters and costs gathered from its parts, named
// by the counter registry.
#include "record/record_statistics.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "record/cost.h"
#include "symbolize/symbolize.h"

namespace ljprof::record {

uint64_t RecordStats::headline_count(uint32_t id) const {
  switch (id) {
    case LJ_REC_CTR_SAMPLES:
      return samples;
    case LJ_REC_CTR_DELIVERED:
      return delivered;
    case LJ_REC_CTR_REACHED_ROOT:
      return reached_root;
    case LJ_REC_CTR_WITHOUT_CONTEXT:
      return without_context;
    default:
      return 0;
  }
}

RecordStats RecordStatistics::stats(For use) {
  RecordStats r;
  const auto c = session_.read_counters();
  r.samples = c[LJ_REC_CTR_SAMPLES];
  r.delivered = counts_[LJ_REC_CTR_DELIVERED];
  r.reached_root = counts_[LJ_REC_CTR_REACHED_ROOT];
  r.processes_followed = follower_.with_context();
  const uint64_t before_context = add_walk_end_reasons(c, use, r);
  counts_[LJ_REC_CTR_BEFORE_CONTEXT] = before_context;
  counts_[LJ_REC_CTR_WITHOUT_CONTEXT] = c[LJ_REC_CTR_NO_CONTEXT] + before_context;
  r.without_context = counts_[LJ_REC_CTR_WITHOUT_CONTEXT];
  r.without_user_stack = c[LJ_REC_CTR_EXITING] + c[LJ_REC_CTR_IN_EXEC];
  add_gauges(r);
  add_registry_reasons(c, use, r);
  return r;
}

uint64_t RecordStatistics::add_walk_end_reasons(const std::vector<uint64_t>& c, For use,
                                                RecordStats& r) const {
  const bool every_reason = use == For::Metrics;
  uint64_t before_context = 0;
  for (uint32_t e = 0; e < intake_.before_context().size(); ++e) {
    if (e == LJ_END_ROOT) continue;
    const uint64_t late = std::min(intake_.before_context()[e], c[LJ_REC_CTR_END_BASE + e]);
    before_context += late;
    const uint64_t ended = c[LJ_REC_CTR_END_BASE + e] - late;
    if (ended == 0 && !every_reason) continue;
    RecordStats::Reason reason{fmt::format("walk ended: {}", symbolize::walk_end_name(e)),
                               fmt::format("walk_end_{}", symbolize::walk_end_metric(e)),
                               ended,
                               {}};
    if (use == For::Summary) reason.sites = intake_.top_end_sites(e, 3);
    r.reasons.push_back(std::move(reason));
  }
  return before_context;
}

void RecordStatistics::add_gauges(RecordStats& r) const {
  std::array<uint64_t, LJ_REC_NGAUGES> levels{};
  levels[LJ_REC_GAUGE_ROWS_IN_USE] = rows_.in_use();
  levels[LJ_REC_GAUGE_ROWS_CAPACITY] = rows_.capacity();
  levels[LJ_REC_GAUGE_OBJECT_CACHE_ENTRIES] = cache_.size();
  levels[LJ_REC_GAUGE_OBJECT_CACHE_BYTES] = cache_.held_bytes();
  for (uint32_t g = 0; g < LJ_REC_NGAUGES; ++g) {
    r.gauges.push_back(
        {std::string(kGaugeSpecs[g].metric), std::string(kGaugeSpecs[g].text), levels[g]});
  }
}

// (the headline counters are the summary's first line, not reasons)
void RecordStatistics::add_registry_reasons(const std::vector<uint64_t>& c, For use,
                                            RecordStats& r) const {
  for (const CounterSpec& spec : kCounterSpecs) {
    if (is_headline_counter(spec.id)) continue;
    const uint64_t v = spec.where == CounterWhere::KERNEL ? c[spec.id] : counts_[spec.id];
    if (v != 0 || use == For::Metrics) {
      r.reasons.push_back({std::string(spec.text), std::string(spec.metric), v, {}});
    }
  }
}

RecordCost RecordStatistics::cost(double elapsed) const {
  RecordCost c = cost_;
  c.cpu_s = process_cpu_seconds();
  if (steady_cpu0_ >= 0) {
    c.steady_s = elapsed - RecordCost::kSteadyAfterS;
    c.steady_cpu_s = c.cpu_s - steady_cpu0_;
    c.steady_samples = counts_[LJ_REC_CTR_DELIVERED] - steady_delivered0_;
  }
  c.max_rss_kib = max_rss_kib();
  c.resident = resident_parts();
  const WalkTimes& walks = intake_.walk_times();
  c.walk_samples = walks.count();
  c.walk_ns_median = walks.quantile_ns(0.5);
  c.walk_ns_p90 = walks.quantile_ns(0.9);
  c.walk_mean_frames = walks.mean_frames();
  c.walk_work = session_.walk_work();
  const StackMemo::Stats& memo = intake_.memo_stats();
  c.stacks_whole_hits = memo.whole_hits;
  c.stacks_suffix_hits = memo.suffix_hits;
  c.stacks_symbolized = memo.symbolized;
  c.stack_units_symbolized = memo.units_symbolized;
  if (tables_.enabled()) {
    const cfi::TableCache::Counts& t = tables_.counts();
    c.table_cache_dir = tables_.dir();
    c.tables_from_cache = t.hits;
    c.tables_built = t.misses + t.rejected;
    c.table_cache_problem = tables_.first_problem();
  }
  return c;
}

std::string RecordStatistics::status_line(double elapsed) const {
  auto c = session_.read_counters();
  const uint64_t seen = c[LJ_REC_CTR_SAMPLES];
  const size_t live = follower_.live();
  return fmt::format("ljprof record: {:.1f} s, {} process{}, {} samples, {:.1f}% unwound to a root",
                     elapsed, live, live == 1 ? "" : "es", seen,
                     seen ? 100.0 * counts_[LJ_REC_CTR_REACHED_ROOT] / seen : 0.0);
}

void RecordStatistics::note_elapsed(double elapsed) {
  if (steady_cpu0_ < 0 && elapsed >= RecordCost::kSteadyAfterS) {
    steady_cpu0_ = process_cpu_seconds();
    steady_delivered0_ = counts_[LJ_REC_CTR_DELIVERED];
  }
}

void add_profile_counters(const RecordStats& stats, profile::Profile& prof) {
  for (const HeadlineCounter& h : kHeadlineCounters) {
    prof.counters[std::string(h.profile_name)] = stats.headline_count(h.spec->id);
  }
  for (const RecordStats::Reason& reason : stats.reasons) prof.counters[reason.name] = reason.count;
}

}  // namespace ljprof::record
