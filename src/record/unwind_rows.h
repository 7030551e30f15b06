// record/unwind_rows.h: the kernel's `rows` map (bpf/record.bpf.c) as the recorder fills it and
// gives it back. A file's unwind rows go in once while a followed process maps it, shared by
// every process that does (ObjectCache); once no live process context has mapped the file for
// kUnmappedNs its rows are retired, and once no BPF program can still be reading them they are
// free for another file (record/row_allocator.h). An agent that follows processes for months,
// across binary upgrades, so holds the rows of what is mapped now, not of everything it saw.
//
// Why a freed row is never read as another file's row:
//  - No published context names it. A context the kernel can reach (a `procs` slot a `pids`
//    entry points to) was built from a ProcessContext its FollowedProcess still holds: the
//    recorder replaces FollowedProcess::ctx only after `pids` points to the new slot, and releases
//    an exited process's context only after its `pids` entry is deleted
//    (record/process_follower.cc publish, drop, release_exited). A file's rows are retired only
//    when no live ProcessContext maps it (MappedObject::contexts 0).
//  - No program still in flight uses it. on_sample may have read a `pids` entry just before it
//    changed and still walk with the old slot's modules. Retired rows become free only after
//    membarrier(MEMBARRIER_CMD_GLOBAL), which is synchronize_rcu() in the kernel
//    (kernel/sched/membarrier.c), and a perf_event program runs inside rcu_read_lock()
//    (kernel/events/core.c bpf_overflow_handler): every program that started before the call
//    has returned when it does. Where that command is refused (CPUs in nohz_full mode, a seccomp
//    filter), retired rows are freed kFallbackGraceNs after instead: a sample's walk takes
//    microseconds and its program is never preempted.
//  - The kernel's row cache (record.bpf.c row_cache) keeps copies of rows keyed by the context's
//    generation; a context is published with a generation no other context had, so an entry
//    found under a context that is no longer published is never looked up again.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>

#include "common/result.h"
#include "record/counters.h"
#include "record/process_context.h"
#include "record/row_allocator.h"

extern "C" {
#include "abi/cfi_row.h"
}

namespace ljprof::record {

class UnwindRows {
 public:
  using Warn = std::function<void(const std::string&)>;
  // `cache` is where the files are (the rows of unmapped ones are found there), `counts` the
  // recorder's counters (LJ_REC_CTR_ROWS_FULL and friends).
  UnwindRows(ObjectCache& cache, AgentCounts& counts, Warn warn);

  // The loaded map: its descriptor and capacity (bpf_map__max_entries).
  void attach(int map_fd, uint32_t capacity);
  // Puts `obj`'s rows into the map unless they are there, or writing them failed before. Rows
  // freed earlier are read again first (ObjectCache::reload_rows). Rows that do not fit are
  // counted and warned about once, and tried again at the next call: the file's processes are
  // published without them meanwhile (their walks stop in it, "no module").
  void upload(MappedObject& obj);
  // Housekeeping: the rows of files no live context has mapped for kUnmappedNs are retired, and
  // retired rows are freed once no program can be reading them. True when rows were freed (a
  // process published without rows for want of room may fit now).
  bool sweep(uint64_t now_ns);

  // Called with a file's row range as its rows are retired, before they can be freed: what else
  // names them (the kernel's exec templates and fork/exec contexts, record.bpf.c) must let go.
  void on_retire(std::function<void(uint32_t row_first, uint32_t row_count)> f) {
    on_retire_ = std::move(f);
  }

  uint64_t in_use() const { return rows_.in_use(); }
  uint32_t capacity() const { return rows_.capacity(); }

  // How long a file's rows stay after the last process mapping it is released: a file mapped
  // again soon (short-lived processes of one binary, one after another) keeps them instead of
  // being read and written again. Rows needed for another file go at once.
  static constexpr uint64_t kUnmappedNs = 1'000'000'000;
  static constexpr uint64_t kFallbackGraceNs = 2'000'000'000;

 private:
  std::optional<uint32_t> place(uint32_t count, uint64_t now_ns, const MappedObject& placing);
  // Retires the rows of files no context has mapped for `after_ns` (`keep` aside).
  void retire_unmapped(uint64_t now_ns, uint64_t after_ns, const MappedObject* keep);
  void retire(MappedObject& obj, uint64_t now_ns);
  // Frees what was retired up to now_ns once no program can be reading it; the rows freed.
  uint64_t free_retired(uint64_t now_ns);
  Status write(uint32_t first, std::span<const lj_cfi_row> rows);
  Status write_by_syscall(uint32_t first, std::span<const lj_cfi_row> rows);
  void warn(const std::string& m) const {
    if (warn_) warn_(m);
  }

  ObjectCache& cache_;
  AgentCounts& counts_;
  Warn warn_;
  int fd_ = -1;
  RowAllocator rows_{0};
  bool membarrier_works_ = true;
  std::function<void(uint32_t, uint32_t)> on_retire_;
};

// Whether a module of `ctx` was left out of its published context for want of room.
bool waiting_for_rows(const ProcessContext& ctx);

}  // namespace ljprof::record
