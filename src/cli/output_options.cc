#include "cli/output_options.h"

#include <fmt/format.h>

#include "common/printable.h"

namespace ljprof::cli {

void add_group_by_option(Command& cmd, std::string& group_by) {
  cmd.option("--group-by", group_by,
             "'fiber': folded stacks and the flame graph start each stack that ran on a "
             "Tarantool fiber with a frame 'fiber:NAME' (its 'fiber' label; 'fiber:#ID' when "
             "the fiber has no name) as the outermost frame, before the thread's root frame, "
             "so every fiber is one group; fibers that share a name share the group. Samples "
             "without a fiber get "
             "no extra frame. The top table gets one section per fiber (\"(no fiber)\" for the "
             "rest), the fibers with most samples first. 'none' (default): stacks as they "
             "are")
      .type_name("fiber|none");
}

Result<report::GroupBy> parse_group_by(const std::string& text) {
  if (text == "fiber") return report::GroupBy::Fiber;
  if (text.empty() || text == "none") return report::GroupBy::None;
  return make_error("--group-by {}: expected 'fiber' or 'none'", printable_text(text));
}

void add_value_option(Command& cmd, std::string& value) {
  cmd.option("--value", value,
             "What the folded stacks, flame graph and top table weigh stacks by: 'cpu' (samples "
             "on the CPU), 'off_cpu' (microseconds off the CPU, from record --off-cpu; the "
             "event loop's idle wait left out) or 'space' (bytes of a heap profile, from ljprof "
             "heap -o). Default: space for a heap profile, off_cpu for a profile with off-CPU "
             "time and no CPU sample, else cpu. The pprof file always has every value")
      .type_name("cpu|off_cpu|space");
}

Result<std::optional<report::ProfileValue>> parse_value(const std::string& text) {
  if (text.empty()) return std::optional<report::ProfileValue>();
  auto value = report::parse_profile_value(printable_text(text));
  if (!value.ok()) return value.error();
  return std::optional<report::ProfileValue>(*value);
}

}  // namespace ljprof::cli
