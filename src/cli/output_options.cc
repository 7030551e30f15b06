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

}  // namespace ljprof::cli
