// record/process_follower.cc: following processes — choosing them, publishing their contexts to
// the kernel program, and noticing their execs, forks and exits.
#include "record/process_follower.h"

#include <bpf/bpf.h>
#include <dirent.h>
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "record/cost.h"
#include "record/process_identity.h"

namespace ljprof::record {

namespace {

// Whether a `pids` value says the process needs the recorder's context: followed but none yet
// (a new or exec'd process), or one the kernel built at exec.
bool needs_context(uint32_t pids_value) {
  return pids_value == LJ_REC_PID_PENDING || pids_value >= LJ_REC_MAX_PROCS;
}

}  // namespace

bool process_alive(uint32_t pid) {
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

ProcessFollower::ProcessFollower(const RecordOptions& o, BpfSession& session, ObjectCache& cache,
                                 const cfi::TableCache& tables, UnwindRows& rows,
                                 KernelContexts& kernel, AgentCounts& counts, RecordCost& cost)
    : opt_(o),
      session_(session),
      cache_(cache),
      tables_(tables),
      rows_(rows),
      kernel_(kernel),
      counts_(counts),
      cost_(cost),
      self_(static_cast<uint32_t>(::getpid())) {
  for (uint32_t s = LJ_REC_MAX_PROCS; s > 0; --s) free_slots_.push_back(s - 1);
}

void ProcessFollower::follow(uint32_t pid) {
  uint32_t pending = LJ_REC_PID_PENDING;
  if (bpf_map_update_elem(session_.pids_fd(), &pid, &pending, BPF_ANY) != 0) {
    ++counts_[LJ_REC_CTR_PID_MAP_FULL];
    warn(fmt::format("cannot follow pid {}: pid map full", pid));
    return;
  }
  procs_[pid];
}

void ProcessFollower::setup(uint32_t pid) {
  FollowedProcess& p = procs_[pid];
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

void ProcessFollower::publish(uint32_t pid, FollowedProcess& p) {
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
  // Code mapped while it was read: maps read in the middle of an exec (the executable mapped,
  // not yet its interpreter and vDSO) or of ld.so's loading. Published as read, it would replace
  // the kernel's context, which the kernel keeps whole (an exec's template, each library at its
  // mmap), with one whose walks end in the code it lacks until the next notification is handled
  // — after a short-lived process has exited. Its files are cached by now: read again.
  for (int again = 0; again < kRereadsWhileMapping && now_maps.ok() &&
                      still_mapped((*ctx)->signature, *now_maps) &&
                      executable_signature(*now_maps) != (*ctx)->signature;
       ++again) {
    auto reread = build_process_context(pid, cache_);
    if (!reread.ok()) break;
    ctx = std::move(reread);
    now_maps = proc::read_proc_maps(pid);
  }
  if (now_maps.ok() && !still_mapped((*ctx)->signature, *now_maps)) {
    // Or ld.so changed a code mapping while it was read: an AArch64 library is mapped whole
    // first and its data over the tail after, which shrinks the code mapping and brings no
    // notification (no PROT_EXEC). Looked at again at the next wake-up, or it would stay
    // unpublished (the arm64 VM's signal-handler library: a third of the walks ended there).
    retry_.insert(pid);
    return;
  }
  // After an exec the old image's copies describe addresses that mean nothing any more.
  if (p.ctx && now_maps.ok() && !still_mapped(p.ctx->signature, *now_maps)) p.copies->clear();
  warn_about_context(pid, **ctx);
  if (!take_slot(pid, p, kernel_record(p, **ctx))) return;
  const uint64_t now = monotonic_ns();
  for (const ModuleView& m : (*ctx)->modules) {
    if (m.object->uploaded) p.published_ns.emplace(std::make_pair(m.start, m.object), now);
  }
  p.identity = identify_process(pid, **ctx);
  if ((*ctx)->mem) (*ctx)->mem->use_captured(p.copies);
  p.ctx = std::move(*ctx);
  kernel_.publish_exec_template(pid, *p.ctx);
  kernel_.publish_lib_templates(*p.ctx);
  // A code mapping whose file could not be opened (the loader replaced it between the maps read
  // and the open: an AArch64 library whose tail it maps over brings no notification) is tried
  // again at the next wake-up, a few times: its walks end there until then.
  if (p.ctx->unread_modules > 0 && p.unread_retries > 0) {
    --p.unread_retries;
    retry_.insert(pid);
  }
}

// What could not be read of a process's files, once per process; and the table cache's first
// problem, once per recording.
void ProcessFollower::warn_about_context(uint32_t pid, const ProcessContext& ctx) {
  // One that exited took its files and vDSO with it: what could not be read of it is no news
  // (as for an error building its context).
  const bool alive = ctx.warnings.empty() || process_alive(pid);
  for (const std::string& w : ctx.warnings) {
    if (alive && warned_.insert(pid).second) warn(fmt::format("pid {}: {}", pid, w));
  }
  if (!tables_.first_problem().empty() && !table_cache_warned_) {
    table_cache_warned_ = true;
    warn(
        fmt::format("table cache: {} (the tables it would hold are built on every run; "
                    "--table-cache '' turns the cache off)",
                    tables_.first_problem()));
  }
}

// The kernel's record of context `ctx`: its modules whose rows are in the kernel, a generation
// of its own, and its LuaJIT.
namespace {

// The kernel's view of the fiber layout of the module carrying LuaJIT (record_types.h
// lj_rec_fiber_layout): main_cord at its runtime address. All zero without a layout.
lj_rec_fiber_layout fiber_record(const ModuleView& luajit) {
  lj_rec_fiber_layout out{};
  const std::optional<luajit::FiberLayout>& f = luajit.object->fibers;
  if (!f) return out;
  out.main_cord = f->main_cord + luajit.bias;
  out.cord_fiber = f->cord_fiber;
  out.fiber_fid = f->fiber_fid;
  out.fid_size = f->fid_size;
  out.fiber_name = f->fiber_name;
  // Every thread's own cord through its thread pointer (record.bpf.c current_cord).
  if (luajit.object->elf) {
    out.cord_tp_offset = luajit::cord_ptr_from_tp(*f, luajit.object->elf->arch()).value_or(0);
  }
  return out;
}

}  // namespace

lj_rec_proc ProcessFollower::kernel_record(const FollowedProcess& p, const ProcessContext& ctx) {
  lj_rec_proc rec{};
  for (const ModuleView& m : ctx.modules) {
    MappedObject* obj = m.object;
    rows_.upload(*obj);  // done already for a file analysed just now (ObjectCache::on_table)
    if (!obj->uploaded) continue;
    if (rec.nmodules >= LJ_REC_MAX_MODULES) {
      ++counts_[LJ_REC_CTR_MODULES_FULL];
      continue;
    }
    rec.modules[rec.nmodules++] =
        lj_rec_module{m.start, m.end, m.bias, obj->row_first, obj->row_count};
  }
  // The kernel's row cache key; 0 means an empty entry there. 32 bits wrap only after 4
  // billion contexts, more than any recording builds.
  rec.generation = static_cast<uint32_t>(ctx.generation) & ~LJ_REC_EXEC_GENERATION;
  if (rec.generation == 0) rec.generation = 1;
  if (ctx.luajit != nullptr) {
    rec.lj = ctx.luajit->object->info;
    rec.vm_bias = ctx.luajit->bias;
    rec.g_hint = ctx.g_hint != 0 ? ctx.g_hint : proven_g(p, ctx);
    rec.fiber = fiber_record(*ctx.luajit);
  }
  return rec;
}

// Writes `rec` into a free slot, then points pid to it. False, the process left as it was, when
// no slot is free or the kernel refused.
bool ProcessFollower::take_slot(uint32_t pid, FollowedProcess& p, const lj_rec_proc& rec) {
  if (free_slots_.empty()) {
    ++counts_[LJ_REC_CTR_PROCS_FULL];
    warn(fmt::format("pid {}: more than {} processes followed at once", pid, LJ_REC_MAX_PROCS));
    return false;
  }
  const uint32_t slot = free_slots_.back();
  free_slots_.pop_back();
  if (bpf_map_update_elem(session_.procs_fd(), &slot, &rec, BPF_ANY) != 0 ||
      bpf_map_update_elem(session_.pids_fd(), &pid, &slot, BPF_ANY) != 0) {
    free_slots_.push_back(slot);
    warn(fmt::format("pid {}: cannot publish its unwind context: {}", pid, std::strerror(errno)));
    return false;
  }
  // The previous slot may still be read by a sample in flight; it is reused only after every
  // other free slot, which is long after any in-flight program finished.
  if (p.slot < LJ_REC_MAX_PROCS) free_slots_.insert(free_slots_.begin(), p.slot);
  p.slot = slot;
  return true;
}

// The global_State a walk proved for this process in its current slot (record.bpf.c keeps it in
// lj_rec_proc.g_hint), when the new context runs the same LuaJIT at the same place. Without it a
// republished context (a new executable mapping: the JIT's machine-code areas, a dlopen) would
// forget G until the next walk through the interpreter; a process looping in a trace meanwhile
// has no G to find its trace by (x86-64 non-GC64 traces keep no DISPATCH register). A stale G
// costs nothing: the walker proves G (G->cur_L->glref == G) before it uses one.
uint64_t ProcessFollower::proven_g(const FollowedProcess& p, const ProcessContext& next) const {
  if (p.slot >= LJ_REC_MAX_PROCS || !p.ctx || p.ctx->luajit == nullptr || next.luajit == nullptr ||
      p.ctx->luajit->object != next.luajit->object || p.ctx->luajit->bias != next.luajit->bias) {
    return 0;
  }
  lj_rec_proc old{};
  if (bpf_map_lookup_elem(session_.procs_fd(), &p.slot, &old) != 0) return 0;
  return old.g_hint;
}

void ProcessFollower::drop(uint32_t pid) {
  auto it = procs_.find(pid);
  if (it == procs_.end() || it->second.gone) return;
  bpf_map_delete_elem(session_.pids_fd(), &pid);
  if (it->second.slot < LJ_REC_MAX_PROCS) free_slots_.insert(free_slots_.begin(), it->second.slot);
  it->second.slot = LJ_REC_PID_PENDING;
  it->second.gone = true;  // its context stays: samples still in the ring buffer need it
}

void ProcessFollower::handle_notifications() {
  rescan_.insert(retry_.begin(), retry_.end());
  retry_.clear();
  for (auto it = rescan_.begin(); it != rescan_.end(); it = rescan_.erase(it)) {
    const uint32_t pid = *it;
    if (!process_alive(pid)) {
      drop(pid);
      continue;
    }
    auto p = procs_.find(pid);
    if (p == procs_.end()) {
      look_at_unfollowed(pid);
    } else if (!p->second.gone) {
      refresh(pid, p->second);
    }
  }
}

// A notified process not followed: a child the kernel added, or with -a one that may run LuaJIT.
void ProcessFollower::look_at_unfollowed(uint32_t pid) {
  uint32_t slot = 0;
  if (bpf_map_lookup_elem(session_.pids_fd(), &pid, &slot) == 0) {
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
}

// A notified process followed: set up again after an exec (slot pending) or when its code
// mappings changed.
void ProcessFollower::refresh(uint32_t pid, FollowedProcess& p) {
  uint32_t value = 0;
  const bool pending =
      bpf_map_lookup_elem(session_.pids_fd(), &pid, &value) == 0 && needs_context(value);
  if (!pending && p.ctx && p.ctx->unread_modules == 0) {
    auto maps = proc::read_proc_maps(pid);
    if (maps.ok() && executable_signature(*maps) == p.ctx->signature) return;
  }
  setup(pid);
}

void ProcessFollower::scan_all() {
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

bool ProcessFollower::selected(uint32_t pid) {
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
void ProcessFollower::adopt(uint32_t pid) {
  if (selected(pid)) follow_if_luajit(pid);
}

// Follows `pid` if it maps a LuaJIT runtime now; false if not.
bool ProcessFollower::follow_if_luajit(uint32_t pid) {
  if (!maps_luajit(pid, cache_)) return false;
  follow(pid);
  setup(pid);
  return true;
}

void ProcessFollower::recheck_exec_candidates() {
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

void ProcessFollower::housekeeping() {
  // Followed pids the kernel marked pending (a fork or exec whose notification was lost when
  // the notify ring was full) or that the kernel added (children).
  const int fd = session_.pids_fd();
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
}

bool ProcessFollower::release_exited() {
  if (std::none_of(procs_.begin(), procs_.end(),
                   [](const auto& e) { return e.second.gone && e.second.ctx; })) {
    return false;
  }
  session_.drain();
  for (auto& [pid, p] : procs_) {
    if (p.gone) p.ctx.reset();
  }
  if (opt_.interval_s <= 0) release_gone();
  return true;
}

void ProcessFollower::release_gone() {
  for (auto it = procs_.begin(); it != procs_.end();) {
    if (it->second.gone) {
      warned_.erase(it->first);
      it = procs_.erase(it);
    } else {
      ++it;
    }
  }
}

void ProcessFollower::publish_waiting_for_rows() {
  for (auto& [pid, p] : procs_) {
    if (!p.gone && p.ctx && waiting_for_rows(*p.ctx)) setup(pid);
  }
}

void ProcessFollower::keep_copy(uint32_t pid, uint64_t addr, std::span<const uint8_t> bytes) {
  auto it = procs_.find(pid);
  if (it == procs_.end()) return;  // not followed any more: its samples are not named either
  FollowedProcess& p = it->second;
  if (!p.copies->add(addr, bytes, kMaxCopiedBytes)) {
    ++counts_[LJ_REC_CTR_CAPTURE_DROPPED];
    return;
  }
  if (p.first_copy == Clock::time_point{}) p.first_copy = Clock::now();
}

// A live process's copies are dropped kKeepCopiesS after the first: its young window's samples
// were named by then, and later ones read its memory.
void ProcessFollower::drop_old_copies() {
  const auto now = Clock::now();
  for (auto& [pid, p] : procs_) {
    if (p.first_copy != Clock::time_point{} && !p.copies->empty() &&
        std::chrono::duration<double>(now - p.first_copy).count() > kKeepCopiesS) {
      p.copies->clear();
    }
  }
}

FollowedProcess* ProcessFollower::process_of_sample(uint32_t pid, bool kernel_built) {
  if (kernel_built) return &procs_.try_emplace(pid).first->second;
  auto it = procs_.find(pid);
  return it != procs_.end() ? &it->second : nullptr;
}

const FollowedProcess* ProcessFollower::find(uint32_t pid) const {
  auto it = procs_.find(pid);
  return it != procs_.end() ? &it->second : nullptr;
}

size_t ProcessFollower::live() const {
  size_t n = 0;
  for (auto& [pid, p] : procs_) n += p.gone ? 0 : 1;
  return n;
}

size_t ProcessFollower::with_context() const {
  size_t n = 0;
  for (auto& [pid, p] : procs_) n += (p.gone || !p.ctx) ? 0 : 1;
  return n;
}

bool ProcessFollower::any_alive() const {
  bool any = false;
  for (auto& [pid, p] : procs_) any = any || (!p.gone && process_alive(pid));
  return any;
}

bool ProcessFollower::young() const {
  return !exec_candidates_.empty() || seconds_since(last_setup_) < kYoungS;
}

void ProcessFollower::contexts_held(std::set<uint64_t>& generations,
                                    std::set<uint32_t>& pids) const {
  for (auto& [pid, p] : procs_) {
    if (!p.ctx) continue;
    generations.insert(p.ctx->generation);
    pids.insert(pid);
  }
}

}  // namespace ljprof::record
