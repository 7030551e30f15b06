/* The one stack walker (bpf/walker/walker.h), compiled natively as C for core files: the same
 * source the kernel runs, bound here to a memory-reader callback and a CFI row lookup. */
#include <stdint.h>

#include "abi/walk_types.h"
#include "walker/native_walk.h"

/* A core file can afford to scan every J->trace entry (lj_jit.h: at most 65535 traces) for an
 * AArch64 trace pc; the kernel build keeps its own, smaller bound. */
#define LJ_WALK_TRACE_SCAN_MAX 65536

static int lj_walk_read(struct lj_walk_env* env, void* dst, uint32_t len, uint64_t addr) {
  return env->mem.read_mem(env->mem.ctx, addr, dst, len);
}

static int lj_walk_lookup(struct lj_walk_env* env, uint64_t pc, struct lj_cfi_row* row) {
  return env->lookup(env->lookup_ctx, pc, row) == 0 ? 0 : LJ_LOOKUP_NO_MODULE;
}

#include "walker/walker.h"

void lj_walk_native(struct lj_walk_env* env, const struct lj_luajit_info* lj,
                    const struct lj_native_regs* regs, uint64_t g_hint, uint64_t vm_bias,
                    struct lj_walk_result* out) {
  struct lj_walk_state st = {0};
  struct lj_walk_ctx c = {env, lj, out, &st};
  st.g = g_hint;
  st.vm_bias = vm_bias;
  st.regs = *regs;
  lj_walk(&c);
}

void lj_walk_native_lua_state(struct lj_walk_env* env, const struct lj_luajit_info* lj, uint64_t L,
                              struct lj_walk_result* out) {
  struct lj_walk_state st = {0};
  struct lj_walk_ctx c = {env, lj, out, &st};
  lj_walk_lua_state(&c, L);
}
