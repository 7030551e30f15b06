// Assembles instruction text with GNU as (x86-64 Intel syntax, or aarch64-linux-gnu-as) so the
// byte-level matcher tests are written as the documented instruction forms, encoded by an
// outside assembler rather than by hand.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "elf/elf_file.h"
#include "luajit/disasm.h"
#include "luajit/matchers.h"

namespace ljprof::test {

// The .text bytes of `source`; fails the current test (and returns empty) when as fails.
std::vector<uint8_t> assemble(elf::Arch arch, const std::string& source);

// Decoded instructions of `source`, placed at `address`, kept alive by the object.
struct Assembled {
  elf::Arch arch = elf::Arch::X86_64;
  std::vector<uint8_t> bytes;
  std::vector<luajit::Insn> insns;
  luajit::Code code(const std::string& name = "synthetic") const {
    return luajit::Code{arch, name, insns};
  }
};
Assembled assemble_code(elf::Arch arch, const std::string& source, uint64_t address = 0x10000);

}  // namespace ljprof::test
