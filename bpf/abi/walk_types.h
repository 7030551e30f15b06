/* walk_types.h: what the walker takes and gives — the thread registers it starts from and the
 * frames it emits. Plain C, fixed size; shared by the walker, the BPF program's ring-buffer
 * records and the C++ code that symbolizes them. */
#ifndef LJPROF_BPF_ABI_WALK_TYPES_H
#define LJPROF_BPF_ABI_WALK_TYPES_H

#include "abi/static_assert.h"

#ifndef LJ_WALK_MAX_FRAMES
#define LJ_WALK_MAX_FRAMES 256 /* mixed frames per stack */
#endif
/* lj_walk_lookup's answer when no module with CFI covers the pc (0 = row found). */
#define LJ_LOOKUP_NO_MODULE 1

#ifndef LJ_LUA_MAX_FRAMES_PER_SEGMENT
#define LJ_LUA_MAX_FRAMES_PER_SEGMENT 128 /* Lua frames between two VM entries */
#endif
#ifndef LJ_WALK_MAX_STEPS
#define LJ_WALK_MAX_STEPS 512 /* loop iterations: frames + VM hand-overs */
#endif

/* The registers a step needs. `lr` is AArch64's x30 and is meaningful only while `lr_valid`
 * (the sampled leaf frame): a caller's x30 is never recovered by these rows. */
struct lj_native_regs {
  uint64_t pc;
  uint64_t sp;
  uint64_t fp;
  uint64_t lr;
  /* The interpreter's BASE and PC registers at the sampled leaf (x86-64 rdx/rbx, AArch64
   * x19/x21, vm_x64.dasc / vm_arm64.dasc); 0 when unknown. Used only when the leaf pc is in
   * the VM, where L->base is stale until the VM next leaves Lua code. */
  uint64_t vm_base;
  uint64_t vm_pc;
  /* The sampled thread's DISPATCH (x86-64) / GL (AArch64) register, luajit_info.h
   * dispatch_reg, valid while `dispatch_valid`. Only a candidate for finding G when the walk
   * meets JIT machine code: GC64 x86-64 traces and AArch64 traces keep it (lj_target_x86.h
   * RID_DISPATCH, lj_target_arm64.h RID_GL), C code called from a trace preserves it (callee
   * saved), and the walker accepts it only if the G it gives proves itself (G->cur_L->glref). */
  uint64_t dispatch;
  uint8_t lr_valid;
  uint8_t fp_valid; /* 0 once a row said the caller's FP cannot be recovered */
  uint8_t dispatch_valid;
  /* x86-64: vm_pc holds this frame's rbx (cfi_row.h LJ_CFI_REG_BX): the sampled one, then each
   * step's per its row's bx_rule (native_step.h lj_step_bx); 0 once lost or overwritten with
   * something else (an interpreter PC the walker made up). */
  uint8_t bx_valid;
  uint8_t pad[4];
};
LJ_STATIC_ASSERT(sizeof(struct lj_native_regs) == 64, "lj_native_regs: 7 registers + flags");

/* Frame kinds. */
#define LJ_FRAME_NATIVE 0 /* pc: instruction address (exact for the leaf, else return address) */
#define LJ_FRAME_LUA 1    /* a: GCfunc of a Lua function, b: bytecode pc (0 = unknown) */
#define LJ_FRAME_CFUNC 2  /* a: GCfunc of a C/fast function called from Lua, b: its C entry */
#define LJ_FRAME_ROOT 3   /* pc: the proven root frame's pc (Stop row / RA undefined) */
#define LJ_FRAME_TRACE 4  /* pc: machine-code pc in a JIT trace, b: its GCtrace */
#define LJ_FRAME_C_GAP 5  /* Lua-only walks: native frames between two Lua segments, not walked */

/* A native frame's `b`: what its pc is when not the return address of a call. */
#define LJ_NATIVE_INTERRUPTED 1       /* the exact pc a signal interrupted (as a sampled leaf's) */
#define LJ_NATIVE_SIGNAL_TRAMPOLINE 2 /* the signal trampoline the handler returns to */

/* How a walk ended (lj_walk_result.end), declared once: X(ID, value, metric, text). The value
 * is stable — it indexes the recorder's kernel counters and is what saved summaries mean — so a
 * retired value is never reused; `metric` is the stable snake_case name counters and metrics
 * use ("walk_end_<metric>"), `text` what people read. src/symbolize (walk_end_name,
 * walk_end_metric) and the recorder's summary are generated from it. */
#define LJ_WALK_ENDS(X)                                                                  \
  X(ROOT, 0, "root", "root")                                                             \
  X(RA_ZERO, 1, "ra_zero", "end of chain (return address 0)")                            \
  X(NO_CFI, 2, "no_cfi", "no CFI")                                                       \
  X(NO_MODULE, 3, "no_module", "pc in no mapped file with CFI")                          \
  X(READ_FAULT, 4, "read_fault", "memory read failed")                                   \
  X(BAD_FRAME, 5, "bad_frame", "impossible frame")                                       \
  X(FP_UNKNOWN, 6, "fp_unknown", "frame pointer lost")                                   \
  X(RA_UNKNOWN, 7, "ra_unknown", "return address register lost")                         \
  X(TRUNCATED, 8, "truncated", "truncated (frame budget exhausted)")                     \
  X(NO_LUAJIT, 9, "no_luajit", "LuaJIT VM frame but no LuaJIT layout")                   \
  X(BAD_LUA_STATE, 10, "bad_lua_state", "VM C frame holds no valid lua_State")           \
  X(CFRAME_MISMATCH, 11, "cframe_mismatch", "VM frame off the lua_State's cframe chain") \
  X(BAD_LUA_FRAME, 12, "bad_lua_frame", "Lua frame link outside the Lua stack")          \
  X(NULL_JIT_BASE, 13, "null_jit_base", "in a JIT trace but G->jit_base is NULL")        \
  X(TRACE_NO_G, 14, "trace_no_g",                                                        \
    "pc in no mapped file with CFI (no proven global_State to look for a JIT trace)")    \
  X(BAD_TRACE, 15, "bad_trace", "running JIT trace fails its checks")

#define LJ_WALK_END_ENUMERATOR(id, value, ...) LJ_END_##id = value,
enum lj_walk_end { LJ_WALK_ENDS(LJ_WALK_END_ENUMERATOR) LJ_END_COUNT };
#undef LJ_WALK_END_ENUMERATOR

struct lj_walk_frame {
  uint64_t pc; /* native/root: pc; Lua/cfunc: the GCfunc address */
  uint64_t b;  /* Lua: bytecode pc (0 = unknown); cfunc: C entry point */
  uint32_t kind;
  uint32_t lua_state; /* index of the lua_State segment this frame belongs to (Lua frames) */
  /* Lua: the function's GCproto as the walk read it with the function's header (GCfuncL.pc -
   * sizeof(GCproto), lj_obj.h funcproto), so naming the frame need not read the function
   * again; 0: not read (the namer reads it). */
  uint64_t proto;
};
LJ_STATIC_ASSERT(sizeof(struct lj_walk_frame) == 32, "lj_walk_frame: 32 bytes, no padding");

struct lj_walk_result {
  uint32_t nframes;
  uint32_t end;        /* LJ_END_* */
  uint64_t end_pc;     /* pc at which the walk ended */
  uint32_t lua_states; /* number of distinct lua_State segments entered */
  uint32_t pad;
  uint64_t g; /* the global_State this walk proved (from a VM C frame's L or a trace), or 0 */
  struct lj_walk_frame frames[LJ_WALK_MAX_FRAMES];
};
LJ_STATIC_ASSERT(sizeof(struct lj_walk_result) == 32 + 32 * LJ_WALK_MAX_FRAMES,
                 "lj_walk_result: 32-byte header + frames");

#endif /* LJPROF_BPF_ABI_WALK_TYPES_H */
