/* luajit_info.h: what the stack walker needs to know about one LuaJIT build.
 *
 * Plain C with fixed-size types only: included by the BPF program (kernel build) and by the
 * natively compiled walker. The includer provides uint8_t/uint16_t/int32_t/uint32_t/uint64_t.
 * Filled by src/luajit (extract_proc_info + to_walker_info), from the binary's machine code;
 * every offset is in bytes.
 *
 * Addresses (vm_begin/vm_end) are link-time; the walker adds the mapping's load bias.
 * A zero-initialised record is never "valid by accident": version is 0.
 */
#ifndef LJPROF_BPF_WALKER_LUAJIT_INFO_H
#define LJPROF_BPF_WALKER_LUAJIT_INFO_H

#define LJ_LUAJIT_INFO_VERSION 1

#define LJ_INFO_ARCH_X86_64 1
#define LJ_INFO_ARCH_ARM64 2

/* vmstate numbering families (lj_obj.h enum of LJ_VMST_*). */
#define LJ_VMST_NUMBERING_UPSTREAM 1  /* INTERP, C, GC, EXIT, RECORD, OPT, ASM */
#define LJ_VMST_NUMBERING_TARANTOOL 2 /* INTERP, LFUNC, FFUNC, CFUNC, GC, EXIT, ... */

struct lj_luajit_info {
  uint64_t vm_begin; /* [vm_begin, vm_end): the interpreter and VM helpers */
  uint64_t vm_end;
  uint32_t version; /* LJ_LUAJIT_INFO_VERSION */
  uint8_t arch;     /* LJ_INFO_ARCH_* */
  uint8_t gc64;     /* 1: LJ_GC64 (and LJ_FR2 two-slot frames); 0: 32-bit GC refs */
  /* DWARF number of the register that holds DISPATCH (x86-64, e.g. r14 = 14) or GL = G
   * itself (AArch64 x22 = 22) while the interpreter runs. */
  uint8_t dispatch_reg;
  uint8_t dispatch_is_g; /* 1: the register holds G; 0: it holds G + g_to_dispatch */
  int32_t g_to_dispatch; /* GG_OFS(dispatch) - GG_OFS(g) */
  /* global_State fields, relative to G. */
  uint32_t g_vmstate;   /* int32 ~LJ_VMST_x, or >= 0: the running trace number */
  uint32_t g_cur_L;     /* GCRef of the running lua_State */
  uint32_t g_jit_base;  /* MRef: BASE while a trace runs, else 0 */
  uint32_t g_jit_trace; /* G-relative offset of J->trace (GCRef array of traces) */
  /* The C frame of a VM entry (lj_frame.h). 0 in cframe_prev_offset means "architecture
   * default" (x86-64 32, AArch64 0), so zero-initialised records stay valid. */
  uint32_t cframe_prev_offset;
  uint32_t cframe_size; /* CFRAME_SIZE from the VM's CFI (x86-64 80/96; 0 unknown) */
  /* Stored vmstate values (~LJ_VMST_x, all negative; 0 = not present in this build). */
  int32_t vmst_interp;
  int32_t vmst_c; /* upstream C; Tarantool CFUNC */
  int32_t vmst_gc;
  int32_t vmst_exit;
  int32_t vmst_lfunc;     /* Tarantool only */
  int32_t vmst_ffunc;     /* Tarantool only */
  uint8_t vmst_numbering; /* LJ_VMST_NUMBERING_* */
  uint8_t ref_size;       /* bytes of a GCRef/MRef: 8 (GC64) or 4 */
  /* lua_State */
  uint16_t L_glref;
  uint16_t L_base;
  uint16_t L_top;
  uint16_t L_stack;
  uint16_t L_maxstack;
  uint16_t L_cframe;
  /* GCstr: len (uint32) and where the characters start (sizeof(GCstr)) */
  uint16_t str_len;
  uint16_t str_data;
  /* GCfunc */
  uint16_t fn_ffid;
  uint16_t fn_pc;
  uint16_t fn_cfunc_f; /* GCfuncC.f: the C entry of a C function */
  /* C frame slots from the VM's own sp (lj_frame.h CFRAME_OFS_L / CFRAME_OFS_PC) */
  uint16_t cframe_ofs_L;
  uint16_t cframe_ofs_pc;
  /* GCproto */
  uint16_t pt_sizebc;
  uint16_t pt_chunkname;
  uint16_t pt_firstline;
  uint16_t pt_numline;
  uint16_t pt_lineinfo;
  uint16_t pt_size; /* sizeof(GCproto): bytecode starts here */
  /* GCproto fields read only when naming functions (symbolize/call_site), not by the walker:
   * the GC constants (MRef k; GCRefs at negative indexes), their count, and the debug info
   * streams of upvalue and local variable names (MRef uvinfo, varinfo; NULL when stripped). */
  uint16_t pt_k;
  uint16_t pt_sizekgc;
  uint16_t pt_uvinfo;
  uint16_t pt_varinfo;
  /* GCtrace */
  uint16_t tr_szmcode;
  uint16_t tr_mcode;
  uint16_t tr_traceno;
  uint16_t tr_startpt;
  uint16_t reserved[3];
};

#endif /* LJPROF_BPF_WALKER_LUAJIT_INFO_H */
