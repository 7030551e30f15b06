// cli/output_options.h: the output options `ljprof record` and `ljprof report` share (how folded
// stacks and the flame graph group stacks), declared and checked once.
#pragma once

#include <optional>
#include <string>

#include "cli/command_line.h"
#include "common/result.h"
#include "report/frames.h"
#include "report/views.h"

namespace ljprof::cli {

// --group-by fiber|none into `group_by`, with the help text both commands show.
void add_group_by_option(Command& cmd, std::string& group_by);

// The grouping `text` names ("" and "none": none); an error naming the value otherwise.
Result<report::GroupBy> parse_group_by(const std::string& text);

// --value cpu|off_cpu into `value`, with the help text both commands show.
void add_value_option(Command& cmd, std::string& value);

// The value `text` names; unset for ""; an error naming the value otherwise.
Result<std::optional<report::ProfileValue>> parse_value(const std::string& text);

}  // namespace ljprof::cli
