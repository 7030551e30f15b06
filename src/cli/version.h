// cli/version.h: what `ljprof --version` says: the release, the git commit it was built from and
// the build-id of the running executable — enough to tell two builds of one version apart in a
// bug report.
#pragma once

#include <string>

namespace ljprof::cli {

// `git describe --always --dirty` of the source tree at build time (cmake/version_info.cmake).
extern const char* const kGitCommit;

// "ljprof VERSION\ncommit COMMIT\nbuild-id HEX" (build-id of /proc/self/exe; "unknown" when it
// cannot be read).
std::string version_text();

}  // namespace ljprof::cli
