// record/sample_intake.h: the records the kernel program's ring brings — samples, symbolized into
// the recording's stack table and counted by where their walk ended, and the objects it copied of
// young processes — and the stacks cut into profiles.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "profile/profile.h"
#include "record/cost.h"
#include "record/counters.h"
#include "record/kernel_contexts.h"
#include "record/process_follower.h"
#include "record/recorder.h"
#include "record/sample_frames.h"
#include "record/stack_memo.h"
#include "record/stack_table.h"

extern "C" {
#include "abi/record_types.h"
}

namespace ljprof::record {

class SampleIntake {
 public:
  SampleIntake(ProcessFollower& follower, KernelContexts& kernel, AgentCounts& counts)
      : follower_(follower), kernel_(kernel), counts_(counts) {}

  // One ring-buffer record (BpfSession::OnRecord): a sample, or a young process's object.
  void handle_record(const void* data, size_t size);

  // --loop-stalls: keep each sample's thread and time, to find the samples inside each stall;
  // at most `max_kept` at once (the oldest of a thread dropped first).
  void keep_sample_times(size_t max_kept) {
    keep_times_ = true;
    max_kept_times_ = max_kept;
  }
  // The stalls so far with their samples (record --loop-stalls).
  std::vector<profile::LoopStall> stalls() const;
  // How many sample times the bound of keep_sample_times pushed out (the oldest of a thread).
  uint64_t dropped_times() const { return dropped_times_; }
  // The kept samples in time order per thread (record --speedscope); idle event-loop waits
  // (profile_frames.h is_idle_wait) left out.
  profile::Timeline timeline() const;
  // The same, and forgotten with the kept sample times (the agent's intervals: call it before
  // take_profiles, whose stack table the times point into). A stall that began in an earlier
  // interval has only the samples of this one.
  std::vector<profile::LoopStall> take_stalls();

  // The stacks so far, one profile per process sampled every `period_ns` from `start_unix_ns`
  // to `end_unix_ns`; the stack table starts over empty (and the symbolized-stack cache, which
  // points into it, with it).
  std::vector<ProcessProfile> take_profiles(int64_t period_ns, int64_t start_unix_ns,
                                            int64_t end_unix_ns);
  // Adds the stacks so far to `prof` as its samples.
  void add_samples(profile::Profile& prof) const;
  // The symbolizer forgets contexts not in `generations` and processes not in `pids`.
  void forget_all_but(const std::set<uint64_t>& generations, const std::set<uint32_t>& pids) {
    symbolizer_.forget_all_but(generations, pids);
  }

  // Per LJ_END_*: walks that stopped before their rows were published (counted there, not as
  // the walk end).
  const std::array<uint64_t, LJ_END_COUNT>& before_context() const { return before_context_; }
  // Where most walks ending with `end` stopped, most first: at most `n` (site, walks).
  std::vector<std::pair<std::string, uint64_t>> top_end_sites(uint32_t end, size_t n) const;
  const WalkTimes& walk_times() const { return walk_times_; }
  const StackMemo::Stats& memo_stats() const { return memo_.stats(); }

 private:
  void handle_sample(const void* data, size_t size);
  void handle_capture(const void* data, size_t size);
  void handle_stall(const void* data, size_t size);
  void keep_time(const lj_rec_sample& s, const StackTable::Entry& e);
  void symbolize_sample(const lj_rec_sample& s, const FollowedProcess& p,
                        const ProcessContext& ctx);
  bool walked_before_its_rows(const lj_rec_sample& s, const FollowedProcess& p,
                              const ProcessContext& ctx) const;
  void note_end_site(const lj_rec_sample& s, const ProcessContext& ctx);
  profile::SampleFiber fiber_of(const lj_rec_sample& s, const ProcessContext& ctx);
  std::string cord_name(const lj_rec_sample& s, const ProcessContext& ctx);

  ProcessFollower& follower_;
  KernelContexts& kernel_;
  AgentCounts& counts_;
  SampleSymbolizer symbolizer_;
  // Symbolized stacks and their sample counts. Entries are stable: memo_ points into it.
  StackTable stacks_;
  // A sample's raw record -> its entry in stacks_ (record/stack_memo.h).
  StackMemo memo_{symbolizer_, stacks_};
  // Off-CPU time (record --off-cpu) per (stack entry in stacks_, LJ_REC_OFF_CPU_* state), in ns.
  // The entries' own counts are CPU samples only.
  std::map<std::pair<const StackTable::Entry*, uint32_t>, int64_t> off_cpu_;
  // --loop-stalls: per thread, each sample's time (bpf_ktime: for an off-CPU interval, its end),
  // its entry in stacks_ and its off-CPU ns (0: a CPU sample); at most max_kept_times_ in all,
  // the oldest of a thread dropped first.
  struct SampleTime {
    uint64_t time_ns = 0;
    const StackTable::Entry* entry = nullptr;
    uint64_t off_cpu_ns = 0;
    uint32_t off_cpu_state = 0;
  };
  static constexpr size_t kOrderSlack = 64;  // how far out of time order a kept time may be
  bool keep_times_ = false;
  size_t max_kept_times_ = 0;
  size_t kept_times_ = 0;
  uint64_t dropped_times_ = 0;
  std::map<uint32_t, std::deque<SampleTime>> times_;
  std::vector<lj_rec_stall> stall_records_;
  // cord.name by (pid, struct cord address), kept once read (a cord is named when its thread
  // starts; until then it is not kept and is read again).
  std::map<std::pair<uint32_t, uint64_t>, std::string> cord_names_;
  static constexpr size_t kMaxCordNames = 4096;
  static constexpr size_t kMaxStalls = 1u << 20;
  // Adds the off-CPU samples so far to `f` (count 0, off_cpu_ns and state set).
  void for_each_off_cpu(const std::function<void(profile::Sample)>& f) const;
  std::array<uint64_t, LJ_END_COUNT> before_context_{};
  // Per LJ_END_*: where walks stopped ("module+0xOFF"); at most kMaxEndSites distinct sites
  // per reason, the rest counted under "other sites".
  std::array<std::map<std::string, uint64_t>, LJ_END_COUNT> end_sites_;
  static constexpr size_t kMaxEndSites = 4096;
  WalkTimes walk_times_;
};

}  // namespace ljprof::record
