// The LuaJIT VM's sub-ranges whose blanket CFI row is wrong (vm_subranges.cc), for
// unwind_overlays (vm_cfi.h).
#pragma once

#include <span>
#include <vector>

#include "cfi/cfi.h"
#include "disasm/disasm.h"
#include "elf/elf_file.h"
#include "luajit/vm_cfi.h"

namespace ljprof::luajit {

// Replace overlays, sorted by begin, for the VM interval `vm` whose interpreter FDE has the
// blanket row `blanket` (hint Keep): from symbols where present, Capstone patterns otherwise.
// `code` is the interval decoded (disasm::disassemble_range over [vm.begin, vm.end)); empty when
// it could not be (unreadable, over the disassembler's cap), and then so is the result.
std::vector<cfi::Overlay> detect_vm_subranges(const elf::ElfFile& file, const VmInterval& vm,
                                              const lj_cfi_row& blanket,
                                              std::span<const disasm::Insn> code);

}  // namespace ljprof::luajit
