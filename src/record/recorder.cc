#include "record/recorder.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <dirent.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <malloc.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "record.skel.h"
#include "record/cost.h"
#include "record/counters.h"
#include "record/exec_template.h"
#include "record/process_context.h"
#include "record/process_identity.h"
#include "record/sample_frames.h"
#include "record/stack_memo.h"
#include "record/stack_table.h"
#include "record/unwind_rows.h"
#include "symbolize/symbolize.h"

namespace ljprof::record {

static_assert(RecordOptions::kDefaultUnwindRows == LJ_REC_MAX_ROWS);

namespace {

std::atomic<bool> g_stop{false};
void on_signal(int) {
  g_stop = true;
}

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The last lines libbpf warned while the program loaded: when the kernel's verifier rejects it,
// the tail of its log (the instruction it refused and why) goes into ljprof's error message.
// libbpf prints through a C callback, hence one process-wide buffer, touched only by open_bpf.
constexpr size_t kLoadLogLines = 25;
std::vector<std::string> g_load_log;

int keep_load_warning(libbpf_print_level level, const char* format, va_list args) {
  if (level != LIBBPF_WARN) return 0;
  va_list copy;
  va_copy(copy, args);
  const int n = std::vsnprintf(nullptr, 0, format, copy);
  va_end(copy);
  if (n <= 0) return 0;
  std::string text(static_cast<size_t>(n) + 1, '\0');
  std::vsnprintf(text.data(), text.size(), format, args);
  text.resize(static_cast<size_t>(n));
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    if (end > start) g_load_log.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  if (g_load_log.size() > kLoadLogLines) {
    g_load_log.erase(g_load_log.begin(), g_load_log.end() - kLoadLogLines);
  }
  return 0;
}

// The summary's text of a counter (LJ_REC_COUNTERS).
std::string_view counter_text(uint32_t id) {
  for (const CounterSpec& spec : kCounterSpecs)
    if (spec.id == id) return spec.text;
  return "?";
}

// Online CPUs from /sys/devices/system/cpu/online ("0-3,6").
Result<std::vector<int>> online_cpus() {
  std::ifstream in("/sys/devices/system/cpu/online");
  std::string text;
  if (!std::getline(in, text)) return make_error("/sys/devices/system/cpu/online: unreadable");
  std::vector<int> cpus;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t comma = text.find(',', pos);
    std::string part =
        text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    int a = 0, b = 0;
    if (std::sscanf(part.c_str(), "%d-%d", &a, &b) == 2) {
      for (int c = a; c <= b && c < 4096; ++c) cpus.push_back(c);
    } else if (std::sscanf(part.c_str(), "%d", &a) == 1) {
      cpus.push_back(a);
    }
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  if (cpus.empty()) return make_error("/sys/devices/system/cpu/online: no CPU in '{}'", text);
  return cpus;
}

// How often the agent drains the sample ring. Each drain wakes the agent, and its cost is per
// wake-up as much as per sample (a sample's caches are cold after a sleep): waking 10 times a
// second instead of 50 took the agent's CPU per sample from ~10 to ~5.8 us (overhead.lua at 999
// Hz, the two binaries alternating, 2026-12-05). But a sample is symbolized after the fact from
// the live process: one that exits before the drain leaves its Lua frames unnamed (counted,
// never misnamed). So the ring is drained every kYoungDrainMs while a process is young (its
// context built within kYoungS — attached, forked or exec'd — or exec'd and not yet mapping
// LuaJIT: an exec storm's processes live milliseconds), every kDrainMs otherwise. (Waiting
// longer after a drain that found no sample starved exactly those: a storm's new process had no
// sample yet when its exec woke the agent, and was gone by the next drain. 100 luajit runs of
// ~35 ms: 1557 of 3243 samples with their Lua frames unnamed before, 1-13 after.) A filling ring
// and the notifications (exec, fork, an executable mmap) wake the agent at once whatever the period
// (record.bpf.c wakeup_bytes).
constexpr int kDrainMs = 100;
constexpr int kYoungDrainMs = 20;
constexpr double kYoungS = 2.0;

// Objects of a process younger than kCopyYoungS are copied by the kernel when a sample first meets
// them (record.bpf.c capture_young_ns, record_types.h lj_rec_capture): a process that lives
// less than the drain period (a CLI script, a `resty` run, a test) is gone when its samples are
// named, and the copies name them instead. 100 luajit runs of ~12 ms on a fast host: 596 of
// ~600 Lua frames unnamed without copies. The agent keeps a process's copies while it lives,
// at most kMaxCopiedBytes, and drops them kKeepCopiesS after the first (by then its samples of
// the young window were named; an older process is read live).
constexpr double kCopyYoungS = 2.0;
constexpr uint64_t kMaxCopiedBytes = 16u << 20;
constexpr double kKeepCopiesS = 10.0;

// Whether a `pids` value says the process needs the recorder's context: followed but none yet
// (a new or exec'd process), or one the kernel built at exec.
bool needs_context(uint32_t pids_value) {
  return pids_value == LJ_REC_PID_PENDING || pids_value >= LJ_REC_MAX_PROCS;
}

bool process_alive(uint32_t pid) {
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

class Recorder {
 public:
  explicit Recorder(const RecordOptions& o) : opt_(o), tables_(o.table_cache_dir) {
    cache_.use_table_cache(&tables_);
    // A file's rows go into the kernel as soon as its table is built, and the agent's copy is
    // freed (UnwindRows::upload): only one file's rows are held at a time while a process with
    // many libraries is analysed.
    cache_.on_table([this](MappedObject& obj) { rows_.upload(obj); });
    rows_.on_retire([this](uint32_t first, uint32_t count) { forget_rows(first, count); });
  }
  ~Recorder() { teardown(); }

  Result<RecordResult> run();

 private:
  Status open_bpf();
  Status attach_perf();
  Status launch_command();
  void follow(uint32_t pid);
  void setup(uint32_t pid);
  struct Proc;
  void publish(uint32_t pid, Proc& p);
  uint64_t proven_g(const Proc& p, const ProcessContext& next) const;
  void drop(uint32_t pid);
  void housekeeping();
  void scan_all();
  bool selected(uint32_t pid);
  void adopt(uint32_t pid);
  bool follow_if_luajit(uint32_t pid);
  void recheck_exec_candidates();
  void cut_interval(bool last);
  void release_gone();
  bool release_exited();
  void reclaim();
  enum class StatsFor { Summary, Metrics };
  RecordStats stats(StatsFor use);
  RecordCost cost(double elapsed);
  void handle_record(const void* data, size_t size);
  void handle_sample(const void* data, size_t size);
  void symbolize_sample(const lj_rec_sample& s, Proc& p, const ProcessContext& ctx);
  const ProcessContext* kernel_context(uint32_t pid, uint32_t generation);
  bool walked_before_its_rows(const lj_rec_sample& s, const Proc& p,
                              const ProcessContext& ctx) const;
  void publish_exec_template(uint32_t pid, const ProcessContext& ctx);
  void forget_rows(uint32_t row_first, uint32_t row_count);
  void for_each_kernel_slot(const std::function<void(uint32_t slot, lj_rec_proc& rec)>& f);
  void handle_capture(const void* data, size_t size);
  void drop_old_copies();
  std::vector<uint64_t> read_counters();
  std::string status_line(double elapsed);
  void teardown();
  void warn(const std::string& m) {
    if (opt_.warn) opt_.warn(m);
  }

  static int on_event(void* ctx, void* data, size_t size) {
    static_cast<Recorder*>(ctx)->handle_record(data, size);
    return 0;
  }
  static int on_notify(void* ctx, void* data, size_t size) {
    if (size >= sizeof(uint32_t)) {
      uint32_t pid = 0;
      std::memcpy(&pid, data, sizeof(pid));
      static_cast<Recorder*>(ctx)->rescan_.insert(pid);
    }
    return 0;
  }

  const RecordOptions& opt_;
  record_bpf* skel_ = nullptr;
  ring_buffer* rb_ = nullptr;
  std::vector<bpf_link*> links_;
  std::vector<int> perf_fds_;
  cfi::TableCache tables_;
  ObjectCache cache_;
  struct Proc {
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
    Clock::time_point first_copy{};
  };
  std::map<uint32_t, Proc> procs_;
  std::vector<uint32_t> free_slots_;
  // Executables whose exec template the kernel has (record_types.h lj_rec_exec_template), by
  // (inode, dev), with the template as uploaded (forget_rows finds the rows it names).
  std::map<std::pair<uint64_t, uint32_t>, lj_rec_exec_template> exec_templates_;
  // The contexts the kernel built at a fork or exec, as read back from their slot, by generation
  // (at most LJ_REC_EXEC_SLOTS: the kernel reuses its slots in turn).
  struct KernelContext {
    Clock::time_point read;
    std::unique_ptr<ProcessContext> ctx;
  };
  std::map<uint32_t, KernelContext> kernel_contexts_;
  // Kept this long after being read (their files' rows with them): samples are drained within
  // kDrainMs, and the process's own context replaces the kernel's within milliseconds.
  static constexpr double kKeepKernelContextS = 2.0;
  std::set<uint32_t> rescan_;
  // -a: selected processes that exec'd without LuaJIT yet -> loop rounds left to look again.
  std::map<uint32_t, int> exec_candidates_;
  // With -a: processes looked at that map no LuaJIT (or the filters reject), skipped by the
  // /proc scan (reading every process's maps every scan was most of -a's CPU on an idle host);
  // a notification of an exec or executable mmap looks at one again, and the scan forgets
  // those that exited.
  std::unordered_set<uint32_t> passed_over_;
  const uint32_t self_ = static_cast<uint32_t>(::getpid());
  static constexpr int kCandidateRounds = 5;
  std::set<uint32_t> warned_;
  SampleSymbolizer symbolizer_;
  // Symbolized stacks and their sample counts. Entries are stable: memo_ points into it.
  StackTable stacks_;
  // A sample's raw record -> its entry in stacks_ (record/stack_memo.h).
  StackMemo memo_{symbolizer_, stacks_};
  AgentCounts agent_counts_{};
  // The kernel's row map: which file's rows are where, given back once unmapped.
  UnwindRows rows_{cache_, agent_counts_, [this](const std::string& m) { warn(m); }};
  uint64_t delivered_ = 0, reached_root_ = 0;
  Clock::time_point last_setup_{};  // when a process's context was last built (kYoungS)
  bool table_cache_warned_ = false;
  std::array<uint64_t, LJ_END_COUNT>
      before_context_{};  // per LJ_END_*: walks that ran before their rows
  // Per LJ_END_*: where walks stopped ("module+0xOFF"); at most kMaxEndSites distinct sites
  // per reason, the rest counted under "other sites".
  std::array<std::map<std::string, uint64_t>, LJ_END_COUNT> end_sites_;
  static constexpr size_t kMaxEndSites = 4096;
  void note_end_site(const lj_rec_sample& s, const ProcessContext& ctx);
  pid_t child_ = -1;
  int child_status_ = -1;
  bool child_exited_ = false;
  WalkTimes walk_times_;
  RecordCost cost_;
  double steady_cpu0_ = -1;  // process CPU when steady state began (-1: not yet)
  uint64_t steady_delivered0_ = 0;
  // Continuous mode: when the current interval started (wall clock, for its profiles).
  std::chrono::system_clock::time_point interval_start_;
};

// The sample ring buffer. Its pages are resident in the agent from the start, twice over (the
// kernel maps the data area twice so records can wrap), so its size is the agent's largest fixed
// cost in memory. By default it holds about a second of samples with every CPU sampling a
// followed process: the agent drains it at least every kDrainMs, but an attach analysing a new
// binary (100-700 ms) delays the next drain. A record is 48 bytes per frame plus a header;
// 1 KiB is a 20-frame stack.
uint32_t ring_bytes(const RecordOptions& o) {
  if (o.ringbuf_mb != 0) return std::min<uint32_t>(o.ringbuf_mb, 1024) << 20;
  constexpr uint64_t kBytesPerSample = 1024, kMin = 256 << 10, kMax = 256 << 20;
  const int cpus = libbpf_num_possible_cpus();
  const uint64_t want = uint64_t(cpus > 0 ? cpus : 1) * o.frequency_hz * kBytesPerSample;
  uint64_t bytes = kMin;
  while (bytes < want && bytes < kMax) bytes <<= 1;
  return static_cast<uint32_t>(bytes);
}

Status Recorder::open_bpf() {
  g_load_log.clear();
  libbpf_set_print(keep_load_warning);
  skel_ = record_bpf__open();
  if (skel_ == nullptr) return make_error("cannot open the BPF object: {}", std::strerror(errno));
  skel_->rodata->follow_children = (opt_.follow_forks || !opt_.command.empty()) ? 1 : 0;
  skel_->rodata->notify_all = opt_.all ? 1 : 0;
  const uint32_t rb_bytes = ring_bytes(opt_);
  bpf_map__set_max_entries(skel_->maps.events, rb_bytes);
  skel_->rodata->wakeup_bytes = rb_bytes / 4;
  skel_->rodata->capture_young_ns = static_cast<uint64_t>(kCopyYoungS * 1e9);
  bpf_map__set_max_entries(skel_->maps.rows, opt_.unwind_rows);
  const double load_cpu0 = thread_cpu_seconds();
  const int load_err = record_bpf__load(skel_);
  cost_.program_load_cpu_ms = (thread_cpu_seconds() - load_cpu0) * 1e3;
  libbpf_set_print(nullptr);
  if (load_err != 0) {
    std::string log;
    for (const std::string& line : g_load_log) log += "\n  " + line;
    g_load_log.clear();
    if (load_err == -EPERM || geteuid() != 0) {
      return make_error(
          "loading the BPF program failed ({}): run as root (CAP_BPF + CAP_PERFMON) on a kernel "
          "with BTF (/sys/kernel/btf/vmlinux){}",
          std::strerror(-load_err), log.empty() ? "" : "; libbpf said:" + log);
    }
    return make_error("the kernel refused the BPF program ({}); libbpf's last messages:{}",
                      std::strerror(-load_err), log.empty() ? " none" : log);
  }
  g_load_log.clear();
  rows_.attach(bpf_map__fd(skel_->maps.rows), bpf_map__max_entries(skel_->maps.rows));
  if (int err = record_bpf__attach(skel_); err != 0) {
    return make_error("attaching the fork/exec/mmap tracepoints failed: {}", std::strerror(-err));
  }
  rb_ = ring_buffer__new(bpf_map__fd(skel_->maps.events), &Recorder::on_event, this, nullptr);
  if (rb_ == nullptr) return make_error("ring buffer setup failed: {}", std::strerror(errno));
  if (ring_buffer__add(rb_, bpf_map__fd(skel_->maps.notify), &Recorder::on_notify, this) != 0) {
    return make_error("notify ring buffer setup failed: {}", std::strerror(errno));
  }
  for (uint32_t s = LJ_REC_MAX_PROCS; s > 0; --s) free_slots_.push_back(s - 1);
  return Ok{};
}

Status Recorder::attach_perf() {
  LJ_ASSIGN_OR_RETURN(std::vector<int> cpus, online_cpus());
  for (int cpu : cpus) {
    perf_event_attr attr{};
    attr.type = PERF_TYPE_SOFTWARE;
    attr.size = sizeof(attr);
    attr.config = PERF_COUNT_SW_CPU_CLOCK;
    attr.freq = 1;
    attr.sample_freq = opt_.frequency_hz;
    const int fd =
        static_cast<int>(::syscall(__NR_perf_event_open, &attr, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC));
    if (fd < 0) {
      return make_error("perf_event_open(cpu-clock, cpu {}) failed: {}", cpu, std::strerror(errno));
    }
    perf_fds_.push_back(fd);
    bpf_link* link = bpf_program__attach_perf_event(skel_->progs.on_sample, fd);
    if (link == nullptr) {
      return make_error("attaching the sampler to cpu {} failed: {}", cpu, std::strerror(errno));
    }
    links_.push_back(link);
  }
  return Ok{};
}

void Recorder::follow(uint32_t pid) {
  uint32_t pending = LJ_REC_PID_PENDING;
  if (bpf_map_update_elem(bpf_map__fd(skel_->maps.pids), &pid, &pending, BPF_ANY) != 0) {
    ++agent_counts_[LJ_REC_CTR_PID_MAP_FULL];
    warn(fmt::format("cannot follow pid {}: pid map full", pid));
    return;
  }
  procs_[pid];
}

// Builds pid's context and publishes it: rows of new files, then the slot, then pid -> slot
// (so the kernel never sees a slot that is half written).
void Recorder::setup(uint32_t pid) {
  Proc& p = procs_[pid];
  const bool first = !p.ctx;
  const double cpu0 = thread_cpu_seconds();
  publish(pid, p);
  last_setup_ = Clock::now();
  if (first && p.ctx) {
    const double ms = (thread_cpu_seconds() - cpu0) * 1e3;
    ++cost_.attach_count;
    cost_.attach_cpu_ms += ms;
    if (cost_.attaches.size() < RecordCost::kMaxAttachesListed) {
      cost_.attaches.push_back({pid, p.identity.comm, ms});
    }
  }
}

void Recorder::publish(uint32_t pid, Proc& p) {
  auto ctx = build_process_context(pid, cache_);
  if (!ctx.ok()) {
    if (process_alive(pid) && warned_.insert(pid).second) warn(ctx.message());
    return;
  }
  // A process that exec'd while it was analysed (a shell's child becoming luajit) is not the
  // image its context describes: publishing it would let the new image's first samples be walked
  // with the old one's modules. Its exec notification (or, were that lost, the kernel's pending
  // mark, which housekeeping finds) brings it back here. A process that only mapped more code
  // meanwhile (ld.so loading libraries) is published as analysed: its first samples, in the
  // interpreter, prove the global_State its JIT traces are found by, and its mmap notifications
  // bring the rest.
  auto now_maps = proc::read_proc_maps(pid);
  if (now_maps.ok() && !still_mapped((*ctx)->signature, *now_maps)) return;
  // After an exec the old image's copies describe addresses that mean nothing any more.
  if (p.ctx && now_maps.ok() && !still_mapped(p.ctx->signature, *now_maps)) p.copies->clear();
  // One that exited took its files and vDSO with it: what could not be read of it is no news
  // (as for an error above).
  const bool alive = (*ctx)->warnings.empty() || process_alive(pid);
  for (const std::string& w : (*ctx)->warnings) {
    if (alive && warned_.insert(pid).second) warn(fmt::format("pid {}: {}", pid, w));
  }
  if (!tables_.first_problem().empty() && !table_cache_warned_) {
    table_cache_warned_ = true;
    warn(
        fmt::format("table cache: {} (the tables it would hold are built on every run; "
                    "--table-cache '' turns the cache off)",
                    tables_.first_problem()));
  }
  lj_rec_proc rec{};
  for (const ModuleView& m : (*ctx)->modules) {
    MappedObject* obj = m.object;
    rows_.upload(*obj);  // done already for a file analysed just now (ObjectCache::on_table)
    if (!obj->uploaded) continue;
    if (rec.nmodules >= LJ_REC_MAX_MODULES) {
      ++agent_counts_[LJ_REC_CTR_MODULES_FULL];
      continue;
    }
    rec.modules[rec.nmodules++] =
        lj_rec_module{m.start, m.end, m.bias, obj->row_first, obj->row_count};
  }
  // The kernel's row cache key; 0 means an empty entry there. 32 bits wrap only after 4
  // billion contexts, more than any recording builds.
  rec.generation = static_cast<uint32_t>((*ctx)->generation) & ~LJ_REC_EXEC_GENERATION;
  if (rec.generation == 0) rec.generation = 1;
  if ((*ctx)->luajit != nullptr) {
    rec.lj = (*ctx)->luajit->object->info;
    rec.vm_bias = (*ctx)->luajit->bias;
    rec.g_hint = (*ctx)->g_hint != 0 ? (*ctx)->g_hint : proven_g(p, **ctx);
  }
  if (free_slots_.empty()) {
    ++agent_counts_[LJ_REC_CTR_PROCS_FULL];
    warn(fmt::format("pid {}: more than {} processes followed at once", pid, LJ_REC_MAX_PROCS));
    return;
  }
  const uint32_t slot = free_slots_.back();
  free_slots_.pop_back();
  if (bpf_map_update_elem(bpf_map__fd(skel_->maps.procs), &slot, &rec, BPF_ANY) != 0 ||
      bpf_map_update_elem(bpf_map__fd(skel_->maps.pids), &pid, &slot, BPF_ANY) != 0) {
    free_slots_.push_back(slot);
    warn(fmt::format("pid {}: cannot publish its unwind context: {}", pid, std::strerror(errno)));
    return;
  }
  // The previous slot may still be read by a sample in flight; it is reused only after every
  // other free slot, which is long after any in-flight program finished.
  if (p.slot < LJ_REC_MAX_PROCS) free_slots_.insert(free_slots_.begin(), p.slot);
  p.slot = slot;
  const uint64_t now = monotonic_ns();
  for (const ModuleView& m : (*ctx)->modules) {
    if (m.object->uploaded) p.published_ns.emplace(std::make_pair(m.start, m.object), now);
  }
  p.identity = identify_process(pid, **ctx);
  if ((*ctx)->mem) (*ctx)->mem->use_captured(p.copies);
  p.ctx = std::move(*ctx);
  publish_exec_template(pid, *p.ctx);
}

// The context of generation `generation` that the kernel built for pid at a fork or exec
// (record.bpf.c next_kernel_slot), read back from its slot: the modules the walk used, each
// file known by its rows. Null once the kernel reused the slot (LJ_REC_EXEC_SLOTS forks and
// execs later; samples are drained within 100 ms).
const ProcessContext* Recorder::kernel_context(uint32_t pid, uint32_t generation) {
  if (auto it = kernel_contexts_.find(generation); it != kernel_contexts_.end()) {
    return it->second.ctx->pid == pid ? it->second.ctx.get() : nullptr;
  }
  const ProcessContext* found = nullptr;
  for_each_kernel_slot([&](uint32_t, lj_rec_proc& rec) {
    if (found != nullptr || rec.generation != generation || rec.owner_pid != pid) return;
    auto ctx = std::make_unique<ProcessContext>();
    ctx->pid = pid;
    ctx->generation = (uint64_t{1} << 40) | generation;  // apart from the recorder's own
    for (uint32_t i = 0; i < std::min<uint32_t>(rec.nmodules, LJ_REC_MAX_MODULES); ++i) {
      const lj_rec_module& m = rec.modules[i];
      MappedObject* obj = nullptr;
      cache_.for_each([&](MappedObject& o) {
        if (o.uploaded && o.row_first == m.row_first && o.row_count == m.row_count) obj = &o;
      });
      if (obj == nullptr) continue;
      ++obj->contexts;  // uncounted by ~ProcessContext: its rows stay while this is kept
      ctx->modules.push_back({m.start, m.end, m.bias, obj});
    }
    std::sort(ctx->modules.begin(), ctx->modules.end(),
              [](const ModuleView& a, const ModuleView& b) { return a.start < b.start; });
    for (const ModuleView& m : ctx->modules) {
      if (rec.lj.version != 0 && m.object->luajit && m.bias == rec.vm_bias) ctx->luajit = &m;
    }
    if (auto mem = proc::ProcessMemory::open(pid); mem.ok()) ctx->mem = std::move(*mem);
    if (kernel_contexts_.size() >= LJ_REC_EXEC_SLOTS)
      kernel_contexts_.erase(kernel_contexts_.begin());
    found = kernel_contexts_.emplace(generation, KernelContext{Clock::now(), std::move(ctx)})
                .first->second.ctx.get();
  });
  return found;
}

// Each of the kernel's own slots of `procs` (record.bpf.c next_kernel_slot) as read now.
void Recorder::for_each_kernel_slot(const std::function<void(uint32_t slot, lj_rec_proc& rec)>& f) {
  for (uint32_t slot = LJ_REC_MAX_PROCS; slot < LJ_REC_MAX_PROCS + LJ_REC_EXEC_SLOTS; ++slot) {
    lj_rec_proc rec{};
    if (bpf_map_lookup_elem(bpf_map__fd(skel_->maps.procs), &slot, &rec) == 0) f(slot, rec);
  }
}

// Gives the kernel the template of pid's executable, once per executable: its next exec gets a
// context at once (record.bpf.c on_exec).
void Recorder::publish_exec_template(uint32_t pid, const ProcessContext& ctx) {
  auto key = exec_key(pid);
  if (!key.ok() || exec_templates_.count({key->ino, key->dev})) return;
  auto auxv = read_auxv(pid);
  if (!auxv.ok()) return;
  auto t = exec_template(ctx, *auxv);
  if (!t.ok()) return;
  // `-a` without filters follows every process that runs LuaJIT: one that execs this executable
  // is followed from its exec (a filter on comm or cgroup is the recorder's to apply).
  t->follow_on_exec =
      opt_.all && opt_.comms.empty() && opt_.cgroup.empty() && ctx.luajit != nullptr;
  if (bpf_map_update_elem(bpf_map__fd(skel_->maps.exec_templates), &*key, &*t, BPF_ANY) != 0) {
    return;  // the map is full: later executables are set up by the recorder alone
  }
  exec_templates_.emplace(std::make_pair(key->ino, key->dev), *t);
}

// A file's rows are being given back (UnwindRows::retire): the exec templates and the kernel's
// own contexts that name them go first, so no exec builds, and no sample walks, a context with
// rows another file may get. (An exec that read a template just before it went still builds
// one; the rows are freed only after every program running then has returned, and that
// process's own context replaces it within milliseconds.)
void Recorder::forget_rows(uint32_t row_first, uint32_t row_count) {
  auto names = [&](const auto& modules, uint32_t n) {
    for (uint32_t i = 0; i < n; ++i) {
      if (modules[i].row_count != 0 && modules[i].row_first < row_first + row_count &&
          row_first < modules[i].row_first + modules[i].row_count) {
        return true;
      }
    }
    return false;
  };
  for (auto it = exec_templates_.begin(); it != exec_templates_.end();) {
    if (names(it->second.modules, std::min<uint32_t>(it->second.nmodules, LJ_REC_EXEC_MODULES))) {
      lj_rec_exec_key key{it->first.first, it->first.second, 0};
      bpf_map_delete_elem(bpf_map__fd(skel_->maps.exec_templates), &key);
      it = exec_templates_.erase(it);
    } else {
      ++it;
    }
  }
  for_each_kernel_slot([&](uint32_t slot, lj_rec_proc& rec) {
    if (rec.owner_pid == 0 ||
        !names(rec.modules, std::min<uint32_t>(rec.nmodules, LJ_REC_MAX_MODULES))) {
      return;
    }
    rec.owner_pid = 0;  // on_sample walks with it no more
    bpf_map_update_elem(bpf_map__fd(skel_->maps.procs), &slot, &rec, BPF_ANY);
  });
}

// The global_State a walk proved for this process in its current slot (record.bpf.c keeps it in
// lj_rec_proc.g_hint), when the new context runs the same LuaJIT at the same place. Without it a
// republished context (a new executable mapping: the JIT's machine-code areas, a dlopen) would
// forget G until the next walk through the interpreter; a process looping in a trace meanwhile
// has no G to find its trace by (x86-64 non-GC64 traces keep no DISPATCH register). A stale G
// costs nothing: the walker proves G (G->cur_L->glref == G) before it uses one.
uint64_t Recorder::proven_g(const Proc& p, const ProcessContext& next) const {
  if (p.slot >= LJ_REC_MAX_PROCS || !p.ctx || p.ctx->luajit == nullptr || next.luajit == nullptr ||
      p.ctx->luajit->object != next.luajit->object || p.ctx->luajit->bias != next.luajit->bias) {
    return 0;
  }
  lj_rec_proc old{};
  if (bpf_map_lookup_elem(bpf_map__fd(skel_->maps.procs), &p.slot, &old) != 0) return 0;
  return old.g_hint;
}

void Recorder::drop(uint32_t pid) {
  auto it = procs_.find(pid);
  if (it == procs_.end() || it->second.gone) return;
  bpf_map_delete_elem(bpf_map__fd(skel_->maps.pids), &pid);
  if (it->second.slot < LJ_REC_MAX_PROCS) free_slots_.insert(free_slots_.begin(), it->second.slot);
  it->second.slot = LJ_REC_PID_PENDING;
  it->second.gone = true;  // its context stays: samples still in the ring buffer need it
}

void Recorder::scan_all() {
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return;
  std::unordered_set<uint32_t> seen;
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    const unsigned long pid = std::strtoul(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || pid == 0 || pid == self_ || pid > UINT32_MAX) continue;
    const auto id = static_cast<uint32_t>(pid);
    seen.insert(id);
    if (procs_.count(id) || passed_over_.count(id) || exec_candidates_.count(id)) continue;
    adopt(id);
    if (!procs_.count(id)) passed_over_.insert(id);
  }
  ::closedir(d);
  std::erase_if(passed_over_, [&](uint32_t pid) { return !seen.count(pid); });  // exited
}

void Recorder::housekeeping() {
  // Followed pids the kernel marked pending (a fork or exec whose notification was lost when
  // the notify ring was full) or that the kernel added (children).
  const int fd = bpf_map__fd(skel_->maps.pids);
  uint32_t key = 0, next = 0;
  uint32_t* prev = nullptr;
  std::vector<uint32_t> pending;
  size_t guard = 0;
  while (bpf_map_get_next_key(fd, prev, &next) == 0 && guard++ < LJ_REC_MAX_PIDS * 2) {
    uint32_t value = 0;
    if (bpf_map_lookup_elem(fd, &next, &value) == 0 && needs_context(value)) {
      pending.push_back(next);
    }
    key = next;
    prev = &key;
  }
  for (uint32_t pid : pending) rescan_.insert(pid);
  for (auto& [pid, p] : procs_) {
    if (!p.gone && !process_alive(pid)) rescan_.insert(pid);
  }
  drop_old_copies();
  reclaim();
}

// Gives back what exited processes and replaced contexts held: their contexts, the kernel rows
// of files no process maps any more, idle files of the object cache beyond its bound, and the
// symbolizer's entries of contexts and processes gone. A process published without some rows
// for want of room is published again once rows were freed.
void Recorder::reclaim() {
  bool released = release_exited();
  std::erase_if(kernel_contexts_,
                [](const auto& e) { return seconds_since(e.second.read) > kKeepKernelContextS; });
  if (rows_.sweep(monotonic_ns())) {
    released = true;
    for (auto& [pid, p] : procs_) {
      if (!p.gone && p.ctx && waiting_for_rows(*p.ctx)) setup(pid);
    }
  }
  const size_t pruned = cache_.prune();
  agent_counts_[LJ_REC_CTR_OBJECTS_PRUNED] += pruned;
  // The symbolizer forgets contexts released here and those publish replaced (a process that
  // exec'd or mapped more code).
  std::set<uint64_t> generations;
  std::set<uint32_t> pids;
  for (auto& [pid, p] : procs_) {
    if (!p.ctx) continue;
    generations.insert(p.ctx->generation);
    pids.insert(pid);
  }
  symbolizer_.forget_all_but(generations, pids);
  if (!released && pruned == 0) return;
  // What was freed goes back to the system: glibc keeps freed heap memory for reuse, and each
  // new binary's analysis leaves it scattered. A churn of new binaries under `agent` measured
  // 8.9 -> 13.6 MiB of anonymous RSS after the second wave without this, 5.4 -> 5.5 with it
  // (tests/export/agent_test.cc ChurnOfNewBinariesKeepsRowsAndMemoryFlat).
  ::malloc_trim(0);
}

// An exited process's context (and through it its files' rows and cache entries) is released
// once the ring holds none of its samples; its Proc, whose identity labels the interval's
// profile, at the interval's cut (release_gone), or here when there are no intervals. True when
// a context was released.
bool Recorder::release_exited() {
  if (std::none_of(procs_.begin(), procs_.end(),
                   [](const auto& e) { return e.second.gone && e.second.ctx; })) {
    return false;
  }
  ring_buffer__consume(rb_);
  for (auto& [pid, p] : procs_) {
    if (p.gone) p.ctx.reset();
  }
  if (opt_.interval_s <= 0) release_gone();
  return true;
}

void Recorder::handle_record(const void* data, size_t size) {
  uint32_t kind = 0;
  if (size >= sizeof(kind)) std::memcpy(&kind, data, sizeof(kind));
  if (kind == LJ_REC_KIND_SAMPLE) {
    handle_sample(data, size);
  } else if (kind == LJ_REC_KIND_CAPTURE) {
    handle_capture(data, size);
  } else {
    ++agent_counts_[LJ_REC_CTR_MALFORMED];
  }
}

// A young process's object as the kernel copied it (record_types.h lj_rec_capture). It precedes
// in the ring the first sample that needs it, so that sample's process has a context already.
void Recorder::handle_capture(const void* data, size_t size) {
  const size_t header = offsetof(lj_rec_capture, bytes);
  lj_rec_capture c;
  if (size < header) {
    ++agent_counts_[LJ_REC_CTR_MALFORMED];
    return;
  }
  std::memcpy(&c, data, header);
  if (c.len == 0 || c.len >= LJ_REC_CAPTURE_MAX || header + c.len > size) {
    ++agent_counts_[LJ_REC_CTR_MALFORMED];
    return;
  }
  auto it = procs_.find(c.pid);
  if (it == procs_.end()) return;  // not followed any more: its samples are not named either
  Proc& p = it->second;
  const auto* bytes = static_cast<const uint8_t*>(data) + header;
  if (!p.copies->add(c.addr, {bytes, c.len}, kMaxCopiedBytes)) {
    ++agent_counts_[LJ_REC_CTR_CAPTURE_DROPPED];
    return;
  }
  if (p.first_copy == Clock::time_point{}) p.first_copy = Clock::now();
}

// A live process's copies are dropped kKeepCopiesS after the first: its young window's samples
// were named by then, and later ones read its memory.
void Recorder::drop_old_copies() {
  const auto now = Clock::now();
  for (auto& [pid, p] : procs_) {
    if (p.first_copy != Clock::time_point{} && !p.copies->empty() &&
        std::chrono::duration<double>(now - p.first_copy).count() > kKeepCopiesS) {
      p.copies->clear();
    }
  }
}

void Recorder::handle_sample(const void* data, size_t size) {
  const size_t header = offsetof(lj_rec_sample, frames);
  if (size < header) {
    ++agent_counts_[LJ_REC_CTR_MALFORMED];
    return;
  }
  lj_rec_sample s;
  std::memcpy(&s, data, std::min(size, sizeof(s)));
  if (s.nframes > LJ_WALK_MAX_FRAMES || header + s.nframes * sizeof(lj_rec_frame) > size) {
    ++agent_counts_[LJ_REC_CTR_MALFORMED];
    return;
  }
  ++delivered_;
  if (s.end == LJ_END_ROOT) ++reached_root_;
  walk_times_.add(s.walk_ns, s.nframes);
  // Walked with a context the kernel built at a fork or exec: the recorder's own context is the
  // old image's, or none yet (a child whose fork notification is not handled yet); the
  // kernel's names the files the walk went through.
  const bool kernel_built = (s.generation & LJ_REC_EXEC_GENERATION) != 0;
  auto it = kernel_built ? procs_.try_emplace(s.pid).first : procs_.find(s.pid);
  if (it == procs_.end()) {
    ++agent_counts_[LJ_REC_CTR_NO_PROCESS];
    return;
  }
  const ProcessContext* ctx =
      kernel_built ? kernel_context(s.pid, s.generation) : it->second.ctx.get();
  if (ctx == nullptr) {
    ++agent_counts_[LJ_REC_CTR_NO_PROCESS];
    return;
  }
  symbolize_sample(s, it->second, *ctx);
}

// Whether a walk that did not reach a root stopped in code whose rows the kernel did not have
// yet: a mapping published after the sample, or — with a context the kernel built at a fork or
// exec, which has only the executable, its interpreter and the vDSO — a library mapped since.
bool Recorder::walked_before_its_rows(const lj_rec_sample& s, const Proc& p,
                                      const ProcessContext& ctx) const {
  if ((s.generation & LJ_REC_EXEC_GENERATION) != 0) {
    return s.end == LJ_END_NO_MODULE || s.end == LJ_END_TRACE_NO_G;
  }
  const ModuleView* m = ctx.module_at(s.end_pc);
  if (m == nullptr) return false;
  auto pub = p.published_ns.find({m->start, m->object});
  return pub != p.published_ns.end() && pub->second > s.time_ns;
}

void Recorder::symbolize_sample(const lj_rec_sample& s, Proc& p, const ProcessContext& ctx) {
  const StackMemo::Stack& raw = memo_.stack_of(s, ctx);
  for (const auto& [id, n] : raw.counted) agent_counts_[id] += n;
  if (s.end != LJ_END_ROOT && s.end != LJ_END_RA_ZERO && s.end < before_context_.size() &&
      !raw.stack->first.frames.empty() && walked_before_its_rows(s, p, ctx)) {
    ++before_context_[s.end];
    std::vector<profile::Frame> late = stacks_.frames(*raw.stack);
    late.back().function = fmt::format("[unknown: {}]", counter_text(LJ_REC_CTR_BEFORE_CONTEXT));
    stacks_.entry(s.pid, std::move(late)).second += 1;
    return;
  }
  if (s.end != LJ_END_ROOT && s.end != LJ_END_RA_ZERO) note_end_site(s, ctx);
  raw.stack->second += 1;
}

void Recorder::note_end_site(const lj_rec_sample& s, const ProcessContext& ctx) {
  if (s.end >= end_sites_.size()) return;
  std::string where;
  if (const ModuleView* m = ctx.module_at(s.end_pc)) {
    const std::string& path = m->object->path;
    where = fmt::format("{}+{:#x}", path.substr(path.rfind('/') + 1), s.end_pc - m->bias);
  } else {
    where = fmt::format("anonymous {:#x}", s.end_pc);
  }
  auto& sites = end_sites_[s.end];
  if (sites.size() >= kMaxEndSites && !sites.count(where)) where = "other sites";
  ++sites[where];
}

std::vector<uint64_t> Recorder::read_counters() {
  std::vector<uint64_t> total(LJ_REC_NCOUNTERS, 0);
  const int ncpu = libbpf_num_possible_cpus();
  if (ncpu <= 0) return total;
  std::vector<uint64_t> per(static_cast<size_t>(ncpu));
  const int fd = bpf_map__fd(skel_->maps.counters);
  for (uint32_t i = 0; i < LJ_REC_NCOUNTERS; ++i) {
    if (bpf_map_lookup_elem(fd, &i, per.data()) != 0) continue;
    for (uint64_t v : per) total[i] += v;
  }
  return total;
}

std::string Recorder::status_line(double elapsed) {
  auto c = read_counters();
  const uint64_t seen = c[LJ_REC_CTR_SAMPLES];
  size_t live = 0;
  for (auto& [pid, p] : procs_) live += p.gone ? 0 : 1;
  return fmt::format("ljprof record: {:.1f} s, {} process{}, {} samples, {:.1f}% unwound to a root",
                     elapsed, live, live == 1 ? "" : "es", seen,
                     seen ? 100.0 * reached_root_ / seen : 0.0);
}

Status Recorder::launch_command() {
  int gate[2];
  if (::pipe2(gate, O_CLOEXEC) != 0) return make_error("pipe: {}", std::strerror(errno));
  child_ = ::fork();
  if (child_ < 0) return make_error("fork: {}", std::strerror(errno));
  if (child_ == 0) {
    // Wait until the parent follows this pid, so the exec is seen by the kernel program.
    ::close(gate[1]);
    char b;
    if (::read(gate[0], &b, 1) != 1) ::_exit(127);
    std::vector<char*> argv;
    for (const std::string& a : opt_.command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    std::fprintf(stderr, "ljprof record: cannot run %s: %s\n", argv[0], std::strerror(errno));
    ::_exit(127);
  }
  ::close(gate[0]);
  follow(static_cast<uint32_t>(child_));
  const char go = 1;
  const bool ok = ::write(gate[1], &go, 1) == 1;
  ::close(gate[1]);
  if (!ok) return make_error("cannot start {}: {}", opt_.command[0], std::strerror(errno));
  return Ok{};
}

// The counters so far. For the summary: the reasons that occurred, each with the three sites
// where most walks stopped. For the metrics page (built every second): every reason, also those
// still at zero (a series exists from the first scrape), without sites (the page has no place
// for them).
RecordStats Recorder::stats(StatsFor use) {
  const bool every_reason = use == StatsFor::Metrics;
  RecordStats r;
  const auto c = read_counters();
  r.samples = c[LJ_REC_CTR_SAMPLES];
  r.delivered = delivered_;
  r.reached_root = reached_root_;
  for (auto& [pid, p] : procs_) r.processes_followed += (p.gone || !p.ctx) ? 0 : 1;
  uint64_t before_context = 0;
  for (uint32_t e = 0; e < before_context_.size(); ++e) {
    if (e == LJ_END_ROOT) continue;
    const uint64_t late = std::min(before_context_[e], c[LJ_REC_CTR_END_BASE + e]);
    before_context += late;
    const uint64_t ended = c[LJ_REC_CTR_END_BASE + e] - late;
    if (ended == 0 && !every_reason) continue;
    RecordStats::Reason reason{fmt::format("walk ended: {}", symbolize::walk_end_name(e)),
                               fmt::format("walk_end_{}", symbolize::walk_end_metric(e)),
                               ended,
                               {}};
    if (use == StatsFor::Summary) {
      reason.sites.resize(std::min<size_t>(3, end_sites_[e].size()));
      std::partial_sort_copy(end_sites_[e].begin(), end_sites_[e].end(), reason.sites.begin(),
                             reason.sites.end(),
                             [](const auto& a, const auto& b) { return a.second > b.second; });
    }
    r.reasons.push_back(std::move(reason));
  }
  agent_counts_[LJ_REC_CTR_BEFORE_CONTEXT] = before_context;
  r.without_context = c[LJ_REC_CTR_NO_CONTEXT] + before_context;
  r.without_user_stack = c[LJ_REC_CTR_EXITING] + c[LJ_REC_CTR_IN_EXEC];
  std::array<uint64_t, LJ_REC_NGAUGES> levels{};
  levels[LJ_REC_GAUGE_ROWS_IN_USE] = rows_.in_use();
  levels[LJ_REC_GAUGE_ROWS_CAPACITY] = rows_.capacity();
  levels[LJ_REC_GAUGE_OBJECT_CACHE_ENTRIES] = cache_.size();
  levels[LJ_REC_GAUGE_OBJECT_CACHE_BYTES] = cache_.held_bytes();
  for (uint32_t g = 0; g < LJ_REC_NGAUGES; ++g) {
    r.gauges.push_back(
        {std::string(kGaugeSpecs[g].metric), std::string(kGaugeSpecs[g].text), levels[g]});
  }
  // Every other counter of the registry, in its order (the sample total is the summary's
  // first line, not a reason).
  for (const CounterSpec& spec : kCounterSpecs) {
    if (spec.id == LJ_REC_CTR_SAMPLES) continue;
    const uint64_t v = spec.where == CounterWhere::KERNEL ? c[spec.id] : agent_counts_[spec.id];
    if (v != 0 || every_reason) {
      r.reasons.push_back({std::string(spec.text), std::string(spec.metric), v, {}});
    }
  }
  return r;
}

RecordCost Recorder::cost(double elapsed) {
  RecordCost c = cost_;
  c.cpu_s = process_cpu_seconds();
  if (steady_cpu0_ >= 0) {
    c.steady_s = elapsed - RecordCost::kSteadyAfterS;
    c.steady_cpu_s = c.cpu_s - steady_cpu0_;
    c.steady_samples = delivered_ - steady_delivered0_;
  }
  c.max_rss_kib = max_rss_kib();
  c.walk_samples = walk_times_.count();
  c.walk_ns_median = walk_times_.quantile_ns(0.5);
  c.walk_ns_p90 = walk_times_.quantile_ns(0.9);
  c.walk_mean_frames = walk_times_.mean_frames();
  c.stacks_whole_hits = memo_.stats().whole_hits;
  c.stacks_suffix_hits = memo_.stats().suffix_hits;
  c.stacks_symbolized = memo_.stats().symbolized;
  c.stack_units_symbolized = memo_.stats().units_symbolized;
  if (tables_.enabled()) {
    const cfi::TableCache::Counts& t = tables_.counts();
    c.table_cache_dir = tables_.dir();
    c.tables_from_cache = t.hits;
    c.tables_built = t.misses + t.rejected;
    c.table_cache_problem = tables_.first_problem();
  }
  return c;
}

bool Recorder::selected(uint32_t pid) {
  if (!opt_.comms.empty()) {
    const std::string comm = proc::read_comm(pid), exe = proc::executable_name(pid);
    if (std::find_if(opt_.comms.begin(), opt_.comms.end(), [&](const std::string& name) {
          return name == comm || name == exe;
        }) == opt_.comms.end()) {
      return false;
    }
  }
  return proc::in_cgroup(pid, opt_.cgroup);
}

// With -a: follows a process the filters select once it maps a LuaJIT runtime (found by the
// /proc scan, or at its exec).
void Recorder::adopt(uint32_t pid) {
  if (selected(pid)) follow_if_luajit(pid);
}

// Follows `pid` if it maps a LuaJIT runtime now; false if not.
bool Recorder::follow_if_luajit(uint32_t pid) {
  if (!maps_luajit(pid, cache_)) return false;
  follow(pid);
  setup(pid);
  return true;
}

// Selected processes that exec'd without a LuaJIT mapping yet, looked at again once per loop
// round (every kYoungDrainMs: candidates keep the loop young) until one maps it or
// kCandidateRounds pass.
void Recorder::recheck_exec_candidates() {
  for (auto it = exec_candidates_.begin(); it != exec_candidates_.end();) {
    const uint32_t pid = it->first;
    if (procs_.count(pid) || !process_alive(pid) || follow_if_luajit(pid)) {
      it = exec_candidates_.erase(it);
    } else if (--it->second == 0) {
      passed_over_.insert(pid);  // looked at for kCandidateRounds: no LuaJIT
      it = exec_candidates_.erase(it);
    } else {
      ++it;
    }
  }
}

// Hands the interval's stacks, one profile per process, to on_interval and starts the next
// interval empty. The symbolized-stack cache points into the stacks, so it starts over too.
void Recorder::cut_interval(bool last) {
  const auto now = std::chrono::system_clock::now();
  auto unix_ns = [](std::chrono::system_clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  };
  IntervalProfiles cut;
  cut.start_unix_ns = unix_ns(interval_start_);
  cut.end_unix_ns = unix_ns(now);
  cut.last = last;
  std::map<uint32_t, size_t> index;  // pid -> its entry in cut.processes
  stacks_.for_each([&](uint32_t pid, std::vector<profile::Frame> frames, int64_t count) {
    auto [at, added] = index.try_emplace(pid, cut.processes.size());
    if (added) {
      ProcessProfile pp;
      auto proc = procs_.find(pid);
      if (proc != procs_.end()) pp.process = proc->second.identity;
      pp.process.pid = pid;
      pp.profile.period_ns = 1000000000LL / opt_.frequency_hz;
      pp.profile.start_time_ns = cut.start_unix_ns;
      pp.profile.duration_ns = cut.end_unix_ns - cut.start_unix_ns;
      cut.processes.push_back(std::move(pp));
    }
    profile::Sample sample;
    sample.pid = pid;
    sample.frames = std::move(frames);
    sample.count = count;
    cut.processes[at->second].profile.samples.push_back(std::move(sample));
  });
  memo_.clear();
  stacks_.clear();
  interval_start_ = now;
  release_gone();
  if (opt_.on_interval) opt_.on_interval(std::move(cut));
}

// Forgets processes that exited before this interval's samples were drained: no sample of
// theirs is left to symbolize (their slot was already freed when they were dropped).
void Recorder::release_gone() {
  for (auto it = procs_.begin(); it != procs_.end();) {
    if (it->second.gone) {
      warned_.erase(it->first);
      it = procs_.erase(it);
    } else {
      ++it;
    }
  }
}

Result<RecordResult> Recorder::run() {
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
  LJ_TRY(open_bpf());
  for (uint32_t pid : opt_.pids) {
    follow(pid);
    setup(pid);
  }
  if (opt_.all) scan_all();
  g_stop = false;
  struct sigaction sa {
  }, old_int{}, old_term{};
  sa.sa_handler = &on_signal;
  ::sigaction(SIGINT, &sa, &old_int);
  ::sigaction(SIGTERM, &sa, &old_term);
  const auto wall_start = std::chrono::system_clock::now();
  LJ_TRY(attach_perf());
  if (!opt_.command.empty()) LJ_TRY(launch_command());
  const Clock::time_point start = Clock::now();
  Clock::time_point last_status = start, last_house = start, last_scan = start, last_cut = start;
  interval_start_ = std::chrono::system_clock::now();

  while (!g_stop) {
    // Samples do not wake this loop (record.bpf.c wakeup_bytes): they are drained every
    // kDrainMs (kYoungDrainMs while a process is young), notifications (exec, fork) and a
    // filling ring still wake it at once.
    // The wait ends no later than the next interval cut or the end of --duration: an interval
    // holds its own second of samples, not up to a drain period more or less.
    const bool young = !exec_candidates_.empty() || seconds_since(last_setup_) < kYoungS;
    double wait_s = (young ? kYoungDrainMs : kDrainMs) / 1e3;
    if (opt_.interval_s > 0) wait_s = std::min(wait_s, opt_.interval_s - seconds_since(last_cut));
    if (opt_.duration_s > 0) wait_s = std::min(wait_s, opt_.duration_s - seconds_since(start));
    ring_buffer__poll(rb_, static_cast<int>(std::ceil(std::max(wait_s, 0.0) * 1e3)));
    ring_buffer__consume(rb_);
    for (auto it = rescan_.begin(); it != rescan_.end(); it = rescan_.erase(it)) {
      const uint32_t pid = *it;
      if (!process_alive(pid)) {
        drop(pid);
        continue;
      }
      auto p = procs_.find(pid);
      if (p == procs_.end()) {
        uint32_t slot = 0;
        if (bpf_map_lookup_elem(bpf_map__fd(skel_->maps.pids), &pid, &slot) == 0) {
          procs_[pid];  // a child the kernel added
          setup(pid);
        } else if (opt_.all && pid != self_) {
          // Every exec and executable mmap of the host is notified (notify_all): a process
          // passed over before may have loaded LuaJIT since.
          passed_over_.erase(pid);
          if (selected(pid) && !follow_if_luajit(pid)) {
            // No LuaJIT mapped yet: after an exec ld.so may be about to map it (Debian's luajit
            // links libluajit-5.1.so), so look again for a few rounds. The filters are not
            // asked again: comm and cgroup were set by the exec.
            exec_candidates_.try_emplace(pid, kCandidateRounds);
          } else if (!procs_.count(pid)) {
            passed_over_.insert(pid);
          }
        }
        continue;
      }
      if (p->second.gone) continue;
      // Exec (slot pending) or new mappings: rebuild only when the code mappings changed.
      uint32_t value = 0;
      const bool pending = bpf_map_lookup_elem(bpf_map__fd(skel_->maps.pids), &pid, &value) == 0 &&
                           needs_context(value);
      if (!pending && p->second.ctx) {
        auto maps = proc::read_proc_maps(pid);
        if (maps.ok() && executable_signature(*maps) == p->second.ctx->signature) continue;
      }
      setup(pid);
    }
    recheck_exec_candidates();
    if (child_ > 0 && !child_exited_) {
      int status = 0;
      if (::waitpid(child_, &status, WNOHANG) == child_) {
        child_exited_ = true;
        child_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
    }
    const double elapsed = seconds_since(start);
    if (steady_cpu0_ < 0 && elapsed >= RecordCost::kSteadyAfterS) {
      steady_cpu0_ = process_cpu_seconds();
      steady_delivered0_ = delivered_;
    }
    if (opt_.duration_s > 0 && elapsed >= opt_.duration_s) break;
    if (child_exited_) break;
    if (seconds_since(last_house) >= 0.5) {
      housekeeping();
      last_house = Clock::now();
    }
    if (opt_.all && seconds_since(last_scan) >= 2.0) {
      scan_all();
      last_scan = Clock::now();
    }
    if (opt_.command.empty() && !opt_.all && !opt_.keep_running) {
      bool any = false;
      for (auto& [pid, p] : procs_) any = any || (!p.gone && process_alive(pid));
      if (!any) break;
    }
    if (seconds_since(last_status) >= 1.0) {
      if (opt_.progress) opt_.progress(status_line(elapsed));
      if (opt_.on_stats) opt_.on_stats(stats(StatsFor::Metrics));
      last_status = Clock::now();
    }
    if (opt_.interval_s > 0 && seconds_since(last_cut) >= opt_.interval_s) {
      ring_buffer__consume(rb_);
      cut_interval(false);
      last_cut = Clock::now();
    }
  }
  const double elapsed = seconds_since(start);
  // Stop sampling first, then drain what is already in the ring buffer.
  for (bpf_link* l : links_) bpf_link__destroy(l);
  links_.clear();
  ring_buffer__consume(rb_);
  ::sigaction(SIGINT, &old_int, nullptr);
  ::sigaction(SIGTERM, &old_term, nullptr);
  if (child_ > 0 && !child_exited_) {
    // Stopped by Ctrl-C or --duration: the command keeps running unless the terminal's SIGINT
    // reached it too; report its status only if it already ended.
    int status = 0;
    if (::waitpid(child_, &status, WNOHANG) == child_) {
      child_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
  }

  RecordResult r;
  static_cast<RecordStats&>(r) = stats(StatsFor::Summary);
  r.cost = cost(elapsed);
  r.command_exit_status = child_status_;
  if (opt_.on_stats) opt_.on_stats(stats(StatsFor::Metrics));
  if (opt_.interval_s > 0) {
    cut_interval(true);
    return r;
  }
  profile::Profile& prof = r.profile;
  prof.period_ns = 1000000000LL / opt_.frequency_hz;
  prof.start_time_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(wall_start.time_since_epoch()).count();
  prof.duration_ns = static_cast<int64_t>(elapsed * 1e9);
  // (stacks symbolized but only seen as before-context samples have count 0 and are left out)
  stacks_.for_each([&](uint32_t pid, std::vector<profile::Frame> frames, int64_t count) {
    profile::Sample s;
    s.pid = pid;
    s.frames = std::move(frames);
    s.count = count;
    prof.samples.push_back(std::move(s));
  });
  prof.counters["samples"] = r.samples;
  prof.counters["samples delivered"] = r.delivered;
  prof.counters["samples unwound to a proven root"] = r.reached_root;
  prof.counters["samples without an unwind context"] = r.without_context;
  for (const RecordResult::Reason& reason : r.reasons) prof.counters[reason.name] = reason.count;
  return r;
}

void Recorder::teardown() {
  for (bpf_link* l : links_) bpf_link__destroy(l);
  links_.clear();
  for (int fd : perf_fds_) ::close(fd);
  perf_fds_.clear();
  if (rb_ != nullptr) ring_buffer__free(rb_);
  rb_ = nullptr;
  if (skel_ != nullptr) record_bpf__destroy(skel_);
  skel_ = nullptr;
}

}  // namespace

Result<RecordResult> record(const RecordOptions& options) {
  Recorder r(options);
  return r.run();
}

}  // namespace ljprof::record
