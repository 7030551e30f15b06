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
#ifndef LJPROF_BPF_ABI_LUAJIT_INFO_H
#define LJPROF_BPF_ABI_LUAJIT_INFO_H

#include "abi/static_assert.h"

#define LJ_LUAJIT_INFO_VERSION 3

#define LJ_INFO_ARCH_X86_64 1
#define LJ_INFO_ARCH_ARM64 2

/* vmstate numbering families (lj_obj.h enum of LJ_VMST_*). */
#define LJ_VMST_NUMBERING_UPSTREAM 1  /* INTERP, C, GC, EXIT, RECORD, OPT, ASM */
#define LJ_VMST_NUMBERING_TARANTOOL 2 /* INTERP, LFUNC, FFUNC, CFUNC, GC, EXIT, ... */

/* LJ_LAYOUT_FIELDS(X): every LuaJIT layout value ljprof extracts, declared once (the way
 * lj_traceerr.h declares trace errors). Each X(...) becomes an int32_t member of
 * struct lj_luajit_info below; src/luajit/layout.h expands the same list into the field ids,
 * their stable names, inspect's order, to_walker_info and the DWARF check.
 *
 *   X(ID, NAME, MEMBER, NEED, WIDTH, FROM, RULE_GC64, RULE_GC32, HEADER, DWARF)
 *
 * ID      C++ identifier (luajit::FieldId::ID, luajit::field::kID).
 * NAME    stable name shown by `inspect` and used as the JSON key.
 * MEMBER  the walker's member.
 * NEED    ALWAYS; X86_64 (only x86-64 derives it); TARANTOOL (Tarantool vmstate numbering only);
 *         OPTIONAL (only `core --all-fibers` uses it; 0 when the pattern did not match).
 *         A field whose NEED applies and that extraction did not fill is an error, never 0.
 * WIDTH   bytes the field occupies in LuaJIT's struct: LJ_WIDTH_REF (a GCRef/MRef: 8 with GC64,
 *         else 4),
 *         8, 4, 2, 1, or 0 for values that are not a member (sizes, distances, states).
 * FROM    CODE: matched in the binary's machine code (src/luajit/matchers.h) or computed from
 *         such a value; RULE: the layout rule below, per GC64 mode (lj_obj.h GCHeader is
 *         `GCRef nextgc; uint8 marked, gct`, 10 bytes GC64, 6 non-GC64; it held for upstream,
 *         OpenResty and Tarantool 1.10..3.3).
 * RULE_*  the layout rule's value per GC64 mode, or LJ_NO_RULE. For a CODE field a rule is a
 *         cross-check: a disagreement means the build's structs are not the ones the RULE
 *         fields assume, and extraction fails.
 * HEADER  the LuaJIT header that defines the field.
 * DWARF   how --verify-dwarf computes it from the binary's DWARF: struct.member offsets,
 *         sizeof(x), ~ENUMERATOR, '+'/'-' between terms, '|' between alternatives, a trailing
 *         '/ 8' (GCRef width to LJ_GC64); "" when DWARF cannot express it (lj_frame.h macros).
 */
#define LJ_NO_RULE (-1)
#define LJ_WIDTH_REF (-1)
#define LJ_LAYOUT_FIELDS(X)                                                                        \
  X(Gc64, "LJ_GC64", gc64, ALWAYS, 0, CODE, 1, 0, "lj_arch.h", "sizeof(global_State.cur_L) / 8")   \
  X(GVmstate, "global_State.vmstate", g_vmstate, ALWAYS, 4, CODE, LJ_NO_RULE, LJ_NO_RULE,          \
    "lj_obj.h", "global_State.vmstate")                                                            \
  X(GCurL, "global_State.cur_L", g_cur_L, ALWAYS, LJ_WIDTH_REF, CODE, LJ_NO_RULE, LJ_NO_RULE,      \
    "lj_obj.h", "global_State.cur_L")                                                              \
  X(GJitBase, "global_State.jit_base", g_jit_base, ALWAYS, LJ_WIDTH_REF, CODE, LJ_NO_RULE,         \
    LJ_NO_RULE, "lj_obj.h", "global_State.jit_base")                                               \
  X(GDispatch, "GG_State.dispatch-g", g_to_dispatch, ALWAYS, 0, CODE, LJ_NO_RULE, LJ_NO_RULE,      \
    "lj_dispatch.h", "GG_State.dispatch - GG_State.g")                                             \
  X(GJitTrace, "G->J->trace", g_jit_trace, ALWAYS, 8, CODE, LJ_NO_RULE, LJ_NO_RULE, "lj_jit.h",    \
    "GG_State.J - GG_State.g + jit_State.trace")                                                   \
  X(GJitSizetrace, "G->J->sizetrace", g_jit_sizetrace, ALWAYS, 4, CODE, LJ_NO_RULE, LJ_NO_RULE,    \
    "lj_jit.h", "GG_State.J - GG_State.g + jit_State.sizetrace")                                   \
  X(GGcRoot, "global_State.gc.root", g_gc_root, OPTIONAL, LJ_WIDTH_REF, CODE, LJ_NO_RULE,          \
    LJ_NO_RULE, "lj_obj.h", "global_State.gc + GCState.root")                                      \
  X(CframePrev, "CFRAME_OFS_PREV", cframe_prev_offset, ALWAYS, 0, CODE, LJ_NO_RULE, LJ_NO_RULE,    \
    "lj_frame.h", "")                                                                              \
  X(CframeSize, "CFRAME_SIZE", cframe_size, X86_64, 0, CODE, LJ_NO_RULE, LJ_NO_RULE, "lj_frame.h", \
    "")                                                                                            \
  X(CframeL, "CFRAME_OFS_L", cframe_ofs_L, ALWAYS, 0, CODE, LJ_NO_RULE, LJ_NO_RULE, "lj_frame.h",  \
    "")                                                                                            \
  X(CframePc, "CFRAME_OFS_PC", cframe_ofs_pc, ALWAYS, 0, CODE, LJ_NO_RULE, LJ_NO_RULE,             \
    "lj_frame.h", "")                                                                              \
  X(VmstInterp, "vmstate.INTERP", vmst_interp, ALWAYS, 0, CODE, LJ_NO_RULE, LJ_NO_RULE,            \
    "lj_obj.h", "~LJ_VMST_INTERP")                                                                 \
  X(VmstLfunc, "vmstate.LFUNC", vmst_lfunc, TARANTOOL, 0, CODE, LJ_NO_RULE, LJ_NO_RULE,            \
    "lj_obj.h", "~LJ_VMST_LFUNC")                                                                  \
  X(VmstFfunc, "vmstate.FFUNC", vmst_ffunc, TARANTOOL, 0, CODE, LJ_NO_RULE, LJ_NO_RULE,            \
    "lj_obj.h", "~LJ_VMST_FFUNC")                                                                  \
  X(VmstC, "vmstate.C", vmst_c, ALWAYS, 0, CODE, LJ_NO_RULE, LJ_NO_RULE, "lj_obj.h",               \
    "~LJ_VMST_C | ~LJ_VMST_CFUNC")                                                                 \
  X(VmstGc, "vmstate.GC", vmst_gc, ALWAYS, 0, CODE, LJ_NO_RULE, LJ_NO_RULE, "lj_obj.h",            \
    "~LJ_VMST_GC")                                                                                 \
  X(VmstExit, "vmstate.EXIT", vmst_exit, ALWAYS, 0, CODE, LJ_NO_RULE, LJ_NO_RULE, "lj_obj.h",      \
    "~LJ_VMST_EXIT")                                                                               \
  X(LGlref, "lua_State.glref", L_glref, ALWAYS, LJ_WIDTH_REF, CODE, 16, 8, "lj_obj.h",             \
    "lua_State.glref")                                                                             \
  X(LBase, "lua_State.base", L_base, ALWAYS, 8, CODE, 32, 16, "lj_obj.h", "lua_State.base")        \
  X(LTop, "lua_State.top", L_top, ALWAYS, 8, CODE, 40, 24, "lj_obj.h", "lua_State.top")            \
  X(LStatus, "lua_State.status", L_status, ALWAYS, 1, RULE, 11, 7, "lj_obj.h", "lua_State.status") \
  X(LMaxstack, "lua_State.maxstack", L_maxstack, ALWAYS, LJ_WIDTH_REF, RULE, 48, 32, "lj_obj.h",   \
    "lua_State.maxstack")                                                                          \
  X(LStack, "lua_State.stack", L_stack, ALWAYS, LJ_WIDTH_REF, RULE, 56, 36, "lj_obj.h",            \
    "lua_State.stack")                                                                             \
  X(LCframe, "lua_State.cframe", L_cframe, ALWAYS, 8, CODE, 80, 48, "lj_obj.h",                    \
    "lua_State.cframe")                                                                            \
  X(StrLen, "GCstr.len", str_len, ALWAYS, 4, CODE, LJ_NO_RULE, LJ_NO_RULE, "lj_obj.h",             \
    "GCstr.len")                                                                                   \
  X(StrData, "sizeof(GCstr)", str_data, ALWAYS, 0, CODE, LJ_NO_RULE, LJ_NO_RULE, "lj_obj.h",       \
    "sizeof(GCstr)")                                                                               \
  X(FnFfid, "GCfunc.ffid", fn_ffid, ALWAYS, 1, RULE, 10, 6, "lj_obj.h", "GCfuncL.ffid")            \
  X(FnPc, "GCfunc.pc", fn_pc, ALWAYS, LJ_WIDTH_REF, RULE, 32, 16, "lj_obj.h", "GCfuncL.pc")        \
  X(FnCfunc, "GCfuncC.f", fn_cfunc_f, ALWAYS, 8, RULE, 40, 24, "lj_obj.h", "GCfuncC.f")            \
  X(PtSizebc, "GCproto.sizebc", pt_sizebc, ALWAYS, 4, RULE, 12, 8, "lj_obj.h", "GCproto.sizebc")   \
  X(PtChunkname, "GCproto.chunkname", pt_chunkname, ALWAYS, LJ_WIDTH_REF, RULE, 64, 40,            \
    "lj_obj.h", "GCproto.chunkname")                                                               \
  X(PtFirstline, "GCproto.firstline", pt_firstline, ALWAYS, 4, RULE, 72, 44, "lj_obj.h",           \
    "GCproto.firstline")                                                                           \
  X(PtNumline, "GCproto.numline", pt_numline, ALWAYS, 4, RULE, 76, 48, "lj_obj.h",                 \
    "GCproto.numline")                                                                             \
  X(PtLineinfo, "GCproto.lineinfo", pt_lineinfo, ALWAYS, LJ_WIDTH_REF, RULE, 80, 52, "lj_obj.h",   \
    "GCproto.lineinfo")                                                                            \
  X(PtSizept, "GCproto.sizept", pt_sizept, ALWAYS, 4, RULE, 56, 32, "lj_obj.h", "GCproto.sizept")  \
  X(PtSize, "sizeof(GCproto)", pt_size, ALWAYS, 0, RULE, 104, 64, "lj_obj.h", "sizeof(GCproto)")   \
  X(PtK, "GCproto.k", pt_k, ALWAYS, LJ_WIDTH_REF, RULE, 32, 16, "lj_obj.h", "GCproto.k")           \
  X(PtSizekgc, "GCproto.sizekgc", pt_sizekgc, ALWAYS, 4, RULE, 48, 24, "lj_obj.h",                 \
    "GCproto.sizekgc")                                                                             \
  X(PtUvinfo, "GCproto.uvinfo", pt_uvinfo, ALWAYS, LJ_WIDTH_REF, RULE, 88, 56, "lj_obj.h",         \
    "GCproto.uvinfo")                                                                              \
  X(PtVarinfo, "GCproto.varinfo", pt_varinfo, ALWAYS, LJ_WIDTH_REF, RULE, 96, 60, "lj_obj.h",      \
    "GCproto.varinfo")                                                                             \
  X(TrGct, "GCtrace.gct", tr_gct, ALWAYS, 1, RULE, 9, 5, "lj_jit.h", "GCtrace.gct")                \
  X(TrNsnap, "GCtrace.nsnap", tr_nsnap, ALWAYS, 2, RULE, 10, 6, "lj_jit.h", "GCtrace.nsnap")       \
  X(TrIr, "GCtrace.ir", tr_ir, ALWAYS, 8, RULE, 32, 16, "lj_jit.h", "GCtrace.ir")                  \
  X(TrNk, "GCtrace.nk", tr_nk, ALWAYS, 4, RULE, 40, 24, "lj_jit.h", "GCtrace.nk")                  \
  X(TrNsnapmap, "GCtrace.nsnapmap", tr_nsnapmap, ALWAYS, 4, RULE, 44, 28, "lj_jit.h",              \
    "GCtrace.nsnapmap")                                                                            \
  X(TrSnap, "GCtrace.snap", tr_snap, ALWAYS, 8, RULE, 48, 32, "lj_jit.h", "GCtrace.snap")          \
  X(TrSnapmap, "GCtrace.snapmap", tr_snapmap, ALWAYS, 8, RULE, 56, 40, "lj_jit.h",                 \
    "GCtrace.snapmap")                                                                             \
  X(TrStartpt, "GCtrace.startpt", tr_startpt, ALWAYS, LJ_WIDTH_REF, RULE, 64, 48, "lj_jit.h",      \
    "GCtrace.startpt")                                                                             \
  X(TrSzmcode, "GCtrace.szmcode", tr_szmcode, ALWAYS, 4, RULE, 84, 60, "lj_jit.h",                 \
    "GCtrace.szmcode")                                                                             \
  X(TrMcode, "GCtrace.mcode", tr_mcode, ALWAYS, 8, CODE, 88, 64, "lj_jit.h", "GCtrace.mcode")      \
  X(TrSpadjust, "GCtrace.spadjust", tr_spadjust, ALWAYS, 2, RULE, 102, 78, "lj_jit.h",             \
    "GCtrace.spadjust")                                                                            \
  X(TrTraceno, "GCtrace.traceno", tr_traceno, ALWAYS, 2, RULE, 104, 80, "lj_jit.h",                \
    "GCtrace.traceno")                                                                             \
  X(TrNins, "GCtrace.nins", tr_nins, ALWAYS, 4, RULE, 12, 8, "lj_jit.h", "GCtrace.nins")           \
  X(TrSize, "sizeof(GCtrace)", tr_size, ALWAYS, 0, RULE, 120, 96, "lj_jit.h", "sizeof(GCtrace)")   \
  X(GGcTotal, "global_State.gc.total", g_gc_total, OPTIONAL, LJ_WIDTH_REF, CODE, LJ_NO_RULE,       \
    LJ_NO_RULE, "lj_obj.h", "global_State.gc + GCState.total")                                     \
  X(GGcMmudata, "global_State.gc.mmudata", g_gc_mmudata, OPTIONAL, LJ_WIDTH_REF, CODE, LJ_NO_RULE, \
    LJ_NO_RULE, "lj_obj.h", "global_State.gc + GCState.mmudata")                                   \
  X(GStrTab, "global_State.strhash", g_strhash, OPTIONAL, 0, CODE, LJ_NO_RULE, LJ_NO_RULE,         \
    "lj_obj.h", "global_State.strhash | global_State.str + StrInternState.tab")                    \
  X(GStrMask, "global_State.strmask", g_strmask, OPTIONAL, 0, CODE, LJ_NO_RULE, LJ_NO_RULE,        \
    "lj_obj.h", "global_State.strmask | global_State.str + StrInternState.mask")                   \
  X(GCtypeState, "global_State.ctype_state", g_ctype_state, OPTIONAL, LJ_WIDTH_REF, CODE,          \
    LJ_NO_RULE, LJ_NO_RULE, "lj_obj.h", "global_State.ctype_state")                                \
  X(GcMarked, "GChead.marked", gc_marked, ALWAYS, 1, RULE, 8, 4, "lj_obj.h", "GChead.marked")      \
  X(GcGct, "GChead.gct", gc_gct, ALWAYS, 1, RULE, 9, 5, "lj_obj.h", "GChead.gct")                  \
  X(LOpenupval, "lua_State.openupval", L_openupval, ALWAYS, LJ_WIDTH_REF, RULE, 64, 40,            \
    "lj_obj.h", "lua_State.openupval")                                                             \
  X(LEnv, "lua_State.env", L_env, ALWAYS, LJ_WIDTH_REF, RULE, 72, 44, "lj_obj.h", "lua_State.env") \
  X(LStacksize, "lua_State.stacksize", L_stacksize, ALWAYS, 4, RULE, 88, 56, "lj_obj.h",           \
    "lua_State.stacksize")                                                                         \
  X(TabColo, "GCtab.colo", tab_colo, ALWAYS, 1, RULE, 11, 7, "lj_obj.h", "GCtab.colo")             \
  X(TabArray, "GCtab.array", tab_array, ALWAYS, LJ_WIDTH_REF, RULE, 16, 8, "lj_obj.h",             \
    "GCtab.array")                                                                                 \
  X(TabMetatable, "GCtab.metatable", tab_metatable, ALWAYS, LJ_WIDTH_REF, RULE, 32, 16,            \
    "lj_obj.h", "GCtab.metatable")                                                                 \
  X(TabNode, "GCtab.node", tab_node, ALWAYS, LJ_WIDTH_REF, RULE, 40, 20, "lj_obj.h", "GCtab.node") \
  X(TabAsize, "GCtab.asize", tab_asize, ALWAYS, 4, RULE, 48, 24, "lj_obj.h", "GCtab.asize")        \
  X(TabHmask, "GCtab.hmask", tab_hmask, ALWAYS, 4, RULE, 52, 28, "lj_obj.h", "GCtab.hmask")        \
  X(TabSize, "sizeof(GCtab)", tab_size, ALWAYS, 0, RULE, 64, 32, "lj_obj.h", "sizeof(GCtab)")      \
  X(NodeKey, "Node.key", node_key, ALWAYS, 8, RULE, 8, 8, "lj_obj.h", "Node.key")                  \
  X(NodeSize, "sizeof(Node)", node_size, ALWAYS, 0, RULE, 24, 24, "lj_obj.h", "sizeof(Node)")      \
  X(UdEnv, "GCudata.env", ud_env, ALWAYS, LJ_WIDTH_REF, RULE, 16, 8, "lj_obj.h", "GCudata.env")    \
  X(UdLen, "GCudata.len", ud_len, ALWAYS, 4, RULE, 24, 12, "lj_obj.h", "GCudata.len")              \
  X(UdMetatable, "GCudata.metatable", ud_metatable, ALWAYS, LJ_WIDTH_REF, RULE, 32, 16,            \
    "lj_obj.h", "GCudata.metatable")                                                               \
  X(UdSize, "sizeof(GCudata)", ud_size, ALWAYS, 0, RULE, 48, 24, "lj_obj.h", "sizeof(GCudata)")    \
  X(UvClosed, "GCupval.closed", uv_closed, ALWAYS, 1, RULE, 10, 6, "lj_obj.h", "GCupval.closed")   \
  X(UvV, "GCupval.v", uv_v, ALWAYS, LJ_WIDTH_REF, RULE, 32, 16, "lj_obj.h", "GCupval.v")           \
  X(UvSize, "sizeof(GCupval)", uv_size, ALWAYS, 0, RULE, 48, 24, "lj_obj.h", "sizeof(GCupval)")    \
  X(FnNupvalues, "GCfunc.nupvalues", fn_nupvalues, ALWAYS, 1, RULE, 11, 7, "lj_obj.h",             \
    "GCfuncL.nupvalues")                                                                           \
  X(FnEnv, "GCfunc.env", fn_env, ALWAYS, LJ_WIDTH_REF, RULE, 16, 8, "lj_obj.h", "GCfuncL.env")     \
  X(FnUvptr, "GCfuncL.uvptr", fn_uvptr, ALWAYS, 0, RULE, 40, 20, "lj_obj.h", "GCfuncL.uvptr")      \
  X(FnCupvalue, "GCfuncC.upvalue", fn_cupvalue, ALWAYS, 0, RULE, 48, 32, "lj_obj.h",               \
    "GCfuncC.upvalue")                                                                             \
  X(CdCtypeid, "GCcdata.ctypeid", cd_ctypeid, ALWAYS, 2, RULE, 10, 6, "lj_obj.h",                  \
    "GCcdata.ctypeid")                                                                             \
  X(CdSize, "sizeof(GCcdata)", cd_size, ALWAYS, 0, RULE, 16, 8, "lj_obj.h", "sizeof(GCcdata)")     \
  X(CtSize, "sizeof(CType)", ct_size, ALWAYS, 0, RULE, 24, 16, "lj_ctype.h", "sizeof(CType)")

#define LJ_LAYOUT_DECLARE_MEMBER(id, name, member, ...) int32_t member;
#define LJ_LAYOUT_COUNT_ONE(...) +1

enum { LJ_LAYOUT_FIELD_COUNT = 0 LJ_LAYOUT_FIELDS(LJ_LAYOUT_COUNT_ONE) };

struct lj_luajit_info {
  uint64_t vm_begin; /* [vm_begin, vm_end): the interpreter and VM helpers */
  uint64_t vm_end;
  uint32_t version; /* LJ_LUAJIT_INFO_VERSION */
  uint8_t arch;     /* LJ_INFO_ARCH_* */
  /* DWARF number of the register that holds DISPATCH (x86-64, e.g. r14 = 14) or GL = G
   * itself (AArch64 x22 = 22) while the interpreter runs. */
  uint8_t dispatch_reg;
  uint8_t dispatch_is_g;  /* 1: the register holds G; 0: it holds G + g_to_dispatch */
  uint8_t vmst_numbering; /* LJ_VMST_NUMBERING_* */
  uint8_t ref_size;       /* bytes of a GCRef/MRef: 8 (GC64) or 4 */
  uint8_t reserved[7];
  /* The layout fields, in LJ_LAYOUT_FIELDS order. Offsets are relative to their struct
   * (global_State fields to G); stored vmstates are ~LJ_VMST_x (negative). */
  LJ_LAYOUT_FIELDS(LJ_LAYOUT_DECLARE_MEMBER)
};
LJ_STATIC_ASSERT(sizeof(struct lj_luajit_info) == (32 + 4 * LJ_LAYOUT_FIELD_COUNT + 7) / 8 * 8,
                 "lj_luajit_info: a 32-byte header, then one int32 per layout field, padded to 8");

#endif /* LJPROF_BPF_ABI_LUAJIT_INFO_H */
