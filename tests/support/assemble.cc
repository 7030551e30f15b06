#include "support/assemble.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "support/test_support.h"

namespace ljprof::test {

std::vector<uint8_t> assemble(elf::Arch arch, const std::string& source) {
  char dir[] = "/tmp/ljprof-asm-XXXXXX";
  if (mkdtemp(dir) == nullptr) {
    ADD_FAILURE() << "mkdtemp failed";
    return {};
  }
  const std::string d = dir;
  {
    std::ofstream out(d + "/in.s");
    if (arch == elf::Arch::X86_64) out << ".intel_syntax noprefix\n";
    out << ".text\n" << source << "\n";
  }
  const std::string as = arch == elf::Arch::X86_64 ? "as" : "aarch64-linux-gnu-as";
  const std::string objcopy = arch == elf::Arch::X86_64 ? "objcopy" : "aarch64-linux-gnu-objcopy";
  CommandResult a = run({as, "-o", d + "/in.o", d + "/in.s"});
  std::vector<uint8_t> bytes;
  if (a.exit_code != 0) {
    ADD_FAILURE() << as << " failed: " << a.err << "\n" << source;
  } else {
    CommandResult c = run({objcopy, "-O", "binary", "-j", ".text", d + "/in.o", d + "/in.bin"});
    if (c.exit_code != 0) {
      ADD_FAILURE() << objcopy << " failed: " << c.err;
    } else {
      bytes = read_file(d + "/in.bin");
    }
  }
  for (const char* f : {"/in.s", "/in.o", "/in.bin"}) std::remove((d + f).c_str());
  rmdir(dir);
  return bytes;
}

}  // namespace ljprof::test
