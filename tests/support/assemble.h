// Assembles instruction text with GNU as (x86-64 Intel syntax, or aarch64-linux-gnu-as), so
// byte-level tests are written as the documented instruction forms, encoded by an outside
// assembler rather than by hand.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "elf/elf_file.h"

namespace ljprof::test {

// The .text bytes of `source`; fails the current test (and returns empty) when as fails.
std::vector<uint8_t> assemble(elf::Arch arch, const std::string& source);

}  // namespace ljprof::test
