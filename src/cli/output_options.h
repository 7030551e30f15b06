// cli/output_options.h: the output options `ljprof record` and `ljprof report` share (how folded
// stacks and the flame graph group stacks), declared and checked once.
#pragma once

#include <string>

#include "cli/command_line.h"
#include "common/result.h"
#include "report/frames.h"

namespace ljprof::cli {

// --group-by fiber|none into `group_by`, with the help text both commands show.
void add_group_by_option(Command& cmd, std::string& group_by);

// The grouping `text` names ("" and "none": none); an error naming the value otherwise.
Result<report::GroupBy> parse_group_by(const std::string& text);

}  // namespace ljprof::cli
