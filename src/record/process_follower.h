// record/process_follower.h: the processes a recording follows — which ones (-p, the command and
// its children, -a's selection), their unwind contexts published to the kernel program in slots
// of its `procs` map, and what an exec, a fork or an exit changes of them.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "cfi/table_cache.h"
#include "proc/captured_memory.h"
#include "record/bpf_session.h"
#include "record/counters.h"
#include "record/kernel_contexts.h"
#include "record/process_context.h"
#include "record/recorder.h"
#include "record/steady_clock.h"
#include "record/unwind_rows.h"

extern "C" {
#include "abi/record_types.h"
}

namespace ljprof::record {

struct FollowedProcess {
  std::unique_ptr<ProcessContext> ctx;
  ProcessIdentity identity;
  uint32_t slot = LJ_REC_PID_PENDING;
  bool gone = false;
  // When each code mapping's rows were first published (CLOCK_MONOTONIC, bpf_ktime_get_ns's
  // clock): a walk that stopped in a mapping published after the sample was taken is a
  // process still starting up (ld.so maps libraries after the exec), not an unwinding failure.
  std::map<std::pair<uint64_t, const MappedObject*>, uint64_t> published_ns;
  // What the kernel copied of it while it was young (kCopyYoungS), read before its memory.
  std::shared_ptr<proc::CapturedMemory> copies = std::make_shared<proc::CapturedMemory>();
  // Times its context is read again because a code mapping's file could not be opened.
  int unread_retries = 5;
  Clock::time_point first_copy{};
};

// Whether process `pid` exists (also one ljprof may not signal).
bool process_alive(uint32_t pid);

class ProcessFollower {
 public:
  ProcessFollower(const RecordOptions& o, BpfSession& session, ObjectCache& cache,
                  const cfi::TableCache& tables, UnwindRows& rows, KernelContexts& kernel,
                  AgentCounts& counts, RecordCost& cost);

  // Has the kernel program follow `pid`; its samples are walked once setup published its
  // context.
  void follow(uint32_t pid);
  // Builds pid's context and publishes it: rows of new files, then the slot, then pid -> slot
  // (so the kernel never sees a slot that is half written).
  void setup(uint32_t pid);
  // With -a: every process of the host (/proc) not looked at yet that the filters select and that
  // maps a LuaJIT runtime is followed.
  void scan_all();

  // A process the kernel program notified (an exec, a fork, an executable mmap), looked at by
  // the next handle_notifications.
  void notified(uint32_t pid) { rescan_.insert(pid); }
  // Looks at the processes notified: an exited one is dropped, a child the kernel added or (-a)
  // a process that may have loaded LuaJIT is set up, a followed one whose code mappings changed
  // is set up again.
  void handle_notifications();
  // Selected processes that exec'd without a LuaJIT mapping yet, looked at again once per loop
  // round (every kYoungDrainMs, recorder.cc: candidates keep the loop young) until one maps it
  // or kCandidateRounds pass.
  void recheck_exec_candidates();
  // Every half second: followed pids the kernel marked pending, and followed processes that
  // exited, are looked at by the next handle_notifications; old copies are dropped.
  void housekeeping();
  // An exited process's context (and through it its files' rows and cache entries) is released
  // once the ring holds none of its samples; its FollowedProcess, whose identity labels the
  // interval's profile, at the interval's cut (release_gone), or here when there are no
  // intervals. True when a context was released.
  bool release_exited();
  // Forgets processes that exited before this interval's samples were drained: no sample of
  // theirs is left to symbolize (their slot was already freed when they were dropped).
  void release_gone();
  // Publishes again the processes published without some rows for want of room (rows were
  // freed).
  void publish_waiting_for_rows();

  // Keeps what the kernel copied of a young process at `addr` (record_types.h lj_rec_capture),
  // counted as dropped beyond kMaxCopiedBytes.
  void keep_copy(uint32_t pid, uint64_t addr, std::span<const uint8_t> bytes);
  // The process a sample is of, null when not followed. Walked with a context the kernel built
  // (`kernel_built`) it is followed from now on if it was not: a child whose fork notification is
  // not handled yet.
  FollowedProcess* process_of_sample(uint32_t pid, bool kernel_built);
  const FollowedProcess* find(uint32_t pid) const;

  // Processes not exited, and of those the ones with a context now.
  size_t live() const;
  size_t with_context() const;
  // Whether a followed process is still alive.
  bool any_alive() const;
  // Whether a process is young: its context built within kYoungS (attached, forked or exec'd),
  // or exec'd and not yet mapping LuaJIT (recorder.cc kYoungDrainMs).
  bool young() const;
  // The generations of the contexts held and the pids holding one (what the symbolizer keeps).
  void contexts_held(std::set<uint64_t>& generations, std::set<uint32_t>& pids) const;

  // How long after its context was built a process is young (recorder.cc kDrainMs).
  static constexpr double kYoungS = 2.0;
  // Objects of a process younger than kCopyYoungS are copied by the kernel when a sample first
  // meets them (record.bpf.c capture_young_ns, record_types.h lj_rec_capture): a process that
  // lives less than the drain period (a CLI script, a `resty` run, a test) is gone when its
  // samples are named, and the copies name them instead. 100 luajit runs of ~12 ms on a fast
  // host: 596 of ~600 Lua frames unnamed without copies. The agent keeps a process's copies while
  // it lives, at most kMaxCopiedBytes, and drops them kKeepCopiesS after the first (by then its
  // samples of the young window were named; an older process is read live).
  static constexpr double kCopyYoungS = 2.0;
  static constexpr uint64_t kMaxCopiedBytes = 16u << 20;
  static constexpr double kKeepCopiesS = 10.0;

 private:
  void publish(uint32_t pid, FollowedProcess& p);
  void warn_about_context(uint32_t pid, const ProcessContext& ctx);
  lj_rec_proc kernel_record(const FollowedProcess& p, const ProcessContext& ctx);
  bool take_slot(uint32_t pid, FollowedProcess& p, const lj_rec_proc& rec);
  uint64_t proven_g(const FollowedProcess& p, const ProcessContext& next) const;
  void drop(uint32_t pid);
  void look_at_unfollowed(uint32_t pid);
  void refresh(uint32_t pid, FollowedProcess& p);
  bool selected(uint32_t pid);
  void adopt(uint32_t pid);
  bool follow_if_luajit(uint32_t pid);
  void drop_old_copies();
  void warn(const std::string& m) const {
    if (opt_.warn) opt_.warn(m);
  }

  const RecordOptions& opt_;
  BpfSession& session_;
  ObjectCache& cache_;
  const cfi::TableCache& tables_;
  UnwindRows& rows_;
  KernelContexts& kernel_;
  AgentCounts& counts_;
  RecordCost& cost_;  // what attaching each process took
  std::map<uint32_t, FollowedProcess> procs_;
  std::vector<uint32_t> free_slots_;
  std::set<uint32_t> rescan_;
  // Processes whose mappings changed while publish read them: rescanned at the next wake-up.
  std::set<uint32_t> retry_;
  // -a: selected processes that exec'd without LuaJIT yet -> loop rounds left to look again.
  std::map<uint32_t, int> exec_candidates_;
  static constexpr int kCandidateRounds = 5;
  // How many times publish reads a process again whose code mappings grew while it was read.
  static constexpr int kRereadsWhileMapping = 3;
  // With -a: processes looked at that map no LuaJIT (or the filters reject), skipped by the
  // /proc scan (reading every process's maps every scan was most of -a's CPU on an idle host);
  // a notification of an exec or executable mmap looks at one again, and the scan forgets
  // those that exited.
  std::unordered_set<uint32_t> passed_over_;
  const uint32_t self_;
  std::set<uint32_t> warned_;
  Clock::time_point last_setup_{};  // when a process's context was last built (kYoungS)
  bool table_cache_warned_ = false;
};

}  // namespace ljprof::record
