/* walker.h: the one mixed native + LuaJIT stack walker.
 *
 * Plain, BPF-verifiable C: bounded loops only, no recursion, no libc, fixed-size state, every
 * memory read through lj_walk_read(). The same code is compiled by clang -target bpf into the
 * live recorder and natively into `ljprof core`. The includer provides, before including:
 *   the fixed-width integer types, and
 *   static int lj_walk_read(struct lj_walk_env *env, void *dst, uint32_t len, uint64_t addr);
 *   static int lj_walk_lookup(struct lj_walk_env *env, uint64_t pc, struct lj_cfi_row *row);
 * lj_walk_lookup finds the row covering `pc` (a runtime address) in the unwind table of the
 * module mapped there, after removing that module's load bias; it returns 0, or
 * LJ_LOOKUP_NO_MODULE when no module with CFI covers pc (e.g. JIT machine code).
 *
 * Walk model. Native frames are stepped with CFI rows (native_step.h). A row with hint KEEP
 * marks a pc inside the LuaJIT VM: the VM's C frame is there, at the current sp, so the walk
 * switches to the Lua stack of the lua_State stored in that C frame (lj_frame.h CFRAME_OFS_L)
 * and emits Lua frames until it reaches a C boundary (FRAME_C: lua_call; FRAME_CP:
 * lua_pcall/lua_cpcall) or the bottom of that Lua stack. There it hands back to native: it
 * steps over the VM's C frame with the KEEP row (the VM's own CFI rule) and continues native
 * unwinding; the next VM pc re-enters the Lua walk where it stopped (same lua_State) or at a
 * new lua_State (coroutines, Tarantool fibers). Every VM entry is cross-checked against the
 * lua_State's cframe chain (L->cframe, then cframe_prev at cframe_prev_offset): a native walk
 * that reaches the VM at another sp fails closed instead of attaching the wrong Lua frames.
 *
 * JIT traces. A pc in no module may be trace machine code. The walker proves it before using
 * it: G (the includer's hint st->g, the G proven earlier in this walk, or the sampled
 * DISPATCH/GL register) must satisfy G->cur_L->glref == G; the running trace is G->vmstate
 * (>= 0 on x86-64) or, on AArch64 where trace entry stores 0, the J->trace entry whose mcode
 * holds the pc (the trace the includer last saw if it still does, else a bounded scan of
 * LJ_WALK_TRACE_SCAN_MAX entries); the GCtrace
 * must have gct ~LJ_TTRACE and hold the pc. A trace runs on the C frame of the VM entry that
 * started it, below the 16 bytes BC_JLOOP reserves and the trace's own spadjust; that frame is
 * then entered like any VM frame (cframe cross-check included) with BASE = G->jit_base, and
 * stepped over with the VM's KEEP row, looked up at lj->vm_begin + st->vm_bias.
 */
#ifndef LJPROF_BPF_WALKER_WALKER_H
#define LJPROF_BPF_WALKER_WALKER_H

#include "abi/cfi_row.h"
#include "abi/luajit_info.h"
#include "abi/walk_types.h"
#include "walker/native_step.h"

static int lj_walk_lookup(struct lj_walk_env* env, uint64_t pc, struct lj_cfi_row* row);

#include "walker/lua_frames.h"

#define LJ_MODE_NATIVE 0
#define LJ_MODE_LUA 1
#define LJ_MODE_LOCATE 2 /* an LJ_CFI_VM_CUR_L row: find the C frame, then enter it */
#define LJ_MODE_ENTER 3  /* enter the VM C frame at sp (vm_row, enter_trace, enter_empty) */

#ifndef LJ_WALK_TRACE_SCAN_MAX
/* J->trace entries an AArch64 trace lookup may scan in the kernel: a few reads each, paid only
 * when the sampled trace is not the one the last walk of the process found. */
#define LJ_WALK_TRACE_SCAN_MAX 1024
#endif

/* 1 if `g` is a global_State: its running lua_State points back to it (lj_obj.h G->cur_L,
 * L->glref). */
LJ_INLINE int lj_proven_g(struct lj_walk_env* env, const struct lj_luajit_info* lj, uint64_t g) {
  uint64_t L = 0, back = 0;
  if (g == 0) return 0;
  if (lj_read_ref(env, lj, g + lj->g_cur_L, &L) != 0 || L == 0) return 0;
  if (lj_read_ref(env, lj, L + lj->L_glref, &back) != 0) return 0;
  return back == g;
}

/* 1 if `t` is a GCtrace whose machine code holds `pc`. */
LJ_INLINE int lj_trace_holds(struct lj_walk_env* env, const struct lj_luajit_info* lj, uint64_t t,
                             uint64_t pc) {
  uint8_t gct = 0;
  uint64_t mcode = 0;
  uint32_t szmcode = 0;
  if (t == 0) return 0;
  /* lj_obj.h GCHeader gct: a trace's is ~LJ_TTRACE (= 9). */
  if (lj_walk_read(env, &gct, 1, t + lj->tr_gct) != 0 || gct != 9) return 0;
  if (lj_walk_read(env, &mcode, 8, t + lj->tr_mcode) != 0) return 0;
  if (lj_walk_read(env, &szmcode, 4, t + lj->tr_szmcode) != 0) return 0;
  return pc >= mcode && pc - mcode < szmcode;
}

/* Everything one walk carries from step to step. Plain values only: the kernel build keeps it
 * in a per-CPU map value (see struct lj_walk_ctx). */
struct lj_walk_state {
  struct lj_native_regs regs;
  struct lj_lua_cursor cursor;
  struct lj_cfi_row vm_row; /* the VM row to step over its C frame with when Lua hands back */
  uint64_t vm_sp;
  /* Inputs from the includer: the process's global_State if known (0: none; checked before
   * use), and the load bias of the module holding the VM (runtime = link-time + bias). */
  uint64_t g;
  uint64_t vm_bias;
  uint32_t mode;
  uint32_t leaf;
  /* 1 while the frames stepped so far are only the sampled leaf helper of an LJ_CFI_VM_LEAF
   * row: the VM frame reached next may use the BASE/PC registers like a leaf VM frame. */
  uint32_t vm_regs_live;
  /* LJ_MODE_ENTER inputs: the GCtrace running on that frame (0: none) and whether the frame
   * holds no Lua frame (LJ_CFI_VM_EMPTY). */
  uint64_t enter_trace;
  uint32_t enter_empty;
  /* LJ_CFI_VM_EXIT: the VM frame entered next takes BASE from G->jit_base (set until then). */
  uint32_t base_from_jit_base;
  /* LJ_CFI_VM_LINK_PENDING: the VM frame entered next takes its first link from PC. */
  uint32_t link_pending;
  /* LJ_CFI_SIGNAL: the registers are the ones a signal interrupted; the next native frame is
   * emitted as LJ_NATIVE_INTERRUPTED. */
  uint32_t interrupted;
  /* AArch64 (whose trace entry stores vmstate 0): in, a GCtrace the includer saw running last
   * (0: none; proven again before use); out, the trace this walk proved running, if any. */
  uint64_t trace_hint;
  /* The J->trace scan for an AArch64 trace pc (lj_find_trace): its inputs and result. */
  uint64_t scan_traces;
  uint64_t scan_pc;
  uint64_t scan_found;
  uint32_t scan_size;
  /* Last, as a block the kernel program does not clear per walk (record.bpf.c
   * walk_user_stack): the windows are marked empty by lj_walk, the row set before it is read. */
  struct lj_lua_window lua_window;     /* the cursor's (win_base) */
  struct lj_cfi_row row;               /* the rule of the frame this step unwinds */
  struct lj_stack_window stack_window; /* lj_native_step's (base) */
};

/* What bpf_loop hands the step callback: pointers only, the same in every iteration. The
 * verifier checks a bpf_loop callback again for each distinct state it can start from until the
 * states converge; with the walk state on the BPF stack every combination of its small fields
 * (mode, leaf, vm_regs_live, enter_empty, ...) was a state of its own, and Linux 6.18.44's
 * verifier gave up at its 1M instruction limit on that. Values in a map value are not tracked,
 * so there the callback is checked about once. `lj` may be NULL (no LuaJIT in the process). */
struct lj_walk_ctx {
  struct lj_walk_env* env;
  const struct lj_luajit_info* lj;
  struct lj_walk_result* out;
  struct lj_walk_state* st;
};

/* The walk's global_State, proven (lj_proven_g) before use: the includer's hint st->g, the G
 * this walk already proved, or the sampled DISPATCH/GL register. 0 when none proves itself. */
LJ_INLINE uint64_t lj_walk_g(struct lj_walk_ctx* c) {
  struct lj_walk_state* st = c->st;
  const struct lj_luajit_info* lj = c->lj;
  const struct lj_native_regs* regs = &st->regs;
  uint64_t g = 0;
  if (lj_proven_g(c->env, lj, st->g)) return st->g;
  if (lj_proven_g(c->env, lj, c->out->g)) return c->out->g;
  if (!regs->dispatch_valid) return 0;
  g = lj->dispatch_is_g ? regs->dispatch : regs->dispatch - (int64_t)lj->g_to_dispatch;
  return lj_proven_g(c->env, lj, g) ? g : 0;
}

/* LJ_WALK_LOOP(n, fn, ctx): run fn(i, ctx) for i < n until it returns nonzero. The kernel build
 * maps it to bpf_loop() so the verifier checks the step once, not once per iteration. */
#ifndef LJ_WALK_LOOP
#define LJ_WALK_LOOP(n, fn, ctx)                         \
  do {                                                   \
    uint32_t lj_loop_i_;                                 \
    for (lj_loop_i_ = 0; lj_loop_i_ < (n); lj_loop_i_++) \
      if ((fn)(lj_loop_i_, (ctx)) != 0) break;           \
  } while (0)
#endif

/* 1 if `t` is J->trace[t->traceno] of the trace array `traces` (sizetrace entries): a live
 * trace, not a freed one whose memory still reads like it. */
LJ_INLINE int lj_trace_registered(struct lj_walk_env* env, const struct lj_luajit_info* lj,
                                  uint64_t traces, uint32_t sizetrace, uint64_t t) {
  uint16_t traceno = 0;
  uint64_t entry = 0;
  if (lj_walk_read(env, &traceno, 2, t + lj->tr_traceno) != 0) return 0;
  if (traceno == 0 || traceno >= sizetrace) return 0;
  if (lj_read_ref(env, lj, traces + (uint64_t)traceno * lj->ref_size, &entry) != 0) return 0;
  return entry == t;
}

/* One J->trace entry of the AArch64 trace scan (st->scan_*): 1 once found or past the end. */
static long lj_trace_scan_step(uint64_t index, void* ctx) {
  struct lj_walk_ctx* c = (struct lj_walk_ctx*)ctx;
  struct lj_walk_state* st = c->st;
  uint64_t cand = 0, i = index + 1; /* J->trace[0] is never a trace */
  if (i >= st->scan_size) return 1;
  if (lj_read_ref(c->env, c->lj, st->scan_traces + i * c->lj->ref_size, &cand) != 0) return 0;
  if (cand != 0 && lj_trace_holds(c->env, c->lj, cand, st->scan_pc)) {
    st->scan_found = cand;
    return 1;
  }
  return 0;
}

/* The live GCtrace whose machine code holds `pc`, or 0: the includer's hint when it still is
 * one (a hot loop samples the same trace again and again), else a scan of J->trace bounded by
 * LJ_WALK_TRACE_SCAN_MAX entries. */
LJ_INLINE uint64_t lj_find_trace(struct lj_walk_ctx* c, uint64_t traces, uint32_t sizetrace,
                                 uint64_t pc) {
  struct lj_walk_state* st = c->st;
  if (st->trace_hint != 0 && lj_trace_holds(c->env, c->lj, st->trace_hint, pc) &&
      lj_trace_registered(c->env, c->lj, traces, sizetrace, st->trace_hint))
    return st->trace_hint;
  st->scan_traces = traces;
  st->scan_pc = pc;
  st->scan_size = sizetrace;
  st->scan_found = 0;
  LJ_WALK_LOOP(LJ_WALK_TRACE_SCAN_MAX, lj_trace_scan_step, c);
  return st->scan_found;
}

/* The pc (no module covers it) may be JIT machine code: prove the running trace and move to
 * the VM C frame it runs on, to be entered by the next step. Returns -1 when the walk
 * continues, else LJ_END_*. */
LJ_INLINE int lj_enter_trace(struct lj_walk_ctx* c) {
  struct lj_walk_state* st = c->st;
  const struct lj_luajit_info* lj = c->lj;
  struct lj_walk_env* env = c->env;
  struct lj_native_regs* regs = &st->regs;
  struct lj_cfi_row row;
  uint64_t g = 0, traces = 0, t = 0, base = 0, pc = st->leaf ? regs->pc : regs->pc - 1;
  int32_t vmstate = 0;
  uint32_t sizetrace = 0;
  uint16_t spadjust = 0;

  if (lj == 0 || lj->g_jit_trace == 0 || lj->tr_mcode == 0 || lj->tr_spadjust == 0)
    return LJ_END_NO_MODULE;
  g = lj_walk_g(c);
  if (g == 0) return LJ_END_TRACE_NO_G;
  if (lj_walk_read(env, &vmstate, 4, g + lj->g_vmstate) != 0) return LJ_END_READ_FAULT;
  if (lj_walk_read(env, &traces, 8, g + lj->g_jit_trace) != 0) return LJ_END_READ_FAULT;
  if (lj_walk_read(env, &sizetrace, 4, g + lj->g_jit_sizetrace) != 0) return LJ_END_READ_FAULT;
  if (vmstate > 0) {
    if ((uint32_t)vmstate >= sizetrace) return LJ_END_BAD_TRACE;
    if (lj_read_ref(env, lj, traces + (uint64_t)vmstate * lj->ref_size, &t) != 0)
      return LJ_END_READ_FAULT;
    if (!lj_trace_holds(env, lj, t, pc)) return LJ_END_BAD_TRACE;
  } else if (vmstate == 0 && lj->arch == LJ_INFO_ARCH_ARM64) {
    /* vm_arm64.dasc BC_JLOOP stores vmstate 0: find the trace by its machine code. */
    t = lj_find_trace(c, traces, sizetrace, pc);
    if (t == 0) return LJ_END_NO_MODULE;
    st->trace_hint = t;
  } else if (vmstate == lj->vmst_gc && lj->vmst_gc != 0 && !st->leaf) {
    /* A GC step called from a trace: lj_gc.c lj_gc_step_jit switches vmstate to GC (so the
     * trace number is gone) and sets L->base = jit_base. While jit_base is set the trace runs
     * on the running lua_State's C frame: enter it there (LJ_MODE_LOCATE) with BASE =
     * jit_base. Which trace, and so the innermost frame's pc, is unknown. */
    if (lj_read_ref(env, lj, g + lj->g_jit_base, &base) != 0) return LJ_END_READ_FAULT;
    if (base == 0) return LJ_END_NO_MODULE;
    regs->vm_base = base;
    regs->vm_pc = LJ_PC_UNKNOWN;
    regs->bx_valid = 0;
    st->vm_regs_live = 1;
    st->mode = LJ_MODE_LOCATE;
    return -1;
  } else {
    return LJ_END_NO_MODULE; /* G says no trace is running: not JIT code of this VM */
  }
  if (lj_walk_read(env, &spadjust, 2, t + lj->tr_spadjust) != 0) return LJ_END_READ_FAULT;
  if (lj_read_ref(env, lj, g + lj->g_jit_base, &base) != 0) return LJ_END_READ_FAULT;
  if (base == 0) return LJ_END_NULL_JIT_BASE;
  if (lj_walk_lookup(env, lj->vm_begin + st->vm_bias, &row) != 0 || row.hint != LJ_CFI_KEEP)
    return LJ_END_NO_LUAJIT;

  /* vm_x64.dasc / vm_arm64.dasc BC_JLOOP: `sub sp, 16` before jumping to the trace, whose head
   * subtracts T->spadjust (lj_asm.c asm_head_root); side traces store the total. The VM frame
   * is entered by the next step (LJ_MODE_ENTER) with BASE = jit_base. */
  regs->sp = regs->sp + 16 + spadjust;
  regs->vm_base = base;
  regs->vm_pc = 0;
  regs->bx_valid = 0;
  if (c->out->g == 0) c->out->g = g;
  st->vm_row = row;
  st->enter_trace = t;
  st->enter_empty = 0;
  st->mode = LJ_MODE_ENTER;
  return -1;
}

/* LJ_CFI_VM_CUR_L: the VM C frame is the running lua_State's innermost cframe (or, when this
 * walk already handed back from an inner VM frame of that L, the cframe that link named), not
 * at sp. Moves regs->sp there and loads the interpreter's blanket row into *row for stepping
 * over the frame. Returns -1, or LJ_END_* when G cannot be proven or the frame is unreadable. */
LJ_INLINE int lj_locate_cur_l_cframe(struct lj_walk_ctx* c, struct lj_cfi_row* row) {
  struct lj_walk_state* st = c->st;
  const struct lj_luajit_info* lj = c->lj;
  struct lj_walk_env* env = c->env;
  struct lj_native_regs* regs = &st->regs;
  uint64_t g = 0, L = 0, cframe = 0;
  g = lj_walk_g(c);
  if (g == 0) return LJ_END_TRACE_NO_G;
  if (lj_read_ref(env, lj, g + lj->g_cur_L, &L) != 0 || L == 0) return LJ_END_BAD_LUA_STATE;
  if (L == st->cursor.L && st->cursor.expect_cframe != 0) {
    cframe = st->cursor.expect_cframe;
  } else {
    if (lj_walk_read(env, &cframe, 8, L + lj->L_cframe) != 0) return LJ_END_BAD_LUA_STATE;
    cframe &= ~(uint64_t)3; /* lj_frame.h CFRAME_RAWMASK */
  }
  /* The C frame lies above the current sp on the same stack (the handler's pushes, BC_JLOOP's
   * 16 bytes and the trace's spadjust are below it), or at it (a non-GC64 exit handler that has
   * already moved rsp there, LJ_CFI_VM_CUR_L_SAVED). */
  if (cframe < regs->sp || cframe - regs->sp > (1u << 20)) return LJ_END_CFRAME_MISMATCH;
  if (lj_walk_lookup(env, lj->vm_begin + st->vm_bias, row) != 0 || row->hint != LJ_CFI_KEEP)
    return LJ_END_NO_LUAJIT;
  regs->sp = cframe;
  if (c->out->g == 0) c->out->g = g;
  return -1;
}

LJ_INLINE long lj_finish(struct lj_walk_ctx* c, uint32_t end) {
  c->out->end = end;
  return 1;
}

/* One step of the walk: one native frame, one Lua frame, or one hand-over between them.
 * Returns 0 to continue, 1 when the walk has ended (out->end says how). */
static long lj_walk_step(uint64_t index, void* ctx) {
  struct lj_walk_ctx* c = (struct lj_walk_ctx*)ctx;
  struct lj_walk_state* st = c->st;
  struct lj_native_regs* regs = &st->regs;
  /* In the walk state, not on the BPF stack: the walk's call chain uses nearly all of the
   * kernel's 512 bytes (Linux 6.1 counts each frame rounded up to 32). */
  struct lj_cfi_row* row = &st->row;
  int rc;
  (void)index;

  if (st->mode == LJ_MODE_LUA) {
    /* Lua mode is entered only with a layout; the kernel verifier, which checks this callback
     * once for every iteration, needs to see that. */
    if (c->lj == 0) return lj_finish(c, LJ_END_NO_LUAJIT);
    rc = lj_lua_step(c->env, c->lj, &st->cursor, &st->lua_window, st->vm_sp, c->out);
    if (rc == -1) return 0;
    if (rc >= 0) return lj_finish(c, (uint32_t)rc);
    /* Hand back to native: step over the VM's C frame with the VM's own rule. */
    st->mode = LJ_MODE_NATIVE;
    *row = st->vm_row;
    row->hint = LJ_CFI_OK;
  } else if (st->mode == LJ_MODE_LOCATE) {
    if (c->lj == 0) return lj_finish(c, LJ_END_NO_LUAJIT);
    rc = lj_locate_cur_l_cframe(c, &st->vm_row);
    if (rc >= 0) return lj_finish(c, (uint32_t)rc);
    /* x86-64: rbp is not the VM frame's here (the exit handler, a trace's register) */
    if (c->lj->arch != LJ_INFO_ARCH_ARM64) regs->fp_valid = 0;
    st->enter_trace = 0;
    st->enter_empty = 0;
    st->mode = LJ_MODE_ENTER;
    return 0;
  } else if (st->mode == LJ_MODE_ENTER) {
    /* The VM C frame at sp (vm_row is its rule): a Keep/VM_EMPTY row, a located VM_CUR_L
     * frame, or the frame a proven trace runs on. */
    const int in_trace = st->enter_trace != 0;
    if (c->lj == 0) return lj_finish(c, LJ_END_NO_LUAJIT);
    rc = lj_enter_vm(c->env, c->lj, &st->cursor, regs,
                     (int)(in_trace | st->leaf | st->vm_regs_live), in_trace, st->enter_empty,
                     (int)st->base_from_jit_base, (int)st->link_pending, c->out);
    st->base_from_jit_base = 0;
    st->link_pending = 0;
    if (rc >= 0) return lj_finish(c, (uint32_t)rc);
    if (in_trace) {
      if (lj_emit(c->out, LJ_FRAME_TRACE, regs->pc, st->enter_trace, st->cursor.segment) != 0)
        return lj_finish(c, LJ_END_TRUNCATED);
      /* x86-64 traces allocate rbp like any register; AArch64 traces never touch x29
       * (lj_target_arm64.h RSET_FIXED), so it is still the VM frame's. */
      if (c->lj->arch != LJ_INFO_ARCH_ARM64) regs->fp_valid = 0;
      st->leaf = 0;
    }
    st->vm_sp = regs->sp;
    st->cursor.segment_frames = 0;
    if (!st->cursor.done && !st->enter_empty) {
      st->mode = LJ_MODE_LUA;
      return 0;
    }
    st->mode = LJ_MODE_NATIVE;
    *row = st->vm_row;
    row->hint = LJ_CFI_OK;
  } else {
    const uint32_t interrupted = st->interrupted;
    st->interrupted = 0;
    c->out->end_pc = regs->pc;
    if (lj_walk_lookup(c->env, st->leaf ? regs->pc : regs->pc - 1, row) != 0) {
      rc = lj_enter_trace(c);
      return rc >= 0 ? lj_finish(c, (uint32_t)rc) : 0;
    }
    if (row->hint == LJ_CFI_VM_EMPTY) {
      regs->vm_base = 0; /* not BASE here: the entry takes L->base */
    } else if (row->hint == LJ_CFI_VM_RETURNED) {
      /* Only a sampled pc can be here (no calls in that code); the caller's base is in the
       * PC register (vm_x64.dasc vm_return: `neg PC`). */
      if (!st->leaf) return lj_finish(c, LJ_END_NO_CFI);
      regs->vm_base = regs->vm_pc;
      regs->vm_pc = 0;
      regs->bx_valid = 0;
    } else if (row->hint == LJ_CFI_VM_LINK_PENDING) {
      /* Only a sampled pc can be here (a store, no call). */
      if (!st->leaf) return lj_finish(c, LJ_END_NO_CFI);
      st->link_pending = 1;
      row->hint = LJ_CFI_KEEP;
    }
    if (row->hint == LJ_CFI_KEEP || row->hint == LJ_CFI_VM_EMPTY ||
        row->hint == LJ_CFI_VM_RETURNED) {
      /* Entering the Lua walk is a step of its own (as is locating a VM_CUR_L frame): the
       * verifier then checks it once, not once per path that leads to it. */
      st->vm_row = *row;
      st->enter_trace = 0;
      st->enter_empty = row->hint != LJ_CFI_KEEP;
      st->mode = LJ_MODE_ENTER;
      return 0;
    } else if (row->hint == LJ_CFI_VM_CUR_L || row->hint == LJ_CFI_VM_CUR_L_SAVED) {
      /* VM_CUR_L_SAVED: L->base and the C frame's saved PC, not the registers (as for a
       * return address into the VM). */
      if (row->hint == LJ_CFI_VM_CUR_L_SAVED) st->leaf = 0;
      st->mode = LJ_MODE_LOCATE;
      return 0;
    } else if (row->hint == LJ_CFI_VM_EXIT) {
      /* Only sampled pcs (the rows end one byte into the call of lj_trace_exit). */
      if (!st->leaf) return lj_finish(c, LJ_END_NO_CFI);
      regs->vm_base = 0;           /* taken from G->jit_base once G is found */
      regs->vm_pc = LJ_PC_UNKNOWN; /* the exit's pc is known only to lj_trace_exit */
      regs->bx_valid = 0;
      st->base_from_jit_base = 1;
      st->vm_regs_live = 1;
      st->mode = LJ_MODE_LOCATE;
      return 0;
    } else if (row->hint == LJ_CFI_STOP) {
      lj_emit(c->out, LJ_FRAME_ROOT, regs->pc, 0, 0);
      return lj_finish(c, LJ_END_ROOT);
    } else if (row->hint == LJ_CFI_SIGNAL) {
      /* A step of its own: the interrupted registers are walked from the top, like a sample. */
      if (lj_emit(c->out, LJ_FRAME_NATIVE, regs->pc, LJ_NATIVE_SIGNAL_TRAMPOLINE, 0) != 0)
        return lj_finish(c, LJ_END_TRUNCATED);
      rc = lj_signal_step(c->env, row, regs);
      if (rc == LJ_STEP_READ_FAULT) return lj_finish(c, LJ_END_READ_FAULT);
      if (rc != LJ_STEP_OK) return lj_finish(c, LJ_END_BAD_FRAME);
      st->leaf = 1;
      st->vm_regs_live = 0;
      st->interrupted = 1;
      return 0;
    } else if (lj_emit(c->out, LJ_FRAME_NATIVE, regs->pc, interrupted ? LJ_NATIVE_INTERRUPTED : 0,
                       0) != 0) {
      return lj_finish(c, LJ_END_TRUNCATED);
    }
  }

  st->vm_regs_live = st->leaf && row->hint == LJ_CFI_VM_LEAF;
  rc = lj_native_step(c->env, row, regs, &st->stack_window);
  st->leaf = 0;
  switch (rc) {
    case LJ_STEP_OK:
      return 0;
    case LJ_STEP_ROOT:
      return lj_finish(c, LJ_END_ROOT);
    case LJ_STEP_RA_ZERO:
      return lj_finish(c, LJ_END_RA_ZERO);
    case LJ_STEP_NO_CFI:
      return lj_finish(c, LJ_END_NO_CFI);
    case LJ_STEP_READ_FAULT:
      return lj_finish(c, LJ_END_READ_FAULT);
    case LJ_STEP_FP_UNKNOWN:
      return lj_finish(c, LJ_END_FP_UNKNOWN);
    case LJ_STEP_RA_UNKNOWN:
      return lj_finish(c, LJ_END_RA_UNKNOWN);
    default:
      return lj_finish(c, LJ_END_BAD_FRAME);
  }
}

/* Walks the stack starting at `c->st->regs` (the sampled or dumped thread's registers; set
 * lr_valid/fp_valid for what the leaf really has) and the inputs st->g and st->vm_bias; the
 * rest of *c->st is set here. The result is in c->out. */
LJ_INLINE void lj_walk(struct lj_walk_ctx* c) {
  struct lj_walk_state* st = c->st;
  const struct lj_lua_cursor no_cursor = {0};
  const struct lj_cfi_row no_row = {0};
  c->out->nframes = 0;
  c->out->lua_states = 0;
  c->out->g = 0;
  c->out->end = LJ_END_TRUNCATED;
  c->out->end_pc = st->regs.pc;
  st->mode = LJ_MODE_NATIVE;
  st->leaf = 1;
  st->vm_regs_live = 0;
  st->enter_trace = 0;
  st->enter_empty = 0;
  st->base_from_jit_base = 0;
  st->link_pending = 0;
  st->interrupted = 0;
  st->vm_sp = 0;
  st->cursor = no_cursor;
  st->vm_row = no_row;
  st->stack_window.base = 0;
  LJ_WALK_LOOP(LJ_WALK_MAX_STEPS, lj_walk_step, c);
}

/* One step of a Lua-only walk (lj_walk_lua_state): one Lua frame, or a C boundary passed by
 * the cframe chain. Returns 0 to continue, 1 when the walk has ended. */
static long lj_walk_lua_state_step(uint64_t index, void* ctx) {
  struct lj_walk_ctx* c = (struct lj_walk_ctx*)ctx;
  struct lj_walk_state* st = c->st;
  uint64_t pc = 0;
  int rc;
  (void)index;
  if (c->lj == 0) return lj_finish(c, LJ_END_NO_LUAJIT);
  rc = lj_lua_step(c->env, c->lj, &st->cursor, &st->lua_window, st->vm_sp, c->out);
  if (rc == -1) return 0;
  if (rc >= 0) return lj_finish(c, (uint32_t)rc);
  /* The bottom of its stack, or a C boundary right above it (a Tarantool fiber's function,
   * called by lua_pcall from the fiber's C entry). */
  if (st->cursor.done || st->cursor.frame <= st->cursor.stack_bottom)
    return lj_finish(c, LJ_END_ROOT);
  /* A C boundary: the native frames of the C code in between are not walked; the next Lua
   * segment runs on the next C frame of the chain, whose SAVE_PC is its innermost pc. */
  st->vm_sp = st->cursor.expect_cframe;
  if (st->vm_sp == 0) return lj_finish(c, LJ_END_BAD_LUA_FRAME);
  if (lj_emit(c->out, LJ_FRAME_C_GAP, st->vm_sp, 0, st->cursor.segment) != 0)
    return lj_finish(c, LJ_END_TRUNCATED);
  if (lj_read_ref(c->env, c->lj, st->vm_sp + c->lj->cframe_ofs_pc, &pc) != 0)
    return lj_finish(c, LJ_END_READ_FAULT);
  st->cursor.pending_pc = pc;
  st->cursor.segment_frames = 0;
  return 0;
}

/* The Lua frames of lua_State `L` alone, for a state no walked thread is running: a suspended
 * coroutine (no C frame: lua_yield unwinds them) or one that is inside a C call, such as a
 * Tarantool fiber switched out in fiber.sleep. Starts at L->base; C boundaries are passed by
 * the cframe chain from L->cframe without stepping native frames (only the owner's saved
 * registers could) and leave an LJ_FRAME_C_GAP marker. Ends with LJ_END_ROOT at the bottom of
 * L's stack. Core mode's --all-fibers; the kernel never calls it. */
LJ_INLINE void lj_walk_lua_state(struct lj_walk_ctx* c, uint64_t L) {
  struct lj_walk_state* st = c->st;
  const struct lj_lua_cursor no_cursor = {0};
  const struct lj_luajit_info* lj = c->lj;
  uint64_t g = 0, base = 0, top = 0, stack = 0, maxstack = 0, cframe = 0;
  c->out->nframes = 0;
  c->out->lua_states = 1;
  c->out->g = 0;
  c->out->end = LJ_END_TRUNCATED;
  c->out->end_pc = 0;
  st->cursor = no_cursor;
  if (lj == 0) {
    c->out->end = LJ_END_NO_LUAJIT;
    return;
  }
  if (lj_read_ref(c->env, lj, L + lj->L_glref, &g) != 0 || g == 0 ||
      lj_walk_read(c->env, &base, 8, L + lj->L_base) != 0 ||
      lj_walk_read(c->env, &top, 8, L + lj->L_top) != 0 ||
      lj_read_ref(c->env, lj, L + lj->L_stack, &stack) != 0 ||
      lj_read_ref(c->env, lj, L + lj->L_maxstack, &maxstack) != 0 ||
      lj_walk_read(c->env, &cframe, 8, L + lj->L_cframe) != 0 ||
      !(stack < base && base <= top && top <= maxstack)) {
    c->out->end = LJ_END_BAD_LUA_STATE;
    return;
  }
  st->cursor.L = L;
  st->cursor.frame = base - 8;
  st->cursor.stack_bottom = stack + (lj->gc64 ? 8 : 0);
  st->cursor.stack_top = top;
  st->vm_sp = cframe & ~(uint64_t)3; /* lj_frame.h CFRAME_RAWMASK; 0: no C frame */
  c->out->g = g;
  LJ_WALK_LOOP(LJ_WALK_MAX_STEPS, lj_walk_lua_state_step, c);
}

#endif /* LJPROF_BPF_WALKER_WALKER_H */
