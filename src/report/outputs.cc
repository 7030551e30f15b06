#include "report/outputs.h"

#include <iostream>

#include "report/flamegraph.h"
#include "report/folded.h"
#include "report/perf_script.h"
#include "report/pprof.h"
#include "report/speedscope.h"
#include "report/top.h"

namespace ljprof::report {

Status write_outputs(const profile::Profile& recorded, const OutputOptions& options) {
  if (!options.pprof_path.empty()) LJ_TRY(write_pprof(recorded, options.pprof_path));
  // The timeline shows what ran when, on the CPU and off it: every sample, whatever --value.
  if (!options.speedscope_path.empty()) {
    LJ_TRY(write_speedscope(recorded, options.speedscope_path));
  }
  if (!options.firefox_path.empty()) LJ_TRY(write_perf_script(recorded, options.firefox_path));
  const ProfileValue value = options.value.value_or(default_value(recorded));
  profile::Profile view;
  if (value == ProfileValue::OffCpu) view = off_cpu_view(recorded);
  if (value == ProfileValue::Space) view = space_view(recorded);
  const profile::Profile& profile = value == ProfileValue::Cpu ? recorded : view;
  if (!options.folded_path.empty())
    LJ_TRY(write_folded(profile, options.folded_path, options.group_by));
  if (!options.flamegraph_path.empty()) {
    LJ_TRY(write_flamegraph(profile, options.flamegraph_path, options.group_by));
  }
  if (options.top > 0) {
    std::ostream& out = options.top_out ? *options.top_out : std::cout;
    if (options.group_by == GroupBy::Fiber) {
      write_top_by_fiber(profile, out, options.top);
    } else {
      write_top(profile, out, options.top);
    }
    out.flush();
    if (!out) return make_error("writing the top table failed");
  }
  return Ok{};
}

}  // namespace ljprof::report
