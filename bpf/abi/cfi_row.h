/* cfi_row.h: the compact unwind row the stack walker consumes as-is.
 *
 * Plain C with fixed-size types only: this header is included by the BPF program (kernel
 * build) and by the natively compiled walker (core files). It has no libc dependency; the
 * includer provides uint8_t/int32_t/uint64_t (<stdint.h> natively, vmlinux.h/linux/types.h
 * in BPF).
 *
 * A table is an array of rows sorted by pc_start (strictly increasing). Row i is valid for
 * pcs in [rows[i].pc_start, rows[i+1].pc_start). The last row of a table is always an
 * LJ_CFI_INVALID row at the end of the last FDE, so a binary search that lands on it means
 * "no CFI". Gaps between FDEs are explicit LJ_CFI_INVALID rows.
 *
 * pc_start is a link-time virtual address of the ELF file (p_vaddr based); the walker
 * subtracts the mapping's load bias from the sampled pc before the lookup.
 *
 * Stepping one frame with an LJ_CFI_OK / LJ_CFI_KEEP row, registers of the current frame
 * being sp, fp and pc (x86-64: rsp, rbp, rip; AArch64: sp, x29, pc; plus x30 on AArch64):
 *   cfa       = (cfa_base == LJ_CFI_REG_SP ? sp : fp) + cfa_offset
 *   caller sp = cfa                    (both ABIs define the CFA as the caller's sp)
 *   caller pc = per ra_rule/ra_offset  (x86-64 rip, DWARF reg 16; AArch64 x30, DWARF reg 30)
 *   caller fp = per fp_rule/fp_offset  (x86-64 rbp, DWARF reg 6; AArch64 x29, DWARF reg 29)
 * Offsets are in bytes, signed, already multiplied by the CIE data alignment factor.
 */
#ifndef LJPROF_BPF_ABI_CFI_ROW_H
#define LJPROF_BPF_ABI_CFI_ROW_H

#include "abi/static_assert.h"

/* hint: what the walker may do at a pc covered by this row.
 *
 * LJ_CFI_OK: the rule below is exact: step with it.
 * LJ_CFI_INVALID: no usable rule (no CFI, expression CFA, register-held RA, a malformed FDE,
 *   a VM sub-range with no static rule): stop with "[unknown: no CFI]" rather than guess.
 * LJ_CFI_STOP: proven stack root (_start, clone/clone3 thread start, Tarantool coro_init /
 *   arm64 coro_startup): the stack ends here cleanly.
 * LJ_CFI_KEEP: pc is inside the LuaJIT VM interval; the rule below is exact for this pc (the
 *   blanket VM rule, or the corrected rule of a known VM sub-range), but the walker should
 *   hand over to the LuaJIT frame walk here and use the rule only to step over the VM's C
 *   frame afterwards. Never merged with neighbours. C-callable leaf helpers inside the VM FDE
 *   (lj_vm_floor, lj_vm_cpuid, ..., known by symbol) get LJ_CFI_OK leaf rows instead.
 * LJ_CFI_VM_LEAF: an exact leaf rule (like OK) for a math helper the interpreter calls from a
 *   bytecode handler (vm_x64.dasc `call ->vm_mod`), proven not to write the interpreter's BASE
 *   and PC registers: when the sampled pc is here, the VM frame it returns to still has its
 *   live BASE/PC in the registers, as if the VM itself were the leaf.
 * LJ_CFI_VM_EMPTY: a VM pc whose C frame (at sp, rule below) is already linked in L->cframe
 *   but holds no Lua frame of its own: vm_call/vm_pcall between `mov L->cframe, rsp` and
 *   pushing the callee's frame, vm_cpcall's call of its C function (lj_frame.h: a cframe with
 *   negative nres has no frame). The Lua frames at L->base belong to the next VM frame out:
 *   the walker notes this L and its cframe link, emits nothing, and steps over the frame.
 * LJ_CFI_VM_CUR_L: a VM pc where rsp is not the C frame (the trace exit handler after
 *   lj_trace_exit, BC_JLOOP's `sub rsp` before the trace, vm_exit_interp before `add rsp` or,
 *   GC64, at its `lea rcx, [rsp+16]`):
 *   the C frame is the running lua_State's, G->cur_L->cframe (lj_frame.h CFRAME_RAWMASK);
 *   the walker enters it like a Keep frame there (BASE/PC registers only at the leaf) and
 *   steps over it with the interpreter's blanket rule. The rule below is not used.
 * LJ_CFI_VM_RETURNED: like VM_EMPTY, but the returning frame is being overwritten by its
 *   results and L->base is not updated yet: the caller's base is in the interpreter's PC
 *   register (vm_x64.dasc vm_return after `neg PC`). Valid only for a sampled (leaf) pc.
 * LJ_CFI_VM_EXIT: the trace exit handler before it calls lj_trace_exit (all GPRs pushed, rsp
 *   from the trace): like VM_CUR_L, with the exiting trace's BASE in G->jit_base (in L->base
 *   once the handler has cleared jit_base for the call) and the innermost pc unknown. Valid
 *   only for a sampled (leaf) pc.
 * LJ_CFI_VM_LINK_PENDING: like KEEP, at a call's `str PC, [BASE, FRAME_PC]` (vm_arm64.dasc
 *   ins_call: BC_CALL, BC_CALLM, vm_call_dispatch_f, vmeta_call; vm_x64.dasc `mov [BASE-8], PC`,
 *   vm_x86.dasc `mov [BASE-4], PC`): BASE is already the callee's
 *   and its function slot is written, but its frame link is still in the interpreter's PC
 *   register, not in the stack slot (which holds whatever an earlier frame left there). The
 *   walker takes that frame's link from PC; the callee has not started, so its own pc is
 *   unknown. Valid only for a sampled (leaf) pc.
 * LJ_CFI_VM_CUR_L_SAVED: like VM_CUR_L, where BASE and PC are not in their registers yet but
 *   the running lua_State's L->base and its C frame's saved PC (CFRAME_OFS_PC) hold them: the
 *   trace exit handler after lj_trace_exit returned (lj_trace.c lj_trace_exit restores the
 *   interpreter's state there and stores the pc; vm_x64.dasc vm_exit_handler then loads BASE
 *   and PC from them). The frames are walked as at a return address.
 * LJ_CFI_SIGNAL: a signal trampoline (x86-64 glibc __restore_rt, AArch64 vDSO
 *   __kernel_rt_sigreturn, and the instruction before each that its signal-frame FDE covers for
 *   callers' pc - 1 lookups): the code that calls rt_sigreturn with sp at the frame the kernel
 *   built when the signal arrived. The interrupted thread's registers are in that frame's
 *   `struct sigcontext` (Linux UAPI: arch/x86/include/uapi/asm/sigcontext.h,
 *   arch/arm64/include/uapi/asm/sigcontext.h) at sp + cfa_offset, laid out as ra_rule says
 *   (LJ_CFI_SIGCONTEXT_*); the walker resumes there as at a sampled pc. No other field is used.
 */
#define LJ_CFI_OK 0
#define LJ_CFI_INVALID 1
#define LJ_CFI_STOP 2
#define LJ_CFI_KEEP 3
#define LJ_CFI_VM_LEAF 4
#define LJ_CFI_VM_EMPTY 5
#define LJ_CFI_VM_CUR_L 6
#define LJ_CFI_VM_RETURNED 7
#define LJ_CFI_VM_EXIT 8
#define LJ_CFI_VM_LINK_PENDING 9
#define LJ_CFI_SIGNAL 10
#define LJ_CFI_VM_CUR_L_SAVED 11

/* LJ_CFI_SIGNAL rows' ra_rule: the `struct sigcontext` layout, byte offsets from its start.
 * x86-64: r8..r15, rdi, rsi, rbp, rbx, rdx, rax, rcx, rsp, rip, 8 bytes each (glibc's
 * __restore_rt FDE says the same: rip at CFA expression rsp+168 = ucontext's uc_mcontext at 40
 * + 128). AArch64: fault_address, then regs[0..30], sp, pc (gdb aarch64-linux-tdep.c: the
 * sigcontext at sp + 128 (siginfo) + 176 (ucontext.uc_mcontext), its x0 at + 8). */
#define LJ_CFI_SIGCONTEXT_X86_64 1
#define LJ_CFI_SIGCONTEXT_AARCH64 2
#define LJ_SIGCONTEXT_X86_RBP 80
#define LJ_SIGCONTEXT_X86_RBX 88
#define LJ_SIGCONTEXT_X86_RDX 96
#define LJ_SIGCONTEXT_X86_RSP 120
#define LJ_SIGCONTEXT_X86_RIP 128
#define LJ_SIGCONTEXT_A64_X0 8
#define LJ_SIGCONTEXT_A64_SP (8 + 31 * 8)
#define LJ_SIGCONTEXT_A64_PC (8 + 32 * 8)
/* The walker reads each layout's registers in two runs (native_step.h lj_signal_step). */
LJ_STATIC_ASSERT(LJ_SIGCONTEXT_X86_RBX == LJ_SIGCONTEXT_X86_RBP + 8 &&
                     LJ_SIGCONTEXT_X86_RDX == LJ_SIGCONTEXT_X86_RBP + 16 &&
                     LJ_SIGCONTEXT_X86_RIP == LJ_SIGCONTEXT_X86_RSP + 8,
                 "x86-64 sigcontext: rbp, rbx, rdx and rsp, rip adjacent");
LJ_STATIC_ASSERT(LJ_SIGCONTEXT_A64_SP == LJ_SIGCONTEXT_A64_X0 + 31 * 8 &&
                     LJ_SIGCONTEXT_A64_PC == LJ_SIGCONTEXT_A64_SP + 8,
                 "AArch64 sigcontext: regs[0..30], sp, pc adjacent");

/* cfa_base: the register the CFA is computed from. */
#define LJ_CFI_REG_SP 0 /* x86-64 rsp (DWARF 7), AArch64 sp (DWARF 31) */
#define LJ_CFI_REG_FP 1 /* x86-64 rbp (DWARF 6), AArch64 x29 (DWARF 29) */
/* x86-64 rbx (DWARF 3), known to the walker at the sampled pc and, in caller frames, through
 * each step's bx_rule (lj_native_regs bx_valid): glibc's lazy-binding trampoline keeps its entry
 * rsp there while it aligns rsp for xsave (sysdeps/x86_64/dl-trampoline.h _dl_runtime_resolve:
 * cfi_def_cfa_register(%rbx)), and _dl_fixup below it saves rbx before using it. */
#define LJ_CFI_REG_BX 2

/* ra_rule / fp_rule: where the caller's value of that register is.
 *
 * LJ_CFI_RULE_SAME: unchanged: the caller's value is the current register value (AArch64
 *   leaf code before x30 is saved; an FP never saved).
 * LJ_CFI_RULE_UNDEFINED: explicitly undefined (DW_CFA_undefined): the caller's value cannot
 *   be recovered; for the RA this marks the outermost frame (the row is LJ_CFI_STOP).
 * LJ_CFI_RULE_AT_CFA: saved in memory: value = *(uint64_t *)(cfa + offset).
 * LJ_CFI_RULE_VAL_CFA: value = cfa + offset, no memory read (DW_CFA_val_offset).
 * LJ_CFI_RULE_UNKNOWN: a rule this format cannot express (another register, a DWARF
 *   expression). For the RA this never occurs in an OK/KEEP row (the row is INVALID
 *   instead); for the FP it means "caller's FP unknown" and the next frame must not be
 *   FP-based.
 */
#define LJ_CFI_RULE_SAME 0
#define LJ_CFI_RULE_UNDEFINED 1
#define LJ_CFI_RULE_AT_CFA 2
#define LJ_CFI_RULE_VAL_CFA 3
#define LJ_CFI_RULE_UNKNOWN 4

/* bx_rule: where the caller's x86-64 rbx is (zero: not known, so a row built without one, an
 * AArch64 row included, never claims it). Only what a caller-frame CFA of LJ_CFI_REG_BX needs.
 *
 * LJ_CFI_BX_UNKNOWN: the caller's rbx is not known (a rule this format cannot express, code
 *   whose rows no CFI backs).
 * LJ_CFI_BX_SAME: unchanged: the FDE never saved it (DWARF's "same value" for a callee-saved
 *   register the CIE and FDE do not mention).
 * LJ_CFI_BX_AT_CFA: saved in memory at cfa + bx_offset.
 */
#define LJ_CFI_BX_UNKNOWN 0
#define LJ_CFI_BX_SAME 1
#define LJ_CFI_BX_AT_CFA 2

/* Register save slots lie next to the CFA (pushes and stores in the prologue): an offset that
 * does not fit 16 bits makes the RA rule Invalid and the FP and rbx rules unknown (table.cc). */
struct lj_cfi_row {
  uint64_t pc_start;  /* first link-time pc this row covers */
  int32_t cfa_offset; /* CFA = cfa_base register + cfa_offset (bytes) */
  int16_t ra_offset;  /* for LJ_CFI_RULE_AT_CFA / VAL_CFA: offset from the CFA (bytes) */
  int16_t fp_offset;  /* for LJ_CFI_RULE_AT_CFA / VAL_CFA: offset from the CFA (bytes) */
  int16_t bx_offset;  /* for LJ_CFI_BX_AT_CFA: offset from the CFA (bytes) */
  uint8_t hint;       /* LJ_CFI_OK / _INVALID / _STOP / _KEEP / _VM_LEAF / _VM_EMPTY / _VM_CUR_L */
  uint8_t cfa_base;   /* LJ_CFI_REG_SP / LJ_CFI_REG_FP / LJ_CFI_REG_BX (0 in INVALID rows) */
  uint8_t ra_rule;    /* LJ_CFI_RULE_* for the return address */
  uint8_t fp_rule;    /* LJ_CFI_RULE_* for the caller's frame pointer */
  uint8_t bx_rule;    /* LJ_CFI_BX_* for the caller's x86-64 rbx */
  uint8_t reserved;   /* 0 */
};
LJ_STATIC_ASSERT(sizeof(struct lj_cfi_row) == 24, "lj_cfi_row: 24 bytes, no padding");

#endif /* LJPROF_BPF_ABI_CFI_ROW_H */
