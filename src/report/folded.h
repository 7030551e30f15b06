// report/folded.h: Brendan Gregg's folded stacks, the input of flamegraph.pl, speedscope,
// inferno and most flame graph tools: one line per distinct stack, frames root first joined
// by ';', a space, the sample count.
#pragma once

#include <ostream>
#include <string>

#include "common/result.h"
#include "profile/profile.h"
#include "report/frames.h"

namespace ljprof::report {

// Frame text is frame_label() (report/frames.h), e.g.
//   main [root];lua_pcall;handler (app.lua:12);string.gsub [cfunc];[trace 3] (app.lua:40) 7
// Made safe for the format: ';' (the frame separator) becomes ':'; line breaks and other
// control characters cannot occur, labels being printable text (common/printable.h writes them
// as \xNN). Tools split lines on '\n' and take the count after the last space, so spaces in
// labels are fine. Stacks whose text is equal merge; lines are sorted bytewise so
// the output is deterministic. Samples with no frames or count <= 0 are left out.
// GroupBy::Fiber starts the line of a sample that ran on a fiber with fiber_group_label()
// (report/frames.h), escaped like a frame: "fiber:worker;main [root];... 7".
std::string folded_text(const profile::Profile& profile, GroupBy group_by = GroupBy::None);
void write_folded(const profile::Profile& profile, std::ostream& out,
                  GroupBy group_by = GroupBy::None);
Status write_folded(const profile::Profile& profile, const std::string& path,
                    GroupBy group_by = GroupBy::None);  // "-" = stdout

// frame_label() with the escaping above applied.
std::string folded_frame(const profile::Frame& frame);

}  // namespace ljprof::report
