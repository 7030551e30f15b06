/* Compiles the one stack walker (bpf/walker/walker.h) for the kernel: `make test` builds this
 * with clang -target bpf -O2 so a change that the BPF target cannot compile fails the tests.
 * Reads go through bpf_probe_read_user; CFI rows come from an array map (a stand-in for the
 * recorder's per-module tables). */
/* linux/bpf.h must come first: bpf_helpers.h uses its types. */
#include <linux/bpf.h>

#include <bpf/bpf_helpers.h>

/* The walker headers use the C99 fixed-width names; the kernel build has only __u64 & co. */
typedef __u8 uint8_t;
typedef __u16 uint16_t;
typedef __u32 uint32_t;
typedef __u64 uint64_t;
typedef __s16 int16_t;
typedef __s32 int32_t;
typedef __s64 int64_t;

#include "abi/cfi_row.h"
#include "abi/inline.h"
#include "abi/walk_types.h"

struct lj_walk_env {
  uint64_t bias;
};

LJ_INLINE int lj_walk_read(struct lj_walk_env* env, void* dst, uint32_t len, uint64_t addr) {
  (void)env;
  return bpf_probe_read_user(dst, len, (const void*)addr);
}

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1024);
  __type(key, uint32_t);
  __type(value, struct lj_cfi_row);
} rows SEC(".maps");

LJ_INLINE int lj_walk_lookup(struct lj_walk_env* env, uint64_t pc, struct lj_cfi_row* row) {
  uint32_t key = (uint32_t)((pc - env->bias) & 1023);
  struct lj_cfi_row* hit = bpf_map_lookup_elem(&rows, &key);
  if (!hit) return LJ_LOOKUP_NO_MODULE;
  *row = *hit;
  return 0;
}

#define LJ_WALK_LOOP(n, fn, ctx) bpf_loop((n), (fn), (ctx), 0)
#include "walker/walker.h"

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, uint32_t);
  __type(value, struct lj_walk_result);
} scratch SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, uint32_t);
  __type(value, struct lj_luajit_info);
} layouts SEC(".maps");

/* The walk state lives in a map value, as in the recorder (walker.h struct lj_walk_ctx). */
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, uint32_t);
  __type(value, struct lj_walk_state);
} walk_state SEC(".maps");

SEC("perf_event")
int walk_check(void* ctx) {
  (void)ctx;
  uint32_t zero = 0;
  struct lj_walk_result* out = bpf_map_lookup_elem(&scratch, &zero);
  if (!out) return 0;
  struct lj_walk_state* st = bpf_map_lookup_elem(&walk_state, &zero);
  if (!st) return 0;
  struct lj_walk_env env = {0};
  struct lj_walk_ctx c = {&env, bpf_map_lookup_elem(&layouts, &zero), out, st};
  st->g = 0;
  st->vm_bias = 0;
  st->regs.lr_valid = 1;
  st->regs.fp_valid = 1;
  lj_walk(&c);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
