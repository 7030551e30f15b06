/* The memory-read interface the natively compiled stack walker calls (plain C, so the
 * BPF-verifiable walker headers can use it without C++). It has the contract of the kernel's
 * bpf_probe_read_user: all or nothing, 0 on success, a negative errno on failure, and on failure
 * `dst` is zeroed so a caller that ignores the result never sees stale bytes. */
#ifndef LJPROF_BPF_ABI_READ_MEM_H
#define LJPROF_BPF_ABI_READ_MEM_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int (*ljprof_read_mem_fn)(void* ctx, uint64_t addr, void* dst, uint32_t len);

struct ljprof_mem_reader {
  ljprof_read_mem_fn read_mem;
  void* ctx;
};

#ifdef __cplusplus
}
#endif

#endif /* LJPROF_BPF_ABI_READ_MEM_H */
