// Core mode's output: what `ljprof core` prints for a core file, as the JSON document of the
// golden format (README "ljprof core --json") and as text, built in one place so the command and
// the core fuzzer (fuzz/core_fuzzer.cc) write the same thing.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/core_file.h"
#include "core/core_walk.h"

namespace ljprof::report {

struct CoreReportOptions {
  std::string core_name;    // the "core" field: the core file as the user named it
  bool all_fibers = false;  // also every other coroutine's Lua frames (--all-fibers)
};

// Both forms of the report. Every string in them is printable text (common/printable.h): the
// frames are (symbolize::frames_of_walk), and so are the paths, reasons and diagnostics of the
// core itself, which quote the core's bytes too (a mapped file's path is the NT_FILE note's).
struct CoreReport {
  nlohmann::ordered_json json;
  std::string text;  // the warnings (files not used, no LuaJIT layout), then every stack
};

// Walks every thread of `core` (and with all_fibers its coroutines) with `walker`.
CoreReport core_report(const core::CoreFile& core, const core::CoreWalker& walker,
                       const CoreReportOptions& options);

}  // namespace ljprof::report
