// The LuaJIT VM's sub-ranges whose blanket CFI row is wrong (vm_subranges.cc), for
// unwind_overlays (vm_cfi.h).
#pragma once

#include <vector>

#include "cfi/cfi.h"
#include "elf/elf_file.h"
#include "luajit/vm_cfi.h"

namespace ljprof::luajit {

// Replace overlays, sorted by begin, for the VM interval `vm` whose interpreter FDE has the
// blanket row `blanket` (hint Keep): from symbols where present, Capstone patterns otherwise.
// Empty when the VM cannot be decoded (unreadable, over the disassembler's cap).
std::vector<cfi::Overlay> detect_vm_subranges(const elf::ElfFile& file, const VmInterval& vm,
                                              const lj_cfi_row& blanket);

}  // namespace ljprof::luajit
