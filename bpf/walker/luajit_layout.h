/* luajit_layout.h: what the walker must know about one process's LuaJIT build.
 *
 * Plain C, fixed size, filled by the per-binary extraction (src/luajit) and copied as-is into a
 * BPF map by the live recorder. Every field is an offset in bytes, extracted from the binary's
 * code or derived from its layout rule (GC64 vs not); see `ljprof inspect`.
 */
#ifndef LJPROF_BPF_WALKER_LUAJIT_LAYOUT_H
#define LJPROF_BPF_WALKER_LUAJIT_LAYOUT_H

#ifndef LJ_LUA_MAX_FRAMES_PER_SEGMENT
#define LJ_LUA_MAX_FRAMES_PER_SEGMENT 128
#endif

struct lj_luajit_layout {
  uint8_t gc64; /* LJ_GC64 / LJ_FR2: two-slot frames, 64-bit GCRef/MRef */
  uint8_t pad0;
  /* VM C frame (lj_frame.h CFRAME_OFS_*), from the VM's own stack pointer. */
  uint16_t cframe_ofs_l;    /* the lua_State running in this C frame */
  uint16_t cframe_ofs_pc;   /* saved bytecode PC (SAVE_PC) */
  uint16_t cframe_ofs_prev; /* link to the previous C frame (Tarantool >= 2.6.3 x86-64: 48) */
  /* lua_State (lj_obj.h) */
  uint16_t l_glref;
  uint16_t l_base;
  uint16_t l_top;
  uint16_t l_stack;
  uint16_t l_maxstack;
  uint16_t l_cframe;
  /* GCfunc (lj_obj.h GCfuncHeader / GCfuncC) */
  uint16_t fn_ffid;    /* 0 = Lua function (FF_LUA) */
  uint16_t fn_cfunc_f; /* GCfuncC.f, the C entry of a C/fast function */
  uint16_t fn_pc;      /* GCfuncL.pc: the function's first bytecode instruction */
  uint16_t pad1[2];
};

#endif /* LJPROF_BPF_WALKER_LUAJIT_LAYOUT_H */
