/* native_walk.h: the C entry point of the natively compiled walker (src/core/native_walk.c).
 * The memory reader and the row lookup are callbacks here; the kernel build binds the same
 * walker to bpf_probe_read_user and BPF maps instead. */
#ifndef LJPROF_BPF_WALKER_NATIVE_WALK_H
#define LJPROF_BPF_WALKER_NATIVE_WALK_H

#include <stdint.h>

#include "abi/cfi_row.h"
#include "abi/luajit_info.h"
#include "abi/read_mem.h"

#ifdef __cplusplus
extern "C" {
#endif

struct lj_native_regs;
struct lj_walk_result;

/* Returns 0 and fills `row` with the row covering runtime address `pc`, or nonzero when no
 * module with CFI covers it. */
typedef int (*lj_row_lookup_fn)(void* ctx, uint64_t pc, struct lj_cfi_row* row);

struct lj_walk_env {
  struct ljprof_mem_reader mem;
  lj_row_lookup_fn lookup;
  void* lookup_ctx;
};

/* Walks one stack from `regs` (copied, not modified). `lj` may be NULL. `g_hint` is the
 * process's global_State if known (0: none; the walker checks it before use), `vm_bias` the
 * load bias of the module holding the VM (see walker.h, JIT traces). */
void lj_walk_native(struct lj_walk_env* env, const struct lj_luajit_info* lj,
                    const struct lj_native_regs* regs, uint64_t g_hint, uint64_t vm_bias,
                    struct lj_walk_result* out);

/* The Lua frames of lua_State `L` alone (walker.h lj_walk_lua_state). */
void lj_walk_native_lua_state(struct lj_walk_env* env, const struct lj_luajit_info* lj, uint64_t L,
                              struct lj_walk_result* out);

#ifdef __cplusplus
}
#endif

#endif /* LJPROF_BPF_WALKER_NATIVE_WALK_H */
