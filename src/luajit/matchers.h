// Instruction-pattern matchers that read LuaJIT structure offsets out of a binary's own
// machine code (x86-64 and AArch64, decoded by disasm/disasm.h).
//
// Each matcher gets the decoded instructions of one function (or of the whole VM interval
// when the binary is stripped) and either returns every value it matched together with the
// instructions that prove it (address + bytes), or fails closed with a message naming the
// function, the offset it reached and the pattern it expected. Patterns are described by
// data flow (which register is loaded from where and stored to where), not by fixed bytes,
// so a different register allocation or displacement in another build still matches, while
// a store through the wrong base register, a non-zero store or a positive DISPATCH
// displacement does not.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/result.h"
#include "disasm/disasm.h"
#include "elf/elf_file.h"

namespace ljprof::luajit {

// The matchers speak the disassembler's vocabulary.
using disasm::hex_bytes;
using disasm::Insn;
using disasm::InsnKind;
using disasm::kA64Sp;
using disasm::kA64Zr;
using disasm::kNoReg;
using disasm::kX86Rdi;
using disasm::kX86Rip;
using disasm::kX86Rsi;
using disasm::kX86Rsp;
using disasm::Operand;
using disasm::register_name;

// One instruction that proves a value.
struct Evidence {
  std::string function;  // symbol, or a description of the searched range
  uint64_t address = 0;
  std::string bytes;  // hex
  std::string text;   // disassembly
  std::string role;   // what this instruction shows, e.g. "g->cur_L = NULL"
};

// A decoded range to match in.
struct Code {
  elf::Arch arch = elf::Arch::X86_64;
  std::string function;  // "lua_close", "lj_vm_exit_handler", "VM interval [0x8d70, 0xcdb5)"
  std::span<const Insn> insns;
};

Evidence evidence_of(const Code& code, const Insn& insn, std::string role);

// The decoded code of the function symbol `name` of `file`: its symbol's size, or
// kUnsizedFunctionBytes for an unsized one (fewer near the end of its segment). Fails on a
// missing symbol, one over DisasmLimits::kMaxFunctionBytes, or unreadable code.
struct DecodedFunction {
  std::vector<Insn> insns;
  Code code() const { return Code{arch, name, insns}; }
  elf::Arch arch = elf::Arch::X86_64;
  std::string name;
};
inline constexpr uint64_t kUnsizedFunctionBytes = 1024;
Result<DecodedFunction> decode_symbol(const elf::ElfFile& file, const char* name);

// lua_close (lj_api.c): `g = G(L)` loads L->glref, then the first zero store through g is
// `setgcrefnull(g->cur_L)`. The glref load width is the MRef width: 8 bytes means GC64.
struct LuaCloseMatch {
  int64_t glref_offset = 0;  // lua_State.glref
  uint8_t ref_width = 0;     // 4 (non-GC64) or 8 (GC64)
  int64_t cur_L = 0;         // global_State.cur_L
  Evidence glref_load;
  Evidence cur_L_store;
};
Result<LuaCloseMatch> match_lua_close(const Code& code);

// lj_vm_exit_handler (vm_x64.dasc / vm_x86.dasc / vm_arm64.dasc, ->vm_exit_handler):
//   L = [D + cur_L]; BASE = [D + jit_base]; L->base = BASE; ... [D + jit_base] = 0;
//   call lj_trace_exit; rcx/x1 = L->cframe; and ..., -4 (CFRAME_RAWMASK)
// preceded by `set_vmstate EXIT` (a negative constant stored to [D + vmstate]).
// D is the DISPATCH register on x86-64 (displacements are negative: global_State lies
// before the dispatch table in GG_State) and GL = G itself on AArch64 (non-negative
// displacements). When `code` is the whole VM interval exactly one site must match.
struct ExitHandlerMatch {
  int dispatch_reg = kNoReg;
  uint8_t ref_width = 0;  // width of the jit_base / cur_L accesses
  int64_t vmstate = 0;    // displacements from the DISPATCH/GL register
  int64_t cur_L = 0;
  int64_t jit_base = 0;
  int32_t exit_state = 0;  // the stored ~LJ_VMST_EXIT
  int64_t L_base = 0;      // lua_State.base
  int64_t L_cframe = 0;    // lua_State.cframe
  // After `sp = L->cframe & ~3` the handler re-reads the C frame: `SAVE_L = L` and
  // `PC = SAVE_PC` (lj_frame.h CFRAME_OFS_L / CFRAME_OFS_PC); -1 when not seen.
  int64_t cframe_L = -1;
  int64_t cframe_PC = -1;
  uint64_t site = 0;  // address of the jit_base clear
  std::vector<Evidence> evidence;
};
Result<ExitHandlerMatch> match_exit_handler(const Code& code);

// ->vm_exit_interp: `[D + jit_base] = 0` not followed by a call, then `set_vmstate INTERP`.
struct StateStoreMatch {
  int32_t state = 0;  // the stored ~LJ_VMST_x
  size_t sites = 0;
  std::vector<Evidence> evidence;
};
Result<StateStoreMatch> match_exit_interp(const Code& code, int dispatch_reg, int64_t jit_base,
                                          int64_t vmstate);

// lj_BC_FUNCC / FUNCCW: `set_vmstate C` (upstream) or `set_vmstate CFUNC` (Tarantool) right
// before the indirect call of the C function. Every such site must store the same value.
Result<StateStoreMatch> match_c_call_state(const Code& code, int dispatch_reg, int64_t vmstate);

// VM entry (->vm_resume / vm_pcall / vm_call / vm_cpcall): the DISPATCH/GL register is loaded
// from L->glref; on x86-64 it is then advanced by `add D, GG_G2DISP` (the G->dispatch
// distance). Every entry site must agree.
struct DispatchSetupMatch {
  int dispatch_reg = kNoReg;
  bool register_is_g = false;     // AArch64 GL
  int64_t dispatch_distance = 0;  // GG_OFS(dispatch) - GG_OFS(g)
  size_t sites = 0;
  std::vector<Evidence> evidence;
};
Result<DispatchSetupMatch> match_dispatch_setup(const Code& code, int64_t glref_offset,
                                                uint8_t ref_width);

// VM entry: `prev = L->cframe; [sp + CFRAME_OFS_PREV] = prev; L->cframe = sp` (lj_frame.h
// CFRAME_OFS_PREV; vm_*.dasc `mov SAVE_CFRAME, KBASE`). Every site must agree.
struct CframeLinkMatch {
  int64_t prev_offset = 0;
  size_t sites = 0;
  std::vector<Evidence> evidence;
};
Result<CframeLinkMatch> match_cframe_link(const Code& code, int64_t L_cframe);

// BC_JLOOP: `T = J->trace[RD]; jmp T->mcode`: three dependent loads ending in an indirect
// jump; the first is DISPATCH/GL-relative.
struct JloopMatch {
  int64_t trace_array = 0;  // displacement of J->trace from the DISPATCH/GL register
  int64_t trace_mcode = 0;  // GCtrace.mcode
  uint8_t trace_ref_width = 0;
  std::vector<Evidence> evidence;
};
Result<JloopMatch> match_jloop(const Code& code, int dispatch_reg);

// lj_cf_jit_util_traceinfo (lib_jit.c, jit_checktrace inlined): `G = G(L)` from L->glref,
// then `J->trace` loaded through G and indexed by the trace number. Used (when the symbol
// exists) to confirm the BC_JLOOP value.
struct TraceinfoMatch {
  int64_t trace_array = 0;  // G-relative offset of J->trace
  std::vector<Evidence> evidence;
};
Result<TraceinfoMatch> match_traceinfo(const Code& code, int64_t glref_offset, uint8_t ref_width);

// lua_tolstring (lj_api.c): `*len = s->len; return strdata(s);` — a 4-byte load of
// [s + len] followed by return-register = s + sizeof(GCstr) and a return.
struct TolstringMatch {
  int64_t len_offset = 0;
  int64_t data_offset = 0;  // sizeof(GCstr): where the characters start
  std::vector<Evidence> evidence;
};
Result<TolstringMatch> match_tolstring(const Code& code);

// lua_gettop (lj_api.c): `return (int)(L->top - L->base);`
struct GettopMatch {
  int64_t top_offset = 0;
  int64_t base_offset = 0;
  std::vector<Evidence> evidence;
};
Result<GettopMatch> match_gettop(const Code& code);

// lj_gc.c lj_mem_newgco: `setgcrefr(o->gch.nextgc, g->gc.root); setgcref(g->gc.root, o)` —
// a ref-width load of [G + D], its store to [o + 0] (GCHeader.nextgc), then o stored back to
// [G + D]. D is global_State.gc.root, the head of the list of every GC object but strings.
struct GcRootMatch {
  int64_t root_offset = 0;
  std::vector<Evidence> evidence;
};
Result<GcRootMatch> match_gc_root(const Code& code, uint8_t ref_width);

}  // namespace ljprof::luajit
