#include "luajit/asm_support.h"

#include <gtest/gtest.h>

namespace ljprof::test {

Assembled assemble_code(elf::Arch arch, const std::string& source, uint64_t address) {
  Assembled a;
  a.arch = arch;
  a.bytes = assemble(arch, source);
  auto insns = disasm::disassemble(arch, a.bytes, address);
  if (!insns.ok()) {
    ADD_FAILURE() << insns.message();
  } else {
    a.insns = std::move(*insns);
  }
  return a;
}

}  // namespace ljprof::test
