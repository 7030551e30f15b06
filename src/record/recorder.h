// record/recorder.h: `ljprof record` — samples followed processes with a perf_event CPU clock
// on every CPU, walks each sample's mixed stack in the kernel (bpf/record.bpf.c, the one
// walker) and returns the symbolized profile.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/result.h"
#include "profile/profile.h"
#include "record/cost.h"

namespace ljprof::record {

struct IntervalProfiles;
struct RecordStats;

struct RecordOptions {
  std::vector<uint32_t> pids;        // -p: existing processes
  std::vector<std::string> command;  // -- COMMAND ARGS...: launched and followed with children
  bool all = false;                  // -a: every process with a detected LuaJIT runtime
  bool follow_forks = false;         // also follow children forked by -p processes
  uint32_t frequency_hz = 99;
  // --off-cpu: off-CPU intervals of followed threads at least this long are recorded, each
  // weighted by its length, at the stack where the thread left the CPU (0: no off-CPU time).
  uint64_t off_cpu_threshold_ns = 0;
  // --loop-stalls: a followed thread away from its event loop's wait (epoll_wait) at least this
  // long is a stall, reported with the samples taken inside it (0: not watched).
  uint64_t loop_stall_ns = 0;
  // --speedscope: keep every sample's thread and time for RecordResult::profile.timeline.
  bool keep_timeline = false;
  // --stats: the kernel program tallies its walks' reads and row lookups (RecordCost's
  // per-frame breakdown), at some 3% of the walk's time.
  bool tally_walk_work = false;
  double duration_s = 0;      // 0: until Ctrl-C, or until the followed processes are gone
  bool keep_running = false;  // with -p: until stopped, also once every process is gone
  uint32_t ringbuf_mb = 0;    // 0: sized by CPUs x frequency (bpf_session.cc ring_bytes)
  // The kernel's row map: CFI rows of the files followed processes map, 24 bytes each of kernel
  // memory allocated up front (at most record_types.h LJ_REC_MAX_ROWS_LIMIT).
  static constexpr uint32_t kDefaultUnwindRows = 1u << 21;  // LJ_REC_MAX_ROWS
  uint32_t unwind_rows = kDefaultUnwindRows;
  // Where built unwind tables are kept between runs (cfi/table_cache.h); "": not kept.
  std::string table_cache_dir;
  // Called about once a second with a one-line status; empty: no progress output.
  std::function<void(const std::string&)> progress;
  // Messages worth a user's attention (a file without CFI, a process that could not be
  // attached); empty: dropped.
  std::function<void(const std::string&)> warn;
  // With -a: only processes whose comm or executable name is one of `comms` (empty: any), and
  // whose cgroup (/proc/PID/cgroup, v2 path or any v1 hierarchy's) starts with `cgroup`.
  std::vector<std::string> comms;
  std::string cgroup;
  // Continuous mode (`ljprof agent`): every `interval_s` seconds the samples so far are cut into
  // one profile per process and handed to `on_interval`, and the next interval starts empty;
  // the last, partial interval is cut when recording stops. The profile in the result is then
  // empty. 0: one profile at the end.
  double interval_s = 0;
  std::function<void(IntervalProfiles&&)> on_interval;
  // Called about once a second, and once at the end, with the counters so far (metrics).
  std::function<void(const RecordStats&)> on_stats;
};

// Who a followed process is, read when its unwind context is first built (labels of the
// profiles `ljprof agent` pushes).
struct ProcessIdentity {
  uint32_t pid = 0;
  std::string comm;        // /proc/PID/comm
  std::string executable;  // the basename of /proc/PID/exe
  std::string runtime;     // "tarantool", "openresty" or "luajit"
  // OTEL_SERVICE_NAME, else PYROSCOPE_APPLICATION_NAME, from its environment; "" if neither.
  std::string service;
};

struct ProcessProfile {
  ProcessIdentity process;
  profile::Profile profile;
};

// One interval of continuous recording: a profile per process sampled in it.
struct IntervalProfiles {
  int64_t start_unix_ns = 0;
  int64_t end_unix_ns = 0;
  bool last = false;  // the partial interval cut when recording stopped
  std::vector<ProcessProfile> processes;
  // --loop-stalls: the event-loop stalls that ended in the interval, with the samples taken
  // inside them in this interval.
  std::vector<profile::LoopStall> stalls;
};

// The counters of a recording so far: the end-of-run summary and the agent's metrics.
struct RecordStats {
  uint64_t samples = 0;       // samples of followed processes the kernel saw
  uint64_t delivered = 0;     // samples that reached user space
  uint64_t reached_root = 0;  // delivered samples whose walk ended at a proven root
  // Samples taken before their process's unwind context (or the rows of the mapping the walk
  // stopped in) was published: the seconds after an exec, before ljprof read the new mappings.
  uint64_t without_context = 0;
  // Samples with no user stack to walk: the process was inside execve (the old image's
  // registers, the new image's memory) or exiting (its memory being torn down). Not walked, and
  // no unwinding failure.
  uint64_t without_user_stack = 0;
  size_t processes_followed = 0;  // processes with an unwind context now
  struct Reason {
    std::string name;    // what people read: "walk ended: no CFI"
    std::string metric;  // stable snake_case name (LJ_REC_COUNTERS / LJ_WALK_ENDS)
    uint64_t count = 0;
    // Where walks with this reason stopped, most frequent first (at most 3): "luajit+0x704e0"
    // (link-time address, as `ljprof cfi FILE --at` takes it) or "anonymous 0x7f..." (JIT code).
    // In the summary only; on_stats leaves it empty.
    std::vector<std::pair<std::string, uint64_t>> sites;
  };
  // The summary's: nonzero only; on_stats's: every reason (a metric exists from the start).
  std::vector<Reason> reasons;
  // The value of headline counter `id` (record/counters.h kHeadlineCounters: samples, delivered,
  // reached_root, without_context); 0 for another id.
  uint64_t headline_count(uint32_t id) const;
  // Levels now, every one in LJ_REC_GAUGES order: unwind rows in use and the row map's
  // capacity, the object cache's files and bytes.
  struct Gauge {
    std::string metric;  // stable snake_case name (LJ_REC_GAUGES)
    std::string text;    // what people read
    uint64_t value = 0;
  };
  std::vector<Gauge> gauges;
};

// What a recording cost (`ljprof record --stats`, bench/record_overhead): the agent's CPU and
// memory (record/cost.h), what attaching each process took, and the kernel program's own time
// per sample.
struct RecordCost {
  double cpu_s = 0;  // the agent's user + system CPU, whole run
  // Steady state: from kSteadyAfterS into the run (start-up and the first attaches done) to its
  // end, the agent's CPU and the samples delivered meanwhile. steady_s 0: the run was shorter.
  static constexpr double kSteadyAfterS = 2.0;
  double steady_s = 0;
  double steady_cpu_s = 0;
  uint64_t steady_samples = 0;
  uint64_t max_rss_kib = 0;
  ResidentParts resident;  // at the end, by owner (cost.h)
  // lj_rec_sample.walk_ns over every delivered sample.
  uint64_t walk_samples = 0;
  uint64_t walk_ns_median = 0;
  uint64_t walk_ns_p90 = 0;
  double walk_mean_frames = 0;
  WalkWork walk_work;  // what the program's walks did (under tally_walk_work)
  // The CPU loading the BPF programs took (map creation and the kernel verifier), once per run.
  double program_load_cpu_ms = 0;
  // The recorder thread's CPU for each process's first unwind context (reading its mappings,
  // analysing files not seen before, uploading their rows): the first kMaxAttachesListed in
  // order, and all of them summed.
  struct Attach {
    uint32_t pid = 0;
    std::string comm;
    double cpu_ms = 0;
  };
  static constexpr size_t kMaxAttachesListed = 32;
  std::vector<Attach> attaches;
  uint64_t attach_count = 0;
  double attach_cpu_ms = 0;
  // How delivered samples got their symbolized stack (record/stack_memo.h): an identical
  // sample's, built on outer frames already symbolized, or symbolized throughout; and how many
  // frames (or trace + frame units) were symbolized for them.
  uint64_t stacks_whole_hits = 0;
  uint64_t stacks_suffix_hits = 0;
  uint64_t stacks_symbolized = 0;
  uint64_t stack_units_symbolized = 0;
  // Unwind tables read from the table cache, and built (then stored) because it had none.
  std::string table_cache_dir;  // "": no cache
  uint64_t tables_from_cache = 0;
  uint64_t tables_built = 0;
  std::string table_cache_problem;  // the first file not used or not written, and why
};

struct RecordResult : RecordStats {
  profile::Profile profile;
  RecordCost cost;
  int command_exit_status = -1;  // `--` mode: the command's exit status (128+N for signal N)
};

// Runs until the duration elapses, SIGINT/SIGTERM arrives, or every followed process exited.
// Needs root (CAP_BPF, CAP_PERFMON, and reading /proc/PID/mem of the targets). The targets are
// never stopped or written.
Result<RecordResult> record(const RecordOptions& options);

}  // namespace ljprof::record
