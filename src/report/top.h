// report/top.h: the `go tool pprof -top` table — where the samples are, per function.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "profile/profile.h"

namespace ljprof::report {

struct TopRow {
  std::string name;  // function_label() (report/frames.h)
  profile::FrameKind kind = profile::FrameKind::Native;
  int64_t flat = 0;  // samples whose leaf frame is this function
  int64_t cum = 0;   // samples with this function anywhere in the stack (counted once)
};

// All functions, by flat descending, then cum descending, then name.
std::vector<TopRow> top_rows(const profile::Profile& profile);

// Header line, then `flat flat% sum% cum cum% kind name` for the first `n` rows.
void write_top(const profile::Profile& profile, std::ostream& out, size_t n);

// One top table per Tarantool fiber (report/frames.h fiber_group_label; samples without a fiber
// form the group "(no fiber)"), groups by sample count descending, each under a line
// "== fiber:NAME: K samples, P% of all".
void write_top_by_fiber(const profile::Profile& profile, std::ostream& out, size_t n);

}  // namespace ljprof::report
