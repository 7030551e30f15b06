// The LuaJIT VM in a file's CFI. LuaJIT describes its whole interpreter with one large FDE
// (personality lj_err_unwind_dwarf) whose one blanket row holds only while the VM's C frame is
// set up; this turns that knowledge, and Tarantool's fiber roots, into cfi::Overlay ranges for
// the walker table (cfi/ itself knows no runtime), and reads the VM C-frame geometry back from
// the table.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cfi/cfi.h"
#include "cfi/table_cache.h"
#include "common/result.h"
#include "disasm/disasm.h"
#include "elf/elf_file.h"

namespace ljprof::luajit {

struct VmInterval {
  uint64_t begin = 0;
  uint64_t end = 0;
  std::string source;  // "symbols lj_vm_asm_begin..lj_vm_ffi_call" / "interpreter FDE"
};

// The interpreter FDE in .eh_frame: the one FDE with a personality, at least
// kMinInterpreterBytes long, whose CFA rule at its start is the VM's (x86-64: rsp + const;
// AArch64: x29 + 16 or sp + const). Fails when none or more than one qualifies (ambiguous),
// naming the candidates. When the file has `lj_vm_asm_begin`, the FDE must start there.
constexpr uint64_t kMinInterpreterBytes = 4096;
Result<cfi::FdeSummary> find_interpreter_fde(const elf::ElfFile& file);

// Every overlay of `file`'s walker table, for cfi::build_unwind_table. Over the VM interval
// `vm` (when given): the interpreter FDE's Ok rows become Keep, then the sub-ranges where its
// blanket row is wrong are replaced (vm_subranges.h). Anywhere: Tarantool's arm64 fiber
// trampoline `coro_startup` becomes a Stop root. `vm_code`: the VM interval already decoded
// (disasm::disassemble_range over [vm->begin, vm->end)) when the caller has it; decoded here
// when empty.
std::vector<cfi::Overlay> unwind_overlays(const elf::ElfFile& file,
                                          const std::optional<VmInterval>& vm,
                                          std::span<const disasm::Insn> vm_code = {});

// The same with the VM interval of find_vm_interval (proc_info.h), none when it fails: what
// every command that builds a walker table (cfi, core, record, inspect) passes, so they agree.
struct UnwindOverlays {
  std::optional<VmInterval> vm;
  std::vector<cfi::Overlay> overlays;
};
UnwindOverlays unwind_overlays(const elf::ElfFile& file);

// The walker table of `file` as `core` and `record` use it: its CFI with unwind_overlays applied,
// read from `tables` when that holds one for this build of this file, else built and stored
// there (a store that fails costs only the next run's time; TableCache counts it). `tables` may
// be null.
Result<cfi::UnwindTable> walker_table(const elf::ElfFile& file, cfi::TableCache* tables);

// How to step from a pc inside the VM/JIT C frame to its native caller.
struct VmCframe {
  elf::Arch arch = elf::Arch::X86_64;
  uint64_t vm_begin = 0;
  uint64_t vm_end = 0;
  uint8_t cfa_base = LJ_CFI_REG_SP;  // LJ_CFI_REG_SP (x86-64: CFA = rsp + frame size) or FP
  int32_t cfa_offset = 0;            // x86-64: the C frame size (CFRAME_SIZE), e.g. 80
  uint8_t ra_rule = LJ_CFI_RULE_AT_CFA;
  int32_t ra_offset = 0;  // caller's PC at CFA + ra_offset
  uint8_t fp_rule = LJ_CFI_RULE_SAME;
  int32_t fp_offset = 0;            // caller's FP at CFA + fp_offset (when AT_CFA)
  uint64_t fde_section_offset = 0;  // the FDE the rule came from
  uint64_t covered_bytes = 0;       // bytes of [vm_begin, vm_end) governed by this rule
};

// The rule governing most of [vm_begin, vm_end) among the table's Ok/Keep rows. Fails when
// the interval has no such row, or its rule is not SP/FP + offset with the RA in memory.
Result<VmCframe> derive_vm_cframe(const cfi::UnwindTable& table, uint64_t vm_begin,
                                  uint64_t vm_end);

// {"vm_begin","vm_end","cfa":"rsp+80","cfa_base":"sp","cfa_offset":80,"ra":"cfa-8",
//  "fp":"cfa-16","fde_offset","covered_bytes"} with register names of the cframe's arch.
nlohmann::ordered_json to_json(const VmCframe& cframe);

}  // namespace ljprof::luajit
