/* fp_sample.h: what fp_stack.bpf.c sends per sample (shared with fp_stack_baseline.cc). */
#ifndef LJPROF_BENCH_FP_SAMPLE_H
#define LJPROF_BENCH_FP_SAMPLE_H

#define FP_MAX_FRAMES 127 /* the kernel's default perf_event_max_stack */

struct fp_sample {
  uint32_t ns;     /* bpf_get_stack's time for this sample */
  uint32_t frames; /* user frames it returned */
};

#endif
