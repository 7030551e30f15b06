// core/thread_pointers.h: a process's threads and their thread pointers as glibc itself lists
// them, read from memory without stopping anything (a running thread does not show its fs_base
// or TPIDR_EL0 to a reader that does not stop it). This is libthread_db's way (nptl_db
// td_ta_thr_iter): every thread's struct pthread is on one of two lists in ld.so's
// _rtld_global, GL(dl_stack_used) (stacks glibc allocated) and GL(dl_stack_user) (the main
// thread, user-supplied stacks), linked through its `list` member; the offsets are the ones
// glibc publishes for libthread_db (libc's _thread_db_* descriptors, nptl_db/structs.def), so
// no glibc build is assumed. The thread pointer follows from the descriptor's address by the
// architecture's DB_THREAD_SELF rule (sysdeps/*/nptl/tls.h): x86-64 fs_base is the struct
// pthread itself (TLS_TCB_AT_TP); AArch64 TPIDR_EL0 is right after it (TLS_DTV_AT_TP,
// CONST_THREAD_AREA(64, sizeof(struct pthread)), libc's _thread_db_const_thread_area).
#pragma once

#include <cstdint>
#include <vector>

#include "common/result.h"
#include "core/core_file.h"

namespace ljprof::core {

struct ListedThread {
  uint64_t thread_pointer = 0;  // fs_base / TPIDR_EL0
  uint32_t tid = 0;
};

// The threads on glibc's lists that exist: in a running process, those that are its threads
// now (a thread that exited and was not joined stays listed until it is); in a core, those with
// an NT_PRSTATUS. In list order. An error when no mapped ld.so exports _rtld_global or no mapped
// libc the _thread_db_* descriptors (a static or non-glibc program), a descriptor is not the
// shape glibc gives it, or a list is unreadable, does not return to its head, or is longer than
// 1<<14 nodes: a list read while it changed is an error, never a made-up thread.
// A running x86-64 process whose glibc predates 2.34 publishes no descriptors of those lists
// (they moved into _rtld_global then); for it this falls back to x86_tcb_threads.
Result<std::vector<ListedThread>> glibc_threads(const CoreFile& core);

// The running x86-64 process's threads found by their thread control blocks instead: glibc puts
// a thread's struct pthread at the top of its stack mapping (nptl/allocatestack.c), and its
// first words point at themselves twice (sysdeps/x86_64/nptl/tls.h tcbhead_t: `tcb` at 0, `self`
// at 16); the top 8 KiB of every anonymous writable mapping are searched for that pair. A block
// counts when its `tid` (_thread_db_pthread_tid's offset) is a thread of the process now (glibc
// keeps an exited thread's block with its cached stack). The main thread's block is not on a
// stack mapping and is not found. An error for anything but a running x86-64 process.
Result<std::vector<ListedThread>> x86_tcb_threads(const CoreFile& core);

}  // namespace ljprof::core
