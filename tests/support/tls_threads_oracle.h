// What tests/core/workloads/tls_threads.c prints about its own threads, and where its TLS
// variable cord_ptr lies by the binary's own symbol table and PT_TLS header (nm and readelf, the
// cross binutils for an arm64 build): the oracles of the thread-pointer tests (core files and
// live processes, x86-64 here and arm64 in the VM).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/core_file.h"
#include "core/thread_pointers.h"

namespace ljprof::test {

struct PrintedThread {
  uint32_t tid = 0;
  uint64_t thread_pointer = 0;  // __builtin_thread_pointer() in that thread
  uint64_t cord_ptr = 0;        // the value of its cord_ptr
};

struct TlsThreadsOutput {
  std::vector<PrintedThread> threads;  // the threads that stay, main's last
  std::vector<uint32_t> exited;        // joined threads whose stacks glibc caches
};

// Parses "exited TID TID" and "thread TID tp 0x... cord_ptr 0x..." lines; a malformed output
// fails the current test.
TlsThreadsOutput parse_tls_threads(const std::string& out);

struct TlsSymbol {
  uint64_t value = 0;      // st_value: the offset in the executable's TLS block
  uint64_t tls_size = 0;   // PT_TLS p_memsz
  uint64_t tls_align = 0;  // PT_TLS p_align
};

// cord_ptr in `binary`; fails the current test when nm or readelf show none.
TlsSymbol cord_ptr_tls(const std::string& binary, bool arm64);

// Each thread of `listed` is one the program printed, at the thread pointer it printed, and its
// cord_ptr (read where luajit::cord_ptr_from_tp puts it for `tls`) holds the value it printed;
// no exited thread is listed; every printed thread is.
void expect_threads_as_printed(const core::CoreFile& core,
                               const std::vector<core::ListedThread>& listed,
                               const TlsThreadsOutput& printed, const TlsSymbol& tls);

}  // namespace ljprof::test
