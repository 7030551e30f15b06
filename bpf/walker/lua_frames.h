/* lua_frames.h: part of the one walker (walker.h includes it): the Lua side of a walk — the
 * cursor over one lua_State's frames, entering it at a VM C frame (lj_enter_vm), and stepping
 * one Lua frame at a time through a window of the Lua stack (lj_lua_step). Reads memory through
 * the includer's lj_walk_read. */
#ifndef LJPROF_BPF_WALKER_LUA_FRAMES_H
#define LJPROF_BPF_WALKER_LUA_FRAMES_H

#include "abi/luajit_info.h"
#include "abi/walk_types.h"

/* A bytecode pc known to be unknown: it stops the fallback to the C frame's SAVE_PC (which a
 * trace never updates) and, not being 4-byte aligned, is never a BCIns address, so the
 * frame's line comes out unknown. */
#define LJ_PC_UNKNOWN 1

/* The walk's Lua-side state. */
struct lj_lua_cursor {
  uint64_t L;             /* current lua_State, 0 if none yet */
  uint64_t frame;         /* next frame slot to emit (address of the link slot, base-1) */
  uint64_t stack_bottom;  /* tvref(L->stack) + LJ_FR2 slots: frames at or below are done */
  uint64_t stack_top;     /* L->top: no frame may lie above it */
  uint64_t expect_cframe; /* raw cframe the next VM entry for this L must sit at (0: any) */
  uint64_t pending_pc;    /* bytecode pc of the next Lua frame (0 = take from the cframe) */
  uint64_t pending_link;  /* the next frame's link when its slot is not written yet (0: none) */
  uint32_t segment;
  uint32_t segment_frames; /* Lua frames emitted since the last VM entry */
  uint8_t done;            /* this L's stack is exhausted */
  /* What the last frame's function and call site were (recursion repeats both): each
   * user-memory read costs the kernel far more than the bytes it copies, so a walk reads a
   * function's ffid and C entry, and a call instruction, once while they repeat. Valid while
   * last_func / last_link is nonzero; the walk's memory does not change under it. */
  uint8_t last_ffid;
  uint8_t pad[6];
  uint64_t last_func;
  uint64_t last_entry;
  uint64_t last_proto; /* the last function's GCproto, 0: not read (lj_walk_frame.proto) */
  uint64_t last_link;
  uint32_t last_call_ins;
  uint32_t prev_call_ins; /* the call site before last_link (valid while prev_link != 0) */
  uint64_t prev_link;
  /* Where the Lua stack window (lj_lua_window) starts in the target; 0: empty. */
  uint64_t win_base;
};

/* A window of the Lua stack read in one piece: a GC64 frame's function and link slots are 16
 * bytes, and the frames of a walk lie below one another, so one read of this many bytes serves
 * the next frames out (recursion: some 10 frames) where a read per frame cost the kernel
 * 100-250 ns each. 16 bytes of slack let a masked offset read 16 bytes without a bounds test
 * the verifier cannot follow. */
#define LJ_LUA_WINDOW 512
/* A function's header from its ffid to the end of GCfuncC.f, read in one piece (lj_obj.h
 * GCfuncHeader: ffid, nupvalues, env, gclist, pc, then GCfuncC.f / GCfuncL.uvptr): 38 bytes
 * with GC64, 26 without, read as 32 or 64 (a constant length; offsets are masked with 63, and
 * 16 bytes of slack let a masked offset read 8 bytes). */
#define LJ_FUNC_HEADER 64
struct lj_lua_window {
  uint8_t bytes[LJ_LUA_WINDOW + 16];
  uint8_t func_header[LJ_FUNC_HEADER + 16];
  /* A frame's function and link as read (GC64 slots, or the 32-bit words without): here, not
   * on the BPF stack, whose 512 bytes the walk's call chain uses nearly all of (Linux 6.1
   * counts each frame rounded up to 32). */
  uint64_t slots[2];
  uint32_t words[2];
};

LJ_INLINE int lj_emit(struct lj_walk_result* out, uint32_t kind, uint64_t pc, uint64_t b,
                      uint32_t segment) {
  uint32_t n = out->nframes;
  if (n >= LJ_WALK_MAX_FRAMES) return -1;
  out->frames[n].kind = kind;
  out->frames[n].pc = pc;
  out->frames[n].b = b;
  out->frames[n].proto = 0;
  out->frames[n].lua_state = segment;
  out->nframes = n + 1;
  return 0;
}

/* Reads a pointer-sized (GC64) or 32-bit (non-GC64 GCRef/MRef) field. */
LJ_INLINE int lj_read_ref(struct lj_walk_env* env, const struct lj_luajit_info* lj, uint64_t addr,
                          uint64_t* out) {
  if (lj->gc64) return lj_walk_read(env, out, 8, addr);
  uint32_t v32 = 0;
  int rc = lj_walk_read(env, &v32, 4, addr);
  *out = v32;
  return rc;
}

/* Where a VM C frame links to the previous one (lj_frame.h CFRAME_OFS_PREV), as extracted
 * (x86-64 4*8 or 6*8 depending on the fork, AArch64 0). */
LJ_INLINE uint64_t lj_cframe_prev(const struct lj_luajit_info* lj) {
  return (uint32_t)lj->cframe_prev_offset;
}

/* Enters the Lua walk at a VM C frame located at `sp`. Returns LJ_END_* on failure, -1 ok.
 * `empty`: the frame is linked but holds no Lua frame (LJ_CFI_VM_EMPTY): the cursor is set up
 * for this L but left at the next C frame of its chain, so the Lua frames at L->base are
 * emitted at that outer VM frame, below the native frames in between. */
LJ_INLINE int lj_enter_vm(struct lj_walk_env* env, const struct lj_luajit_info* lj,
                          struct lj_lua_cursor* c, const struct lj_native_regs* regs, int leaf,
                          int in_trace, int empty, int base_from_jit_base, int link_pending,
                          struct lj_walk_result* out) {
  uint64_t L = 0, g = 0, base = 0, stack = 0, top = 0, maxstack = 0, cframe = 0, pc = 0;
  const uint64_t sp = regs->sp;
  if (lj_read_ref(env, lj, sp + lj->cframe_ofs_L, &L) != 0 || L == 0) return LJ_END_BAD_LUA_STATE;
  if (L != c->L) {
    /* A new lua_State: start at its innermost frame, base - 1 (lj_debug_frame). L->base is
     * synced by the VM whenever it leaves Lua code for C (BC_FUNCC, vm_call paths); while the
     * sampled pc is in the interpreter itself only the BASE register is current. */
    if (lj_read_ref(env, lj, L + lj->L_glref, &g) != 0 || g == 0) return LJ_END_BAD_LUA_STATE;
    if (lj_walk_read(env, &base, 8, L + lj->L_base) != 0) return LJ_END_BAD_LUA_STATE;
    if (lj_walk_read(env, &top, 8, L + lj->L_top) != 0) return LJ_END_BAD_LUA_STATE;
    if (lj_read_ref(env, lj, L + lj->L_stack, &stack) != 0) return LJ_END_BAD_LUA_STATE;
    if (lj_read_ref(env, lj, L + lj->L_maxstack, &maxstack) != 0) return LJ_END_BAD_LUA_STATE;
    if (lj_walk_read(env, &cframe, 8, L + lj->L_cframe) != 0) return LJ_END_BAD_LUA_STATE;
    if (empty && stack == 0) {
      /* lj_state.c lua_newstate: cpluaopen runs in lj_vm_cpcall on a lua_State whose stack
       * stack_init has not allocated yet (the state starts zeroed). That C frame holds no Lua
       * frame, and as the state's first C frame (no previous one linked) none is outside it
       * either: it is stepped over as native code, nothing of L shown. */
      uint64_t prev = 0;
      if (lj_walk_read(env, &prev, 8, sp + lj_cframe_prev(lj)) != 0) return LJ_END_READ_FAULT;
      if ((prev & ~(uint64_t)3) != 0) return LJ_END_BAD_LUA_STATE;
      return -1;
    }
    if (leaf && base_from_jit_base) {
      /* LJ_CFI_VM_EXIT: the exiting trace's BASE is G->jit_base; vm_x64.dasc vm_exit_handler
       * stores it into L->base (`mov L:RB->base, BASE`, read above) before it clears jit_base
       * to call lj_trace_exit, so from that clear to the call L->base holds it. */
      uint64_t jit_base = 0;
      if (lj_read_ref(env, lj, g + lj->g_jit_base, &jit_base) != 0) return LJ_END_NULL_JIT_BASE;
      if (jit_base != 0) base = jit_base;
      top = maxstack;
      pc = LJ_PC_UNKNOWN;
    } else if (leaf && regs->vm_base != 0) {
      base = regs->vm_base;
      top = maxstack; /* L->top is as stale as L->base here */
      pc = regs->vm_pc;
    }
    c->pending_link = 0;
    if (leaf && link_pending) {
      /* LJ_CFI_VM_LINK_PENDING: PC holds the callee frame's link; the callee has not run. */
      if (regs->vm_base == 0 || regs->vm_pc == 0) return LJ_END_BAD_LUA_FRAME;
      c->pending_link = regs->vm_pc;
      pc = LJ_PC_UNKNOWN;
    }
    if (!(stack < base && base <= top && top <= maxstack)) return LJ_END_BAD_LUA_STATE;
    c->L = L;
    c->frame = base - 8;
    c->stack_bottom = stack + (lj->gc64 ? 8 : 0);
    c->stack_top = top;
    c->expect_cframe = cframe & ~(uint64_t)3; /* lj_frame.h CFRAME_RAWMASK */
    c->pending_pc = pc;
    c->done = 0;
    c->win_base = 0;
    c->segment = out->lua_states;
    out->lua_states++;
    if (out->g == 0) out->g = g;
  }
  if (c->expect_cframe != 0 && c->expect_cframe != sp) return LJ_END_CFRAME_MISMATCH;
  if (empty) {
    uint64_t prev = 0;
    if (lj_walk_read(env, &prev, 8, sp + lj_cframe_prev(lj)) != 0) return LJ_END_READ_FAULT;
    c->expect_cframe = prev & ~(uint64_t)3; /* lj_frame.h CFRAME_RAWMASK */
    return -1;
  }
  /* The pc of this segment's innermost Lua frame, when no callee link gave it: the VM stores
   * it in its C frame before calling C (lj_frame.h CFRAME_OFS_PC, SAVE_PC). A trace does not
   * update SAVE_PC, so under a trace the innermost frame's pc stays unknown. */
  if (!in_trace && c->pending_pc == 0 && lj_read_ref(env, lj, sp + lj->cframe_ofs_pc, &pc) == 0) {
    c->pending_pc = pc;
  }
  return -1;
}

/* The 16 bytes at `addr` (a GC64 frame's function and link slots, addr >= the stack's start)
 * from cursor c's window `w`, refilled to end right after them when they are outside it (the
 * next frames out are below), and starting no lower than the stack's start (c->stack_bottom -
 * 8). The bytes used are the stack's own: frames only move down from the refill's addr + 16
 * (at most L->top + 8) to the stack's start, and a new lua_State empties the window; past
 * addr + 16 a window clamped to a small stack may hold other memory, never read. A window
 * that cannot be read falls back to reading the 16 bytes alone. */
LJ_INLINE int lj_lua_window_read(struct lj_walk_env* env, struct lj_lua_cursor* c,
                                 struct lj_lua_window* w, void* dst, uint64_t addr) {
  const uint64_t lo = c->stack_bottom - 8;
  uint64_t off = addr - c->win_base;
  if (c->win_base == 0 || addr < c->win_base || off > LJ_LUA_WINDOW - 16) {
    const uint64_t start = addr + 16 >= lo + LJ_LUA_WINDOW ? addr + 16 - LJ_LUA_WINDOW : lo;
    if (start > addr || lj_walk_read(env, w->bytes, LJ_LUA_WINDOW, start) != 0) {
      c->win_base = 0;
      return lj_walk_read(env, dst, 16, addr);
    }
    c->win_base = start;
    off = addr - start;
  }
  __builtin_memcpy(dst, &w->bytes[off & (LJ_LUA_WINDOW - 1)], 16);
  return 0;
}

/* A function's ffid, C entry (a C function's) and prototype (a Lua function's) into the
 * cursor's last_*: one read of the header span when the layout puts them within LJ_FUNC_HEADER
 * bytes of ffid (every layout the layout table knows), else ffid and f one read each and the
 * prototype left to the namer. A span that cannot be read (it may reach past a small Lua
 * function's end, GCfuncL.uvptr) falls back the same way. Returns 0, or -1 when ffid is
 * unreadable. */
LJ_INLINE int lj_read_func_header(struct lj_walk_env* env, const struct lj_luajit_info* lj,
                                  struct lj_lua_window* w, uint64_t func, struct lj_lua_cursor* c) {
  const uint32_t ref = lj->gc64 ? 8 : 4;
  const uint32_t pc_at = lj->fn_pc - lj->fn_ffid, f_at = lj->fn_cfunc_f - lj->fn_ffid;
  uint32_t span = f_at + 8 > pc_at + ref ? f_at + 8 : pc_at + ref;
  uint64_t entry = 0;
  uint8_t ffid = 0;
  c->last_proto = 0;
  if (lj->fn_pc > lj->fn_ffid && lj->fn_cfunc_f > lj->fn_ffid && span <= LJ_FUNC_HEADER &&
      lj_walk_read(env, w->func_header, span <= 32 ? 32 : LJ_FUNC_HEADER, func + lj->fn_ffid) ==
          0) {
    /* A C function's f or a Lua function's pc, whichever it is: one 8-byte copy on the BPF
     * stack, whose 512 bytes the walk's call chain uses nearly all of (Linux 6.1 counts each
     * frame rounded up to 32 bytes). */
    ffid = w->func_header[0];
    __builtin_memcpy(&entry, &w->func_header[(ffid != 0 ? f_at : pc_at) & (LJ_FUNC_HEADER - 1)], 8);
    if (ffid == 0) {
      const uint64_t pc = lj->gc64 ? entry : (uint32_t)entry;
      if (pc >= (uint64_t)lj->pt_size) c->last_proto = pc - lj->pt_size;
    }
  } else {
    if (lj_walk_read(env, &ffid, 1, func + lj->fn_ffid) != 0) return -1;
    if (ffid != 0 && lj_walk_read(env, &entry, 8, func + lj->fn_cfunc_f) != 0) entry = 0;
  }
  c->last_ffid = ffid;
  c->last_entry = ffid != 0 ? entry : 0;
  return 0;
}

/* Emits one Lua frame of cursor `c` and moves to the previous one. Returns -1 to stay in the
 * Lua walk, -2 when the walk hands back to native (C boundary or bottom of this Lua stack),
 * else LJ_END_*. */
LJ_INLINE int lj_lua_step(struct lj_walk_env* env, const struct lj_luajit_info* lj,
                          struct lj_lua_cursor* c, struct lj_lua_window* w, uint64_t vm_sp,
                          struct lj_walk_result* out) {
  const uint64_t slot = 8;
  const uint64_t fr2 = lj->gc64 ? 1 : 0;
  uint64_t frame = c->frame;
  uint64_t link = 0, func = 0, next = 0, prev = 0;
  uint32_t type, typep;

  if (frame <= c->stack_bottom) {
    /* The bottom of this lua_State's stack: the C code that entered the VM is next. */
    c->done = 1;
    if (vm_sp == 0) return -2; /* a Lua-only walk of a coroutine without C frames */
    if (lj_walk_read(env, &prev, 8, vm_sp + lj_cframe_prev(lj)) != 0) return LJ_END_READ_FAULT;
    c->expect_cframe = prev & ~(uint64_t)3; /* lj_frame.h CFRAME_RAWMASK */
    return -2;
  }
  if (frame > c->stack_top) return LJ_END_BAD_LUA_FRAME;
  if (c->segment_frames >= LJ_LUA_MAX_FRAMES_PER_SEGMENT) return LJ_END_TRUNCATED;
  c->segment_frames++;
  if (lj->gc64) {
    /* lj_frame.h LJ_FR2: [func TValue][PC/delta/ftsz]; `frame` points at the link slot. */
    if (lj_lua_window_read(env, c, w, w->slots, frame - slot) != 0) return LJ_END_READ_FAULT;
    func = w->slots[0] & 0x00007fffffffffffULL; /* lj_obj.h LJ_GCVMASK */
    link = w->slots[1];
  } else {
    /* One slot: func GCRef in the low word, PC/ftsz in the high word (both 32-bit). */
    if (lj_walk_read(env, w->words, 8, frame) != 0) return LJ_END_READ_FAULT;
    func = w->words[0];
    link = w->words[1];
  }
  if (c->pending_link != 0) {
    link = lj->gc64 ? c->pending_link : (uint32_t)c->pending_link;
    c->pending_link = 0;
  }
  type = (uint32_t)(link & 3);  /* lj_frame.h FRAME_TYPE */
  typep = (uint32_t)(link & 7); /* FRAME_TYPEP */

  /* FRAME_VARG is a pseudo-frame below a vararg function's real frame; a frame whose function
   * is the lua_State itself is a dummy (lj_err_optype_call). Neither is a function. */
  if (typep != 3 && func != c->L) {
    if (func != c->last_func || func == 0) {
      if (lj_read_func_header(env, lj, w, func, c) != 0) return LJ_END_READ_FAULT;
      c->last_func = func;
    }
    if (c->last_ffid == 0) { /* lj_obj.h FF_LUA */
      uint32_t n = out->nframes;
      if (lj_emit(out, LJ_FRAME_LUA, func, c->pending_pc, c->segment) != 0) return LJ_END_TRUNCATED;
      if (n < LJ_WALK_MAX_FRAMES) out->frames[n].proto = c->last_proto;
    } else {
      if (lj_emit(out, LJ_FRAME_CFUNC, func, c->last_entry, c->segment) != 0)
        return LJ_END_TRUNCATED;
    }
  }

  if (type == 0) {
    /* FRAME_LUA: the link is the caller's return PC; the call instruction before it holds the
     * callee's base slot in its A operand (frame_prevl, lj_bc.h bc_a). */
    uint32_t ins = c->last_call_ins;
    if (link == c->prev_link && link != 0) {
      /* The other of two alternating call sites (a function that recurses from two places). */
      ins = c->prev_call_ins;
      c->prev_link = c->last_link;
      c->prev_call_ins = c->last_call_ins;
      c->last_link = link;
      c->last_call_ins = ins;
    } else if (link != c->last_link || link == 0) {
      if (lj_walk_read(env, &ins, 4, link - 4) != 0) return LJ_END_READ_FAULT;
      c->prev_link = c->last_link;
      c->prev_call_ins = c->last_call_ins;
      c->last_link = link;
      c->last_call_ins = ins;
    }
    next = frame - (1 + fr2 + ((ins >> 8) & 0xff)) * slot;
    c->pending_pc = link;
  } else {
    next = frame - (link & ~(uint64_t)7); /* frame_prevd, frame_sized */
    if (typep == 2) {
      /* FRAME_CONT: the caller's PC is in the continuation slot (frame_contpc). */
      uint64_t cpc = 0;
      if (lj_read_ref(env, lj, frame - (1 + fr2) * slot + (lj->gc64 ? 0 : 4), &cpc) != 0) cpc = 0;
      c->pending_pc = cpc;
    } else if (typep != 3) {
      c->pending_pc = 0; /* unknown until the next VM C frame's SAVE_PC */
    }
  }
  if (next >= frame) return LJ_END_BAD_LUA_FRAME;
  c->frame = next;
  if (typep == 1 /* FRAME_C */ || typep == 5 /* FRAME_CP */) {
    /* Lua was entered from C here (lua_call / lua_pcall / lua_cpcall): hand back to native;
     * the C caller's own VM frame is the next cframe of the chain. */
    if (vm_sp == 0) {
      /* A Lua-only walk of a coroutine without C frames: its first frame (entered by
       * lua_resume) is the only C boundary it can have, at the bottom of its stack. */
      if (next > c->stack_bottom) return LJ_END_BAD_LUA_FRAME;
      c->done = 1;
      return -2;
    }
    if (lj_walk_read(env, &prev, 8, vm_sp + lj_cframe_prev(lj)) != 0) return LJ_END_READ_FAULT;
    c->expect_cframe = prev & ~(uint64_t)3;
    return -2;
  }
  return -1;
}

#endif /* LJPROF_BPF_WALKER_LUA_FRAMES_H */
