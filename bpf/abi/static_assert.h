/* static_assert.h: LJ_STATIC_ASSERT for the headers shared by the BPF program (C, clang -target
 * bpf), the natively compiled walker (C) and the C++ code. Every struct that crosses the
 * kernel/user boundary asserts its size next to its definition, so a member added on one side
 * cannot silently shift the other side's view (the role LJ_STATIC_ASSERT plays in LuaJIT's
 * lj_obj.h). */
#ifndef LJPROF_BPF_ABI_STATIC_ASSERT_H
#define LJPROF_BPF_ABI_STATIC_ASSERT_H

#ifdef __cplusplus
#define LJ_STATIC_ASSERT(cond, message) static_assert(cond, message)
#else
#define LJ_STATIC_ASSERT(cond, message) _Static_assert(cond, message)
#endif

#endif /* LJPROF_BPF_ABI_STATIC_ASSERT_H */
