// record/recorder.cc: `ljprof record` as one loop over the recorder's parts: the BPF session, the
// process follower, the sample intake and the statistics.
#include "record/recorder.h"

#include <fmt/format.h>
#include <malloc.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <set>
#include <string>

#include "cfi/table_cache.h"
#include "record/bpf_session.h"
#include "record/cost.h"
#include "record/counters.h"
#include "record/kernel_contexts.h"
#include "record/launched_command.h"
#include "record/process_context.h"
#include "record/process_follower.h"
#include "record/record_statistics.h"
#include "record/sample_intake.h"
#include "record/steady_clock.h"
#include "record/unwind_rows.h"

namespace ljprof::record {

static_assert(RecordOptions::kDefaultUnwindRows == LJ_REC_MAX_ROWS);

namespace {

// Sample times kept for the stalls' samples and the timeline (32 bytes each): a recording's, and
// an agent interval's.
constexpr size_t kMaxKeptTimes = 1u << 21;
constexpr size_t kMaxKeptTimesPerInterval = 1u << 16;

std::atomic<bool> g_stop{false};
void on_signal(int) {
  g_stop = true;
}

// How often the agent drains the sample ring. Each drain wakes the agent, and its cost is per
// wake-up as much as per sample (a sample's caches are cold after a sleep): waking 10 times a
// second instead of 50 took the agent's CPU per sample from ~10 to ~5.8 us (overhead.lua at 999
// Hz, the two binaries alternating, 2026-12-05). But a sample is symbolized after the fact from
// the live process: one that exits before the drain leaves its Lua frames unnamed (counted,
// never misnamed). So the ring is drained every kYoungDrainMs while a process is young (its
// context built within kYoungS — attached, forked or exec'd — or exec'd and not yet mapping
// LuaJIT: an exec storm's processes live milliseconds; ProcessFollower::young), every kDrainMs
// otherwise. (Waiting longer after a drain that found no sample starved exactly those: a storm's
// new process had no sample yet when its exec woke the agent, and was gone by the next drain.
// 100 luajit runs of ~35 ms: 1557 of 3243 samples with their Lua frames unnamed before, 1-13
// after.) A filling ring and the notifications (exec, fork, an executable mmap) wake the agent
// at once whatever the period (record.bpf.c wakeup_bytes).
constexpr int kDrainMs = 100;
constexpr int kYoungDrainMs = 20;

int64_t unix_ns(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// Runs `step` once `period_s` passed since `last`, then starts the next period.
template <typename Step>
void every(Clock::time_point& last, double period_s, Step step) {
  if (seconds_since(last) < period_s) return;
  step();
  last = Clock::now();
}

class Recorder {
 public:
  explicit Recorder(const RecordOptions& o) : opt_(o) {
    cache_.use_table_cache(&tables_);
    // A file's rows go into the kernel as soon as its table is built, and the agent's copy is
    // freed (UnwindRows::upload): only one file's rows are held at a time while a process with
    // many libraries is analysed.
    cache_.on_table([this](MappedObject& obj) { rows_.upload(obj); });
    rows_.on_retire([this](uint32_t first, uint32_t count) { kernel_.forget_rows(first, count); });
  }

  Result<RecordResult> run();

 private:
  Status check_options() const;
  Status start_following();
  void catch_stop_signals();
  void wait_for_records(Clock::time_point start, Clock::time_point last_cut);
  void housekeeping();
  void reclaim();
  bool nothing_left_to_follow() const;
  void report_progress(double elapsed);
  void cut_interval(bool last);
  void stop_recording();
  RecordResult result(std::chrono::system_clock::time_point wall_start, double elapsed);
  void warn(const std::string& m) {
    if (opt_.warn) opt_.warn(m);
  }

  const RecordOptions& opt_;
  AgentCounts counts_{};
  RecordCost cost_;  // measured as it happens: the program's load, each process's first context
  cfi::TableCache tables_{opt_.table_cache_dir};
  ObjectCache cache_;
  uint64_t trimmed_at_built_ = 0;  // cache_.tables_built() at the last malloc_trim
  BpfSession session_;
  // The kernel's row map: which file's rows are where, given back once unmapped.
  UnwindRows rows_{cache_, counts_, [this](const std::string& m) { warn(m); }};
  KernelContexts kernel_{opt_, session_, cache_};
  ProcessFollower follower_{opt_, session_, cache_, tables_, rows_, kernel_, counts_, cost_};
  SampleIntake intake_{follower_, kernel_, counts_};
  RecordStatistics stats_{session_, follower_, intake_, rows_, cache_, tables_, counts_, cost_};
  LaunchedCommand command_;
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
  // Continuous mode: when the current interval started (wall clock, for its profiles).
  std::chrono::system_clock::time_point interval_start_;
};

Result<RecordResult> Recorder::run() {
  LJ_TRY(check_options());
  LJ_TRY(start_following());
  catch_stop_signals();
  const auto wall_start = std::chrono::system_clock::now();
  LJ_TRY(session_.start_sampling(opt_.frequency_hz));
  if (!opt_.command.empty()) {
    LJ_TRY(command_.launch(
        opt_.command, [this](uint32_t pid) { follower_.follow(pid); },
        [this](uint32_t pid) { follower_.setup(pid); }));
    if (!command_.note().empty()) warn(fmt::format("{}: {}", opt_.command[0], command_.note()));
  }
  const Clock::time_point start = Clock::now();
  Clock::time_point last_status = start, last_house = start, last_scan = start, last_cut = start;
  interval_start_ = std::chrono::system_clock::now();
  while (!g_stop) {
    wait_for_records(start, last_cut);
    follower_.handle_notifications();
    follower_.recheck_exec_candidates();
    const bool command_exited = command_.exited();
    const double elapsed = seconds_since(start);
    stats_.note_elapsed(elapsed);
    if ((opt_.duration_s > 0 && elapsed >= opt_.duration_s) || command_exited) break;
    every(last_house, 0.5, [&] { housekeeping(); });
    if (opt_.all) every(last_scan, 2.0, [&] { follower_.scan_all(); });
    if (nothing_left_to_follow()) break;
    every(last_status, 1.0, [&] { report_progress(elapsed); });
    if (opt_.interval_s > 0) {
      every(last_cut, opt_.interval_s, [&] {
        session_.drain();
        cut_interval(false);
      });
    }
  }
  const double elapsed = seconds_since(start);
  stop_recording();
  return result(wall_start, elapsed);
}

Status Recorder::check_options() const {
  if (opt_.pids.empty() && opt_.command.empty() && !opt_.all) {
    return make_error("nothing to record: give -p PID, -a, or -- COMMAND");
  }
  if (opt_.frequency_hz == 0 || opt_.frequency_hz > 100000) {
    return make_error("--freq {} is outside 1..100000 Hz", opt_.frequency_hz);
  }
  if (opt_.unwind_rows == 0 || opt_.unwind_rows > LJ_REC_MAX_ROWS_LIMIT) {
    return make_error("--unwind-rows {} is outside 1..{}", opt_.unwind_rows, LJ_REC_MAX_ROWS_LIMIT);
  }
  for (uint32_t pid : opt_.pids) {
    if (!process_alive(pid)) return make_error("-p {}: no such process", pid);
  }
  return Ok{};
}

// Loads the kernel program and follows the processes given (-p) or found (-a).
Status Recorder::start_following() {
  // Per-sample times, to give each stall its samples and --speedscope its timeline: a whole
  // recording's (32 bytes each, 64 MiB at most), or an agent interval's (2 MiB at most: 64k
  // samples, 10 s of 49 Hz on 130 busy threads; the times are dropped at each cut).
  if (opt_.loop_stall_ns != 0 || opt_.keep_timeline) {
    intake_.keep_sample_times(opt_.interval_s > 0 ? kMaxKeptTimesPerInterval : kMaxKeptTimes);
  }
  LJ_TRY(session_.open(
      opt_, static_cast<uint64_t>(ProcessFollower::kCopyYoungS * 1e9),
      [this](const void* data, size_t size) { intake_.handle_record(data, size); },
      [this](uint32_t pid) { follower_.notified(pid); }));
  cost_.program_load_cpu_ms = session_.program_load_cpu_ms();
  rows_.attach(session_.rows_fd(), session_.rows_capacity());
  for (uint32_t pid : opt_.pids) {
    follower_.follow(pid);
    follower_.setup(pid);
  }
  if (opt_.all) follower_.scan_all();
  return Ok{};
}

void Recorder::catch_stop_signals() {
  g_stop = false;
  struct sigaction sa {};
  sa.sa_handler = &on_signal;
  ::sigaction(SIGINT, &sa, &old_int_);
  ::sigaction(SIGTERM, &sa, &old_term_);
}

// Samples do not wake this loop (record.bpf.c wakeup_bytes): they are drained every kDrainMs
// (kYoungDrainMs while a process is young), notifications (exec, fork) and a filling ring still
// wake it at once. The wait ends no later than the next interval cut or the end of --duration:
// an interval holds its own second of samples, not up to a drain period more or less.
void Recorder::wait_for_records(Clock::time_point start, Clock::time_point last_cut) {
  double wait_s = (follower_.young() ? kYoungDrainMs : kDrainMs) / 1e3;
  if (opt_.interval_s > 0) wait_s = std::min(wait_s, opt_.interval_s - seconds_since(last_cut));
  if (opt_.duration_s > 0) wait_s = std::min(wait_s, opt_.duration_s - seconds_since(start));
  session_.wait(static_cast<int>(std::ceil(std::max(wait_s, 0.0) * 1e3)));
  session_.drain();
}

void Recorder::housekeeping() {
  follower_.housekeeping();
  reclaim();
}

// Gives back what exited processes and replaced contexts held: their contexts, the kernel rows
// of files no process maps any more, idle files of the object cache beyond its bound, and the
// symbolizer's entries of contexts and processes gone. A process published without some rows
// for want of room is published again once rows were freed.
void Recorder::reclaim() {
  bool released = follower_.release_exited();
  kernel_.expire();
  if (rows_.sweep(monotonic_ns())) {
    released = true;
    follower_.publish_waiting_for_rows();
  }
  const size_t pruned = cache_.prune();
  counts_[LJ_REC_CTR_OBJECTS_PRUNED] += pruned;
  // The symbolizer forgets contexts released here and those publish replaced (a process that
  // exec'd or mapped more code).
  std::set<uint64_t> generations;
  std::set<uint32_t> pids;
  follower_.contexts_held(generations, pids);
  intake_.forget_all_but(generations, pids);
  const bool built = cache_.tables_built() != trimmed_at_built_;
  if (!released && pruned == 0 && !built) return;
  // What was freed goes back to the system: glibc keeps freed heap memory for reuse, and each
  // new binary's analysis leaves it scattered. A churn of new binaries under `agent` measured
  // 8.9 -> 13.6 MiB of anonymous RSS after the second wave without this, 5.4 -> 5.5 with it
  // (tests/export/agent_test.cc ChurnOfNewBinariesKeepsRowsAndMemoryFlat). Building unwind
  // tables runs libdw over each file's CFI: one tarantool's first attach left 13 MiB of freed
  // heap resident (record --stats, heap 20.6 -> 7.3 MiB trimmed). Once per housekeeping, not
  // per file: a trim per file doubled that attach's CPU.
  trimmed_at_built_ = cache_.tables_built();
  ::malloc_trim(0);
}

// Without a command, -a or --keep-running, recording ends once no followed process is alive.
bool Recorder::nothing_left_to_follow() const {
  return opt_.command.empty() && !opt_.all && !opt_.keep_running && !follower_.any_alive();
}

void Recorder::report_progress(double elapsed) {
  if (opt_.progress) opt_.progress(stats_.status_line(elapsed));
  if (opt_.on_stats) opt_.on_stats(stats_.stats(RecordStatistics::For::Metrics));
}

// Hands the interval's stacks, one profile per process, to on_interval and starts the next
// interval empty.
void Recorder::cut_interval(bool last) {
  const auto now = std::chrono::system_clock::now();
  IntervalProfiles cut;
  cut.start_unix_ns = unix_ns(interval_start_);
  cut.end_unix_ns = unix_ns(now);
  cut.last = last;
  // The stalls first: their samples point into the stack table take_profiles empties.
  cut.stalls = intake_.take_stalls();
  cut.processes =
      intake_.take_profiles(1000000000LL / opt_.frequency_hz, cut.start_unix_ns, cut.end_unix_ns);
  interval_start_ = now;
  follower_.release_gone();
  if (opt_.on_interval) opt_.on_interval(std::move(cut));
}

void Recorder::stop_recording() {
  // Stop sampling first, then drain what is already in the ring buffer.
  session_.stop_sampling();
  session_.drain();
  ::sigaction(SIGINT, &old_int_, nullptr);
  ::sigaction(SIGTERM, &old_term_, nullptr);
  // Stopped by Ctrl-C or --duration: the command keeps running unless the terminal's SIGINT
  // reached it too; report its status only if it already ended.
  command_.exited();
}

RecordResult Recorder::result(std::chrono::system_clock::time_point wall_start, double elapsed) {
  RecordResult r;
  static_cast<RecordStats&>(r) = stats_.stats(RecordStatistics::For::Summary);
  r.cost = stats_.cost(elapsed);
  r.command_exit_status = command_.exit_status();
  if (opt_.on_stats) opt_.on_stats(stats_.stats(RecordStatistics::For::Metrics));
  if (opt_.interval_s > 0) {
    cut_interval(true);
    return r;
  }
  profile::Profile& prof = r.profile;
  prof.period_ns = 1000000000LL / opt_.frequency_hz;
  prof.start_time_ns = unix_ns(wall_start);
  prof.duration_ns = static_cast<int64_t>(elapsed * 1e9);
  intake_.add_samples(prof);
  prof.stalls = intake_.stalls();
  if (opt_.keep_timeline) prof.timeline = intake_.timeline();
  if (intake_.dropped_times() != 0) {
    warn(fmt::format(
        "the timeline and the stalls' samples keep the last {} samples' times: {} earlier ones "
        "are not in them (the profile has every sample)",
        kMaxKeptTimes, intake_.dropped_times()));
  }
  add_profile_counters(r, prof);
  return r;
}

}  // namespace

Result<RecordResult> record(const RecordOptions& options) {
  Recorder r(options);
  return r.run();
}

}  // namespace ljprof::record
