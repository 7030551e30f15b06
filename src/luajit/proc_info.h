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

#include "cfi/cfi.h"
#include "common/result.h"
#include "elf/elf_file.h"
#include "luajit/matchers.h"
#include "luajit/runtime.h"

extern "C" {
#include "walker/luajit_info.h"
}

namespace ljprof::luajit {

// One extracted value. `source` names the rule: a function whose code was matched
// ("lua_close", "exit-handler", "vm-entry", "BC_JLOOP", "lj_BC_FUNCC", "vm_exit_interp",
// "lua_tolstring", "lua_gettop", "cfi"), "fallback", or "layout rule <header> <struct>".
struct Field {
  std::string name;  // stable key, e.g. "global_State.cur_L"
  int64_t value = 0;
  std::string source;
  std::vector<Evidence> evidence;
  // Why an optional second source for this value could not be compared (its symbol is absent
  // or its pattern did not match); empty when it was compared or none exists. A second source
  // that disagrees fails the extraction instead.
  std::string not_cross_checked;
};

struct VmInterval {
  uint64_t begin = 0;
  uint64_t end = 0;
  std::string source;  // "symbols lj_vm_asm_begin..lj_vm_ffi_call" / "interpreter FDE"
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
  std::optional<cfi::VmCframe> vm_cframe;  // the VM C frame from the CFI (when derivable)
  std::vector<Field> fields;

  const Field* field(std::string_view name) const;
  // The value of a field that extraction always fills (throws nothing: 0 when absent).
  int64_t value(std::string_view name) const;
};

// Field names, in the order extract_proc_info fills them.
namespace field {
inline constexpr std::string_view kGc64 = "LJ_GC64";
inline constexpr std::string_view kGVmstate = "global_State.vmstate";
inline constexpr std::string_view kGCurL = "global_State.cur_L";
inline constexpr std::string_view kGJitBase = "global_State.jit_base";
inline constexpr std::string_view kGDispatch = "GG_State.dispatch-g";
inline constexpr std::string_view kGJitTrace = "G->J->trace";
inline constexpr std::string_view kGGcRoot = "global_State.gc.root";
inline constexpr std::string_view kCframePrev = "CFRAME_OFS_PREV";
inline constexpr std::string_view kCframeSize = "CFRAME_SIZE";
inline constexpr std::string_view kCframeL = "CFRAME_OFS_L";
inline constexpr std::string_view kCframePc = "CFRAME_OFS_PC";
inline constexpr std::string_view kVmstInterp = "vmstate.INTERP";
inline constexpr std::string_view kVmstLfunc = "vmstate.LFUNC";
inline constexpr std::string_view kVmstFfunc = "vmstate.FFUNC";
inline constexpr std::string_view kVmstC = "vmstate.C";
inline constexpr std::string_view kVmstGc = "vmstate.GC";
inline constexpr std::string_view kVmstExit = "vmstate.EXIT";
inline constexpr std::string_view kLGlref = "lua_State.glref";
inline constexpr std::string_view kLBase = "lua_State.base";
inline constexpr std::string_view kLTop = "lua_State.top";
inline constexpr std::string_view kLStatus = "lua_State.status";
inline constexpr std::string_view kLMaxstack = "lua_State.maxstack";
inline constexpr std::string_view kLStack = "lua_State.stack";
inline constexpr std::string_view kLCframe = "lua_State.cframe";
inline constexpr std::string_view kStrLen = "GCstr.len";
inline constexpr std::string_view kStrData = "sizeof(GCstr)";
inline constexpr std::string_view kFnFfid = "GCfunc.ffid";
inline constexpr std::string_view kFnPc = "GCfunc.pc";
inline constexpr std::string_view kFnCfunc = "GCfuncC.f";
inline constexpr std::string_view kPtSizebc = "GCproto.sizebc";
inline constexpr std::string_view kPtChunkname = "GCproto.chunkname";
inline constexpr std::string_view kPtFirstline = "GCproto.firstline";
inline constexpr std::string_view kPtNumline = "GCproto.numline";
inline constexpr std::string_view kPtLineinfo = "GCproto.lineinfo";
inline constexpr std::string_view kPtSize = "sizeof(GCproto)";
inline constexpr std::string_view kPtK = "GCproto.k";
inline constexpr std::string_view kPtSizekgc = "GCproto.sizekgc";
inline constexpr std::string_view kPtUvinfo = "GCproto.uvinfo";
inline constexpr std::string_view kPtVarinfo = "GCproto.varinfo";
inline constexpr std::string_view kTrSzmcode = "GCtrace.szmcode";
inline constexpr std::string_view kTrMcode = "GCtrace.mcode";
inline constexpr std::string_view kTrTraceno = "GCtrace.traceno";
inline constexpr std::string_view kTrStartpt = "GCtrace.startpt";
}  // namespace field

// LuaJIT's VM interval in `file`: lj_vm_asm_begin .. the end of lj_vm_ffi_call when the symbols
// exist (checked against the interpreter FDE when both are there), else the interpreter FDE.
// Every command that shows or uses the VM interval (inspect, cfi, core, record) takes it from
// here, so they agree.
Result<VmInterval> find_vm_interval(const elf::ElfFile& file);

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
Status check_cframe_against_cfi(elf::Arch arch, int64_t prev_offset, const cfi::VmCframe& cf);

// The plain C record the walker consumes.
lj_luajit_info to_walker_info(const LuaJITProcInfo& info);

// DWARF register number of a canonical register (x86-64 r14 -> 14, AArch64 x22 -> 22).
uint8_t dwarf_register(elf::Arch arch, int canonical_reg);

}  // namespace ljprof::luajit
