/* inline.h: LJ_INLINE marks walker helpers that must be inlined into the one BPF program
 * (the kernel build has no calls between them) and that stay static inline natively. */
#ifndef LJPROF_BPF_ABI_INLINE_H
#define LJPROF_BPF_ABI_INLINE_H
#define LJ_INLINE static inline __attribute__((always_inline))
#endif /* LJPROF_BPF_ABI_INLINE_H */
