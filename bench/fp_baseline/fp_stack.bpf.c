/* fp_stack.bpf.c: the kernel's own frame-pointer unwinder, timed the way bpf/record.bpf.c times
 * its walk (lj_rec_sample.walk_ns), as bench/record_overhead's baseline: on every perf_event
 * sample of one process, bpf_get_stack(BPF_F_USER_STACK) and the nanoseconds it took. */
#include "vmlinux.h"

#include <bpf/bpf_helpers.h>

#include "fp_sample.h"

const volatile uint32_t target_tgid = 0;

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 256 << 10);
} samples SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, uint32_t);
  __type(value, uint64_t[FP_MAX_FRAMES]);
} stack_scratch SEC(".maps");

SEC("perf_event")
int fp_sample(struct bpf_perf_event_data* ctx) {
  uint32_t tgid = (uint32_t)(bpf_get_current_pid_tgid() >> 32), zero = 0;
  uint64_t* stack;
  uint64_t start_ns;
  long bytes;
  struct fp_sample s;
  if (tgid != target_tgid) return 0;
  start_ns = bpf_ktime_get_ns();
  stack = bpf_map_lookup_elem(&stack_scratch, &zero);
  if (!stack) return 0;
  bytes = bpf_get_stack(ctx, stack, FP_MAX_FRAMES * sizeof(uint64_t), BPF_F_USER_STACK);
  s.ns = (uint32_t)(bpf_ktime_get_ns() - start_ns);
  s.frames = bytes > 0 ? (uint32_t)(bytes / sizeof(uint64_t)) : 0;
  bpf_ringbuf_output(&samples, &s, sizeof(s), 0);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
