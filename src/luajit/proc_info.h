// LuaJITProcInfo: everything ljprof learned about one LuaJIT build (a binary that links
// LuaJIT in, or a libluajit), each value with where it came from: the matched instructions
// (function, address, bytes) or the LuaJIT layout rule (header + struct) it reflects.
//
// extract_proc_info reads the values from the binary's machine code (matchers.h) and fails
// closed when a required pattern does not match or two sources disagree.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "elf/elf_file.h"
#include "luajit/layout.h"
#include "luajit/matchers.h"
#include "luajit/runtime.h"
#include "luajit/vm_cfi.h"

namespace ljprof::luajit {

// One extracted value. `source` names the rule: a function whose code was matched
// ("lua_close", "exit-handler", "vm-entry", "BC_JLOOP", "lj_BC_FUNCC", "vm_exit_interp",
// "lua_tolstring", "lua_gettop", "cfi"), "fallback", or "layout rule <header> <struct>".
struct Field {
  FieldId id{};
  std::string name;  // stable key, e.g. "global_State.cur_L" (field_name(id))
  int64_t value = 0;
  std::string source;
  std::vector<Evidence> evidence;
  // Why an optional second source for this value could not be compared (its symbol is absent
  // or its pattern did not match); empty when it was compared or none exists. A second source
  // that disagrees fails the extraction instead.
  std::string not_cross_checked;
};

enum class VmstateNumbering { Upstream, Tarantool };
const char* vmstate_numbering_name(VmstateNumbering n);  // "upstream", "tarantool"

struct LuaJITProcInfo {
  std::string path;
  Runtime runtime = Runtime::None;
  elf::Arch arch = elf::Arch::X86_64;
  bool gc64 = false;
  uint8_t ref_size = 0;  // 8 (GC64) or 4
  VmInterval vm;
  int dispatch_reg = kNoReg;   // canonical register (disasm.h)
  bool dispatch_is_g = false;  // AArch64 GL
  VmstateNumbering numbering = VmstateNumbering::Upstream;
  std::optional<VmCframe> vm_cframe;  // the VM C frame from the CFI (when derivable)
  std::vector<Field> fields;          // in FieldId order; every required field is present

  const Field* field(std::string_view name) const;
  const Field* field(FieldId id) const;
  // The value of a field that extraction guarantees (field_required); 0 when absent.
  int64_t value(std::string_view name) const;
};

// LuaJIT's VM interval in `file`: lj_vm_asm_begin .. the end of lj_vm_ffi_call when the symbols
// exist (checked against the interpreter FDE when both are there), else the interpreter FDE.
// Every command that shows or uses the VM interval (inspect, cfi, core, record) takes it from
// here, so they agree.
Result<VmInterval> find_vm_interval(const elf::ElfFile& file);

// Whether return address `link_return_address` (link-time) is in lj_vm_ffi_call
// (vm_x64.dasc / vm_arm64.dasc), the VM's trampoline for FFI calls from the interpreter
// (lj_ccall_func -> lj_vm_ffi_call -> the C function). buildvm emits its FDE right after the
// interpreter's, starting where that one ends (readelf: tarantool 0x5eec52, luajit 0x74525,
// arm64 luajit 0x6ecdc, OpenResty libluajit 0xde92), so it is found without a symbol.
bool is_ffi_call_return(const cfi::UnwindTable& table, const VmInterval& vm,
                        uint64_t link_return_address);

// Extracts the LuaJITProcInfo of a file that links LuaJIT in (tarantool, luajit, libluajit).
// `runtime` decides the jit_base policy: Tarantool must match the exit handler.
Result<LuaJITProcInfo> extract_proc_info(const elf::ElfFile& file, Runtime runtime);
// Same, with the runtime detected from the file (detect_runtime).
Result<LuaJITProcInfo> extract_proc_info(const elf::ElfFile& file);

// jit_base policy (issue rule): the exit-handler store wins; without it, cur_L + pointer
// size is allowed only for non-Tarantool runtimes (Tarantool >= 2.6.3 puts mem_L there).
Result<Field> choose_jit_base(Runtime runtime, const Result<ExitHandlerMatch>& exit_handler,
                              int64_t g_offset_of_exit_disp0, int64_t cur_L, uint8_t ref_size);

// Which LJ_VMST_* numbering the stored INTERP / C-or-CFUNC / EXIT values belong to (lj_obj.h:
// upstream INTERP, C, GC, EXIT; Tarantool >= 2.6.3 INTERP, LFUNC, FFUNC, CFUNC, GC, EXIT).
Result<VmstateNumbering> classify_vmstate_numbering(int32_t interp, int32_t c_or_cfunc,
                                                    int32_t exit);

// Checks the C-frame link slot against the CFI frame size (x86-64: SAVE_CFRAME is the slot
// right below the four callee-saved pushes and the return address, so prev == size - 48:
// 80 <-> 32, 96 <-> 48; AArch64: the link is at sp+0 and the CFA is x29-based).
Status check_cframe_against_cfi(elf::Arch arch, int64_t prev_offset, const VmCframe& cf);

// The plain C record the walker consumes: every layout field into its member (luajit_info.h).
// Fails when a field the build needs is absent or a value does not fit its member.
Result<lj_luajit_info> to_walker_info(const LuaJITProcInfo& info);

// Fails unless every field that `info`'s architecture and numbering need is present exactly
// once.
Status check_fields_complete(const LuaJITProcInfo& info);

// DWARF register number of a canonical register (x86-64 r14 -> 14, AArch64 x22 -> 22).
uint8_t dwarf_register(elf::Arch arch, int canonical_reg);

}  // namespace ljprof::luajit
