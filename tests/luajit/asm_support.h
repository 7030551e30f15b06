// Assembled instruction text (support/assemble.h), decoded for the byte-level matcher tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "disasm/disasm.h"
#include "elf/elf_file.h"
#include "luajit/matchers.h"
#include "support/assemble.h"

namespace ljprof::test {

// Decoded instructions of `source`, placed at `address`, kept alive by the object.
struct Assembled {
  elf::Arch arch = elf::Arch::X86_64;
  std::vector<uint8_t> bytes;
  std::vector<disasm::Insn> insns;
  luajit::Code code(const std::string& name = "synthetic") const {
    return luajit::Code{arch, name, insns};
  }
};
Assembled assemble_code(elf::Arch arch, const std::string& source, uint64_t address = 0x10000);

}  // namespace ljprof::test
