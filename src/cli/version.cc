#include "cli/version.h"

#include <fmt/format.h>

#include "elf/elf_file.h"

namespace ljprof::cli {

std::string version_text() {
  std::string build_id = "unknown";
  // The running executable itself (a copy or a package's file: the build-id tells them apart).
  if (auto self = elf::ElfFile::open("/proc/self/exe"); self.ok() && (*self)->build_id()) {
    build_id = *(*self)->build_id();
  }
  return fmt::format("ljprof {}\ncommit {}\nbuild-id {}", LJPROF_VERSION, kGitCommit, build_id);
}

}  // namespace ljprof::cli
