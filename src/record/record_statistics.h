// record/record_statistics.h: a recording's counters, levels and costs as the end-of-run summary,
// the metrics page, the progress line and a profile's counters show them (every counter named by
// the registry, record/counters.h).
#pragma once

#include <string>
#include <vector>

#include "cfi/table_cache.h"
#include "profile/profile.h"
#include "record/bpf_session.h"
#include "record/counters.h"
#include "record/process_context.h"
#include "record/process_follower.h"
#include "record/recorder.h"
#include "record/sample_intake.h"
#include "record/unwind_rows.h"

namespace ljprof::record {

class RecordStatistics {
 public:
  // `cost` is what was measured as it happened (the program's load, each process's first
  // context).
  RecordStatistics(const BpfSession& session, const ProcessFollower& follower,
                   const SampleIntake& intake, const UnwindRows& rows, const ObjectCache& cache,
                   const cfi::TableCache& tables, AgentCounts& counts, const RecordCost& cost)
      : session_(session),
        follower_(follower),
        intake_(intake),
        rows_(rows),
        cache_(cache),
        tables_(tables),
        counts_(counts),
        cost_(cost) {}

  enum class For { Summary, Metrics };
  // The counters so far. For the summary: the reasons that occurred, each with the three sites
  // where most walks stopped. For the metrics page (built every second): every reason, also
  // those still at zero (a series exists from the first scrape), without sites (the page has no
  // place for them).
  RecordStats stats(For use);
  // What the recording cost, `elapsed` seconds into it.
  RecordCost cost(double elapsed) const;
  // The progress line printed about once a second.
  std::string status_line(double elapsed) const;
  // Called every loop round: the steady state's measures start RecordCost::kSteadyAfterS into
  // the run.
  void note_elapsed(double elapsed);

 private:
  // The walk ends as reasons, the walks that stopped before their rows taken out of each; how
  // many those were.
  uint64_t add_walk_end_reasons(const std::vector<uint64_t>& kernel, For use, RecordStats& r) const;
  void add_gauges(RecordStats& r) const;
  // Every other counter of the registry as a reason, in its order.
  void add_registry_reasons(const std::vector<uint64_t>& kernel, For use, RecordStats& r) const;

  const BpfSession& session_;
  const ProcessFollower& follower_;
  const SampleIntake& intake_;
  const UnwindRows& rows_;
  const ObjectCache& cache_;
  const cfi::TableCache& tables_;
  AgentCounts& counts_;
  const RecordCost& cost_;
  double steady_cpu0_ = -1;  // process CPU when steady state began (-1: not yet)
  uint64_t steady_delivered0_ = 0;
};

// The counters a profile keeps (pprof comments "counter NAME=VALUE"): the headline counters under
// their profile names, then every reason of `stats` under its text.
void add_profile_counters(const RecordStats& stats, profile::Profile& prof);

}  // namespace ljprof::record
