// report/backtrace.h: `ljprof core`'s two views of one frame — the JSON object of the golden
// format (docs: README "ljprof core --json") and the text line, worded as luaL_traceback words
// Lua frames.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "symbolize/frame.h"

namespace ljprof::report {

nlohmann::ordered_json backtrace_frame_json(const symbolize::Frame& frame);
std::string backtrace_frame_text(const symbolize::Frame& frame);

}  // namespace ljprof::report
