// report/outputs.h: every output of one profile in one call — what `ljprof report` and
// `ljprof record` share, with the same option names (-o FILE.pb.gz, --folded FILE,
// --flamegraph FILE.html|.svg, --top[=N]).
#pragma once

#include <cstddef>
#include <optional>
#include <ostream>
#include <string>

#include "common/result.h"
#include "profile/profile.h"
#include "report/frames.h"
#include "report/views.h"

namespace ljprof::report {

struct OutputOptions {
  std::string pprof_path;       // -o: gzip pprof; "" = none
  std::string folded_path;      // --folded: folded stacks; "-" = stdout; "" = none
  std::string flamegraph_path;  // --flamegraph: .svg => SVG, else HTML; "" = none
  // --speedscope: the timeline as a speedscope file (report/speedscope.h); "" = none. Needs a
  // profile with a timeline (record keeps one when asked).
  std::string speedscope_path;
  // --firefox: the timeline as `perf script` text for the Firefox Profiler
  // (report/perf_script.h); "" = none. Needs a timeline like speedscope_path.
  std::string firefox_path;
  size_t top = 0;                   // --top N: table of the N hottest functions; 0 = none
  std::ostream* top_out = nullptr;  // where the table goes; nullptr = std::cout
  // --group-by: a frame per group at the root end of the folded stacks and the flame graph
  // (report/frames.h); the pprof file and the top table are not affected.
  GroupBy group_by = GroupBy::None;
  // --value: what the folded stacks, flame graph and top table weigh stacks by (report/views.h);
  // unset: views.h default_value. The pprof file always has every value.
  std::optional<ProfileValue> value;

  bool any() const {
    return !pprof_path.empty() || !folded_path.empty() || !flamegraph_path.empty() ||
           !speedscope_path.empty() || !firefox_path.empty() || top > 0;
  }
};

// Writes each requested output; stops at, and returns, the first failure.
Status write_outputs(const profile::Profile& profile, const OutputOptions& options);

}  // namespace ljprof::report
