/* native_step.h: one native unwinding step from a compact CFI row (cfi_row.h).
 *
 * Plain, BPF-verifiable C: no loops, no recursion, no libc. The includer provides
 *   static int lj_walk_read(struct lj_walk_env *env, void *dst, uint32_t len, uint64_t addr);
 * (0 on success; bpf_probe_read_user in the kernel build, a core-file reader natively) before
 * including this header, and the fixed-width integer types.
 */
#ifndef LJPROF_BPF_WALKER_NATIVE_STEP_H
#define LJPROF_BPF_WALKER_NATIVE_STEP_H

#include "abi/cfi_row.h"
#include "abi/inline.h"
#include "abi/walk_types.h"

struct lj_walk_env;
static int lj_walk_read(struct lj_walk_env* env, void* dst, uint32_t len, uint64_t addr);

/* A window of the native stack read in one piece: the frame records a walk reads lie above one
 * another (stacks grow down, each caller's CFA above its callee's), a few to a window, where a
 * read per frame cost the kernel ~0.12 us each. Its bytes are the stack's own: the walk's
 * memory does not change under it, and a walk starts with it empty (base 0). A window that
 * cannot be read (it may reach past the top of the stack's mapping) falls back to reading the
 * 16 bytes alone. 16 bytes of slack let a masked offset read 16 bytes. */
#define LJ_STACK_WINDOW 256
struct lj_stack_window {
  uint64_t base; /* where the window starts in the target; 0: empty */
  uint64_t pair[2];
  uint8_t bytes[LJ_STACK_WINDOW + 16];
};

/* The 16 bytes at `addr` into w->pair, from the window (refilled to start at addr when they are
 * outside it). */
LJ_INLINE int lj_stack_pair_read(struct lj_walk_env* env, struct lj_stack_window* w,
                                 uint64_t addr) {
  uint64_t off = addr - w->base;
  if (w->base == 0 || addr < w->base || off > LJ_STACK_WINDOW - 16) {
    if (lj_walk_read(env, w->bytes, LJ_STACK_WINDOW, addr) != 0) {
      w->base = 0;
      return lj_walk_read(env, w->pair, 16, addr);
    }
    w->base = addr;
    off = 0;
  }
  __builtin_memcpy(w->pair, &w->bytes[off & (LJ_STACK_WINDOW - 1)], 16);
  return 0;
}

/* Outcome of one step. */
#define LJ_STEP_OK 0         /* regs now describe the caller */
#define LJ_STEP_ROOT 1       /* the frame is a proven root (Stop row / RA undefined) */
#define LJ_STEP_NO_CFI 2     /* Invalid row: no usable rule at this pc */
#define LJ_STEP_READ_FAULT 3 /* a saved RA/FP slot could not be read */
#define LJ_STEP_BAD_FRAME 4  /* the rule gives an impossible frame (CFA not above SP, pc 0) */
#define LJ_STEP_FP_UNKNOWN 5 /* the CFA is FP-based but the FP was lost by an earlier step */
#define LJ_STEP_RA_UNKNOWN 6 /* the RA rule is "same value" but x30 is not known here */
#define LJ_STEP_RA_ZERO 7    /* the saved return address is 0: the chain ends (thread entry) */

/* The caller's RA and FP by rules that are not the common frame record (lj_native_step). */
LJ_INLINE int lj_read_ra_fp(struct lj_walk_env* env, const struct lj_cfi_row* row, uint64_t cfa,
                            struct lj_native_regs* r, uint64_t* ra_out) {
  uint64_t ra = 0, fp;
  switch (row->ra_rule) {
    case LJ_CFI_RULE_AT_CFA:
      if (lj_walk_read(env, &ra, sizeof(ra), cfa + (int64_t)row->ra_offset) != 0)
        return LJ_STEP_READ_FAULT;
      break;
    case LJ_CFI_RULE_SAME:
      if (!r->lr_valid) return LJ_STEP_RA_UNKNOWN;
      ra = r->lr;
      break;
    case LJ_CFI_RULE_UNDEFINED:
      return LJ_STEP_ROOT;
    default:
      return LJ_STEP_NO_CFI;
  }

  switch (row->fp_rule) {
    case LJ_CFI_RULE_AT_CFA:
      if (lj_walk_read(env, &fp, sizeof(fp), cfa + (int64_t)row->fp_offset) != 0)
        return LJ_STEP_READ_FAULT;
      r->fp = fp;
      r->fp_valid = 1;
      break;
    case LJ_CFI_RULE_VAL_CFA:
      r->fp = cfa + (int64_t)row->fp_offset;
      r->fp_valid = 1;
      break;
    case LJ_CFI_RULE_SAME:
      break;
    default:
      r->fp_valid = 0;
      break;
  }

  *ra_out = ra;
  return LJ_STEP_OK;
}

/* The caller's x86-64 rbx (in r->vm_pc, the interpreter's PC register) by the row's bx_rule:
 * kept, read from its save slot, or lost. Only a later LJ_CFI_REG_BX CFA needs it, so a slot
 * that cannot be read loses it rather than ending the walk. */
LJ_INLINE void lj_step_bx(struct lj_walk_env* env, const struct lj_cfi_row* row, uint64_t cfa,
                          struct lj_native_regs* r) {
  uint64_t bx = 0;
  if (row->bx_rule == LJ_CFI_BX_SAME) return;
  if (row->bx_rule == LJ_CFI_BX_AT_CFA &&
      lj_walk_read(env, &bx, sizeof(bx), cfa + (int64_t)row->bx_offset) == 0) {
    r->vm_pc = bx;
    r->bx_valid = 1;
    return;
  }
  r->bx_valid = 0;
}

/* Resumes at the registers a signal interrupted (cfi_row.h LJ_CFI_SIGNAL): the kernel saved
 * them in the `struct sigcontext` at sp + row->cfa_offset. Two reads of adjacent registers per
 * layout (x86-64 rbp, rbx, rdx and rsp, rip; AArch64 x19..x21 and x29, x30, sp, pc) into a
 * buffer small enough for the BPF stack. The interpreter's BASE and PC registers come back with
 * them (vm_x64.dasc rdx/rbx, vm_arm64.dasc x19/x21), and AArch64's x30, so the interrupted pc
 * is walked as a sampled one; DISPATCH/GL is not restored. */
LJ_INLINE int lj_signal_step(struct lj_walk_env* env, const struct lj_cfi_row* row,
                             struct lj_native_regs* r) {
  uint64_t v[4] = {0, 0, 0, 0};
  const uint64_t sc = r->sp + (uint64_t)(int64_t)row->cfa_offset;

  if (row->ra_rule == LJ_CFI_SIGCONTEXT_X86_64) {
    if (lj_walk_read(env, v, 3 * 8, sc + LJ_SIGCONTEXT_X86_RBP) != 0) return LJ_STEP_READ_FAULT;
    r->fp = v[0];
    r->vm_pc = v[1];   /* rbx */
    r->vm_base = v[2]; /* rdx */
    if (lj_walk_read(env, v, 2 * 8, sc + LJ_SIGCONTEXT_X86_RSP) != 0) return LJ_STEP_READ_FAULT;
    r->sp = v[0];
    r->pc = v[1]; /* rip follows rsp */
    r->bx_valid = 1;
    r->lr_valid = 0;
  } else if (row->ra_rule == LJ_CFI_SIGCONTEXT_AARCH64) {
    if (lj_walk_read(env, v, 3 * 8, sc + LJ_SIGCONTEXT_A64_X0 + 19 * 8) != 0)
      return LJ_STEP_READ_FAULT;
    r->vm_base = v[0]; /* x19 */
    r->vm_pc = v[2];   /* x21 */
    if (lj_walk_read(env, v, 4 * 8, sc + LJ_SIGCONTEXT_A64_X0 + 29 * 8) != 0)
      return LJ_STEP_READ_FAULT;
    r->fp = v[0];                         /* x29 */
    r->lr = v[1] & 0x0000ffffffffffffULL; /* x30, without a pointer-authentication code */
    r->sp = v[2];                         /* sp follows regs[30] */
    r->pc = v[3];
    r->lr_valid = 1;
    r->bx_valid = 0;
  } else {
    return LJ_STEP_NO_CFI;
  }
  r->fp_valid = 1;
  r->dispatch_valid = 0;
  if (r->pc == 0 || r->sp == 0) return LJ_STEP_BAD_FRAME;
  return LJ_STEP_OK;
}

/* Applies `row` to `r`. `row` must be the row covering r->pc (for a caller frame: r->pc - 1,
 * the call instruction, since the return address may start the next function's row). */
LJ_INLINE int lj_native_step(struct lj_walk_env* env, const struct lj_cfi_row* row,
                             struct lj_native_regs* r, struct lj_stack_window* w) {
  uint64_t cfa, ra = 0;

  if (row->hint == LJ_CFI_STOP) return LJ_STEP_ROOT;
  if (row->hint == LJ_CFI_INVALID) return LJ_STEP_NO_CFI;

  if (row->cfa_base == LJ_CFI_REG_FP) {
    if (!r->fp_valid) return LJ_STEP_FP_UNKNOWN;
    cfa = r->fp + (int64_t)row->cfa_offset;
  } else if (row->cfa_base == LJ_CFI_REG_BX) {
    if (!r->bx_valid) return LJ_STEP_NO_CFI; /* an inner frame's rule lost rbx */
    cfa = r->vm_pc + (int64_t)row->cfa_offset;
  } else {
    cfa = r->sp + (int64_t)row->cfa_offset;
  }
  /* Both ABIs: the CFA is the caller's SP, and stacks grow down. An AArch64 leaf that keeps
   * its return address in x30 may use no stack at all (CFA == SP, e.g. glibc's syscall stubs);
   * that can happen once per walk only, since a step clears lr_valid. */
  if (cfa < r->sp || (cfa == r->sp && !(row->ra_rule == LJ_CFI_RULE_SAME && r->lr_valid)))
    return LJ_STEP_BAD_FRAME;

  /* The common frame record (x86-64 push rbp after the call's push; AArch64 stp x29, x30):
   * the saved FP right below the saved RA, both read at once, through the stack window (each
   * user-memory read costs the kernel far more than the bytes it copies). */
  if (row->ra_rule == LJ_CFI_RULE_AT_CFA && row->fp_rule == LJ_CFI_RULE_AT_CFA &&
      row->fp_offset + 8 == row->ra_offset) {
    if (lj_stack_pair_read(env, w, cfa + (int64_t)row->fp_offset) != 0) return LJ_STEP_READ_FAULT;
    r->fp = w->pair[0];
    r->fp_valid = 1;
    ra = w->pair[1];
  } else {
    int rc = lj_read_ra_fp(env, row, cfa, r, &ra);
    if (rc != LJ_STEP_OK) return rc;
  }

  /* AArch64 return addresses may carry a pointer-authentication signature in the top bits;
   * user-space addresses fit in 48 bits on both architectures. */
  ra &= 0x0000ffffffffffffULL;
  if (ra == 0) return LJ_STEP_RA_ZERO;
  lj_step_bx(env, row, cfa, r);
  r->pc = ra;
  r->sp = cfa;
  r->lr_valid = 0;
  return LJ_STEP_OK;
}

#endif /* LJPROF_BPF_WALKER_NATIVE_STEP_H */
