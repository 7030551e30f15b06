// core/thread_pointers.h: the thread pointers of a running process's threads, found in its memory
// without stopping it (a running thread does not show its fs_base): on x86-64 glibc places a
// thread's struct pthread, whose first words are its thread control block, at the top of the
// thread's stack mapping (nptl/allocatestack.c allocate_stack), and that block points at itself
// twice (sysdeps/x86_64/nptl/tls.h tcbhead_t: `void *tcb` at 0 and `void *self` at 16). A thread
// that exited keeps its block while glibc caches its stack for reuse, so each one found must
// also name a live thread: struct pthread's `tid` (at the offset glibc itself publishes for
// libthread_db, libc's _thread_db_pthread_tid), which the kernel clears when the thread exits
// (CLONE_CHILD_CLEARTID), must be a thread of the process now.
#pragma once

#include <cstdint>
#include <vector>

#include "common/result.h"
#include "core/core_file.h"

namespace ljprof::core {

struct LiveThread {
  uint64_t thread_pointer = 0;  // fs_base
  uint32_t tid = 0;
};

// Threads started by pthread_create (the main thread's block is not on a stack mapping), in
// address order. An error for a core file, a process that is not x86-64, or one whose libc does
// not export _thread_db_pthread_tid (exited threads could not be told apart).
Result<std::vector<LiveThread>> live_threads(const CoreFile& core);

}  // namespace ljprof::core
