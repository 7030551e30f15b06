// report/write_file.h: how every writer of report/ puts a whole output in a file.
#pragma once

#include <string>
#include <string_view>

#include "common/result.h"

namespace ljprof::report {

// Creates or truncates `path` and writes `bytes`; an error names the path and the errno, also
// when only the final flush fails (a full disk shows up at close, not at write).
Status write_file(const std::string& path, std::string_view bytes);

}  // namespace ljprof::report
