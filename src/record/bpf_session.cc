// record/bpf_session.cc: loading and attaching the recorder's kernel program, its perf events and
// ring buffers, and reading its counters.
#include "record/bpf_session.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <linux/perf_event.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "record.skel.h"
#include "record/cost.h"

namespace ljprof::record {

namespace {

// The last lines libbpf warned while the program loaded: when the kernel's verifier rejects it,
// the tail of its log (the instruction it refused and why) goes into ljprof's error message.
// libbpf prints through a C callback, hence one process-wide buffer, touched only by
// BpfSession::load.
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

// The sample ring buffer. Its pages are resident in the agent from the start, twice over (the
// kernel maps the data area twice so records can wrap), so its size is the agent's largest fixed
// cost in memory. By default it holds about a second of samples with every CPU sampling a
// followed process: the agent drains it at least every kDrainMs (recorder.cc), but an attach
// analysing a new binary (100-700 ms) delays the next drain. A record is 48 bytes per frame plus
// a header; 1 KiB is a 20-frame stack.
uint32_t ring_bytes(const RecordOptions& o) {
  if (o.ringbuf_mb != 0) return std::min<uint32_t>(o.ringbuf_mb, 1024) << 20;
  constexpr uint64_t kBytesPerSample = 1024, kMin = 256 << 10, kMax = 256 << 20;
  const int cpus = libbpf_num_possible_cpus();
  const uint64_t want = uint64_t(cpus > 0 ? cpus : 1) * o.frequency_hz * kBytesPerSample;
  uint64_t bytes = kMin;
  while (bytes < want && bytes < kMax) bytes <<= 1;
  return static_cast<uint32_t>(bytes);
}

}  // namespace

BpfSession::~BpfSession() {
  stop_sampling();
  if (switch_in_link_ != nullptr) bpf_link__destroy(switch_in_link_);
  for (int fd : perf_fds_) ::close(fd);
  perf_fds_.clear();
  if (rb_ != nullptr) ring_buffer__free(rb_);
  rb_ = nullptr;
  if (skel_ != nullptr) record_bpf__destroy(skel_);
  skel_ = nullptr;
}

Status BpfSession::open(const RecordOptions& o, uint64_t capture_young_ns, OnRecord on_record,
                        OnNotify on_notify) {
  on_record_ = std::move(on_record);
  on_notify_ = std::move(on_notify);
  LJ_TRY(load(o, capture_young_ns));
  if (int err = record_bpf__attach(skel_); err != 0) {
    return make_error("attaching the fork/exec/mmap tracepoints failed: {}", std::strerror(-err));
  }
  if (o.off_cpu_threshold_ns != 0) {
    const Status kprobe = attach_switch_in();
    if (!kprobe.ok()) off_cpu_note_ = kprobe.message();
  }
  rb_ = ring_buffer__new(bpf_map__fd(skel_->maps.events), &BpfSession::on_event, this, nullptr);
  if (rb_ == nullptr) return make_error("ring buffer setup failed: {}", std::strerror(errno));
  if (ring_buffer__add(rb_, bpf_map__fd(skel_->maps.notify), &BpfSession::on_notify, this) != 0) {
    return make_error("notify ring buffer setup failed: {}", std::strerror(errno));
  }
  return Ok{};
}

namespace {

std::string kernel_release() {
  utsname u{};
  return ::uname(&u) == 0 ? std::string(u.release) : std::string("unknown release");
}

}  // namespace

std::vector<std::string> missing_bpf_features() {
  // The helpers the kernel program calls (bpf/record*.h, bpf/walker) that came late, with the
  // release that added each (include/uapi/linux/bpf.h history); all are allowed in perf_event
  // programs, the type the sampler is.
  struct Helper {
    bpf_func_id id;
    const char* name;
    const char* since;
  };
  static constexpr Helper kHelpers[] = {
      {BPF_FUNC_probe_read_user, "bpf_probe_read_user", "5.5"},
      {BPF_FUNC_ringbuf_output, "bpf_ringbuf_output", "5.8"},
      {BPF_FUNC_get_current_task_btf, "bpf_get_current_task_btf", "5.11"},
      {BPF_FUNC_task_pt_regs, "bpf_task_pt_regs", "5.15"},
      {BPF_FUNC_loop, "bpf_loop", "5.17"},
      {BPF_FUNC_find_vma, "bpf_find_vma", "5.17"},
  };
  std::vector<std::string> missing;
  if (libbpf_probe_bpf_map_type(BPF_MAP_TYPE_RINGBUF, nullptr) == 0) {
    missing.push_back("BPF ring buffers (Linux 5.8)");
  }
  for (const Helper& h : kHelpers) {
    if (libbpf_probe_bpf_helper(BPF_PROG_TYPE_PERF_EVENT, h.id, nullptr) == 0) {
      missing.push_back(fmt::format("{} (Linux {})", h.name, h.since));
    }
  }
  return missing;
}

Status BpfSession::load(const RecordOptions& o, uint64_t capture_young_ns) {
  g_load_log.clear();
  libbpf_set_print(keep_load_warning);
  skel_ = record_bpf__open();
  if (skel_ == nullptr) return make_error("cannot open the BPF object: {}", std::strerror(errno));
  skel_->rodata->follow_children = (o.follow_forks || !o.command.empty()) ? 1 : 0;
  skel_->rodata->notify_all = o.all ? 1 : 0;
  const uint32_t rb_bytes = ring_bytes(o);
  bpf_map__set_max_entries(skel_->maps.events, rb_bytes);
  skel_->rodata->wakeup_bytes = rb_bytes / 4;
  skel_->rodata->capture_young_ns = capture_young_ns;
  skel_->rodata->sample_period_ns = o.frequency_hz != 0 ? 1'000'000'000ULL / o.frequency_hz : 0;
  skel_->rodata->off_cpu_threshold_ns = o.off_cpu_threshold_ns;
  // Without --off-cpu its programs are neither verified nor attached: every context switch on
  // the host would run them.
  bpf_program__set_autoload(skel_->progs.on_switch_out, o.off_cpu_threshold_ns != 0);
  bpf_program__set_autoload(skel_->progs.on_switch_in, o.off_cpu_threshold_ns != 0);
  skel_->rodata->loop_stall_ns = o.loop_stall_ns;
  skel_->rodata->tally_work = o.tally_walk_work ? 1 : 0;
  bpf_program__set_autoload(skel_->progs.on_loop_wait_enter, o.loop_stall_ns != 0);
  bpf_map__set_max_entries(skel_->maps.rows, o.unwind_rows);
  const double load_cpu0 = thread_cpu_seconds();
  const int load_err = record_bpf__load(skel_);
  program_load_cpu_ms_ = (thread_cpu_seconds() - load_cpu0) * 1e3;
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
    const std::vector<std::string> missing = missing_bpf_features();
    if (!missing.empty()) {
      return make_error(
          "the kernel refused the BPF program ({}): this kernel ({}) lacks {}; ljprof record "
          "needs Linux 5.17 or later, or a kernel that backports these (core files, heap and "
          "inspect need none of it); libbpf's last messages:{}",
          std::strerror(-load_err), kernel_release(), fmt::join(missing, ", "),
          log.empty() ? " none" : log);
    }
    return make_error("the kernel refused the BPF program ({}); libbpf's last messages:{}",
                      std::strerror(-load_err), log.empty() ? " none" : log);
  }
  g_load_log.clear();
  return Ok{};
}

// The kprobe on finish_task_switch, where the kernel has kprobes (record.bpf.c on_switch_in; the
// syscall-exit hook closes the intervals spent in a syscall without it): the compiler may have
// renamed the function (an .isra/.constprop clone, e.g. finish_task_switch.isra.0 on Linux 6.x
// builds), so its name comes from /proc/kallsyms. A failure is kept as a note, not an error.
Status BpfSession::attach_switch_in() {
  std::ifstream kallsyms("/proc/kallsyms");
  std::string line, name;
  while (std::getline(kallsyms, line)) {
    const size_t at = line.rfind(' ');
    if (at == std::string::npos) continue;
    const std::string symbol = line.substr(at + 1);
    if (symbol == "finish_task_switch" || symbol.rfind("finish_task_switch.", 0) == 0) {
      name = symbol;
      break;
    }
  }
  if (name.empty()) {
    return make_error("--off-cpu: the kernel has no finish_task_switch in /proc/kallsyms");
  }
  bpf_link* link = bpf_program__attach_kprobe(skel_->progs.on_switch_in, false, name.c_str());
  if (link == nullptr) {
    return make_error("--off-cpu: attaching to {} failed: {}", name, std::strerror(errno));
  }
  switch_in_link_ = link;
  return Ok{};
}

Status BpfSession::start_sampling(uint32_t frequency_hz) {
  LJ_ASSIGN_OR_RETURN(std::vector<int> cpus, online_cpus());
  for (int cpu : cpus) {
    perf_event_attr attr{};
    attr.type = PERF_TYPE_SOFTWARE;
    attr.size = sizeof(attr);
    attr.config = PERF_COUNT_SW_CPU_CLOCK;
    attr.freq = 1;
    attr.sample_freq = frequency_hz;
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

void BpfSession::stop_sampling() {
  for (bpf_link* l : links_) bpf_link__destroy(l);
  links_.clear();
}

void BpfSession::wait(int timeout_ms) {
  ring_buffer__poll(rb_, timeout_ms);
}

void BpfSession::drain() {
  ring_buffer__consume(rb_);
}

WalkWork BpfSession::walk_work() const {
  WalkWork w;
  if (skel_ == nullptr || skel_->bss == nullptr) return w;
  // The program adds to them atomically; a torn read of one is a count a moment old.
  w.frames = __atomic_load_n(&skel_->bss->tally_frames, __ATOMIC_RELAXED);
  w.reads = __atomic_load_n(&skel_->bss->tally_reads, __ATOMIC_RELAXED);
  w.read_bytes = __atomic_load_n(&skel_->bss->tally_read_bytes, __ATOMIC_RELAXED);
  w.row_lookups = __atomic_load_n(&skel_->bss->tally_lookups, __ATOMIC_RELAXED);
  w.row_cache_hits = __atomic_load_n(&skel_->bss->tally_cache_hits, __ATOMIC_RELAXED);
  w.row_reads = __atomic_load_n(&skel_->bss->tally_row_reads, __ATOMIC_RELAXED);
  return w;
}

std::vector<uint64_t> BpfSession::read_counters() const {
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

int BpfSession::pids_fd() const {
  return bpf_map__fd(skel_->maps.pids);
}

int BpfSession::procs_fd() const {
  return bpf_map__fd(skel_->maps.procs);
}

int BpfSession::exec_templates_fd() const {
  return bpf_map__fd(skel_->maps.exec_templates);
}

int BpfSession::lib_templates_fd() const {
  return bpf_map__fd(skel_->maps.lib_templates);
}

int BpfSession::rows_fd() const {
  return bpf_map__fd(skel_->maps.rows);
}

uint32_t BpfSession::rows_capacity() const {
  return bpf_map__max_entries(skel_->maps.rows);
}

int BpfSession::on_event(void* ctx, void* data, size_t size) {
  static_cast<BpfSession*>(ctx)->on_record_(data, size);
  return 0;
}

int BpfSession::on_notify(void* ctx, void* data, size_t size) {
  if (size >= sizeof(uint32_t)) {
    uint32_t pid = 0;
    std::memcpy(&pid, data, sizeof(pid));
    static_cast<BpfSession*>(ctx)->on_notify_(pid);
  }
  return 0;
}

}  // namespace ljprof::record
