// record/sample_intake.cc: ring-buffer records into symbolized stacks (or a young process's
// copies), and the stacks into profiles.
#include "record/sample_intake.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "common/printable.h"
#include "profile/profile_frames.h"

namespace ljprof::record {

namespace {

// The pprof label `state` of an off-CPU interval (record_types.h LJ_REC_OFF_CPU_*).
const char* off_cpu_state_label(uint32_t state) {
  return state == LJ_REC_OFF_CPU_BLOCKED ? "blocked" : "preempted";
}

}  // namespace

void SampleIntake::handle_record(const void* data, size_t size) {
  uint32_t kind = 0;
  if (size >= sizeof(kind)) std::memcpy(&kind, data, sizeof(kind));
  if (kind == LJ_REC_KIND_SAMPLE || kind == LJ_REC_KIND_OFF_CPU) {
    handle_sample(data, size);
  } else if (kind == LJ_REC_KIND_CAPTURE) {
    handle_capture(data, size);
  } else if (kind == LJ_REC_KIND_STALL) {
    handle_stall(data, size);
  } else {
    ++counts_[LJ_REC_CTR_MALFORMED];
  }
}

// A young process's object as the kernel copied it (record_types.h lj_rec_capture). It precedes
// in the ring the first sample that needs it, so that sample's process has a context already.
void SampleIntake::handle_capture(const void* data, size_t size) {
  const size_t header = offsetof(lj_rec_capture, bytes);
  lj_rec_capture c;
  if (size < header) {
    ++counts_[LJ_REC_CTR_MALFORMED];
    return;
  }
  std::memcpy(&c, data, header);
  if (c.len == 0 || c.len >= LJ_REC_CAPTURE_MAX || header + c.len > size) {
    ++counts_[LJ_REC_CTR_MALFORMED];
    return;
  }
  const auto* bytes = static_cast<const uint8_t*>(data) + header;
  follower_.keep_copy(c.pid, c.addr, {bytes, c.len});
}

void SampleIntake::handle_stall(const void* data, size_t size) {
  lj_rec_stall stall;
  // At most one stall per loop iteration of at least the threshold: the bound only guards
  // against a hostile ring.
  if (size < sizeof(stall) || stall_records_.size() >= kMaxStalls) {
    ++counts_[LJ_REC_CTR_MALFORMED];
    return;
  }
  std::memcpy(&stall, data, sizeof(stall));
  stall_records_.push_back(stall);
}

void SampleIntake::keep_time(const lj_rec_sample& s, const StackTable::Entry& e) {
  if (!keep_times_) return;
  std::deque<SampleTime>& times = times_[s.tid];
  if (kept_times_ >= max_kept_times_) {
    ++dropped_times_;
    if (times.empty()) return;  // at the bound: a thread without kept times keeps none
    times.pop_front();
    --kept_times_;
  }
  times.push_back({s.time_ns, &e, s.off_cpu_ns, s.off_cpu_state});
  ++kept_times_;
}

std::vector<profile::LoopStall> SampleIntake::stalls() const {
  std::vector<profile::LoopStall> out;
  for (const lj_rec_stall& r : stall_records_) {
    profile::LoopStall stall{
        r.pid, r.tid, static_cast<int64_t>(r.start_ns), static_cast<int64_t>(r.duration_ns), {}};
    auto times = times_.find(r.tid);
    if (times != times_.end()) {
      const uint64_t end = r.start_ns + r.duration_ns;
      const std::deque<SampleTime>& ts = times->second;
      // The deque is in arrival order: time order but for two CPUs' samples of one thread a
      // moment apart; a binary search lands near the stall's start, kOrderSlack entries either
      // side cover the rest (a linear scan per stall made a long recording quadratic).
      auto at = std::partition_point(ts.begin(), ts.end(),
                                     [&](const SampleTime& t) { return t.time_ns < r.start_ns; });
      at -= std::min<std::ptrdiff_t>(at - ts.begin(), kOrderSlack);
      size_t after_end = 0;
      for (; at != ts.end() && after_end < kOrderSlack; ++at) {
        const SampleTime& t = *at;
        if (t.time_ns > end) ++after_end;
        // An off-CPU interval is timed at its end, which lies inside the stall it blocked.
        if (t.time_ns < r.start_ns || t.time_ns > end) continue;
        profile::Sample sample = stacks_.sample_of(*t.entry);
        sample.count = t.off_cpu_ns == 0 ? 1 : 0;
        sample.off_cpu_ns = static_cast<int64_t>(t.off_cpu_ns);
        if (t.off_cpu_ns != 0) {
          sample.state = off_cpu_state_label(t.off_cpu_state);
        }
        stall.samples.push_back(std::move(sample));
      }
    }
    out.push_back(std::move(stall));
  }
  return out;
}

profile::Timeline SampleIntake::timeline() const {
  profile::Timeline out;
  std::map<const StackTable::Entry*, uint32_t> index;  // entry -> its place in out.stacks
  std::vector<bool> idle;                              // per out.stacks: an idle loop wait
  for (const auto& [tid, times] : times_) {
    for (const SampleTime& t : times) {
      auto [at, added] = index.try_emplace(t.entry, static_cast<uint32_t>(out.stacks.size()));
      if (added) {
        out.stacks.push_back(stacks_.sample_of(*t.entry));
        idle.push_back(profile::is_idle_wait(out.stacks.back()));
      }
      if (t.off_cpu_ns != 0 && idle[at->second]) continue;
      out.points.push_back(
          {static_cast<int64_t>(t.time_ns), static_cast<int64_t>(t.off_cpu_ns), tid, at->second});
    }
  }
  return out;
}

std::vector<profile::LoopStall> SampleIntake::take_stalls() {
  std::vector<profile::LoopStall> out = stalls();
  stall_records_.clear();
  times_.clear();
  kept_times_ = 0;
  return out;
}

void SampleIntake::handle_sample(const void* data, size_t size) {
  const size_t header = offsetof(lj_rec_sample, frames);
  if (size < header) {
    ++counts_[LJ_REC_CTR_MALFORMED];
    return;
  }
  lj_rec_sample s;
  std::memcpy(&s, data, std::min(size, sizeof(s)));
  if (s.nframes > LJ_WALK_MAX_FRAMES || header + s.nframes * sizeof(lj_rec_frame) > size) {
    ++counts_[LJ_REC_CTR_MALFORMED];
    return;
  }
  ++counts_[LJ_REC_CTR_DELIVERED];
  if (s.end == LJ_END_ROOT) ++counts_[LJ_REC_CTR_REACHED_ROOT];
  walk_times_.add(s.walk_ns, s.nframes);
  // Walked with a context the kernel built at a fork or exec: the recorder's own context is the
  // old image's, or none yet (a child whose fork notification is not handled yet); the
  // kernel's names the files the walk went through.
  const bool kernel_built = (s.generation & LJ_REC_EXEC_GENERATION) != 0;
  const FollowedProcess* p = follower_.process_of_sample(s.pid, kernel_built);
  if (p == nullptr) {
    ++counts_[LJ_REC_CTR_NO_PROCESS];
    return;
  }
  const ProcessContext* ctx =
      kernel_built ? kernel_.context(s.pid, s.generation, p->copies) : p->ctx.get();
  if (ctx == nullptr) {
    ++counts_[LJ_REC_CTR_NO_PROCESS];
    return;
  }
  symbolize_sample(s, *p, *ctx);
}

// Whether a walk that did not reach a root stopped in code whose rows the kernel did not have
// yet: a mapping published after the sample, or — with a context the kernel built at a fork or
// exec, which has only the executable, its interpreter and the vDSO — a library mapped since.
bool SampleIntake::walked_before_its_rows(const lj_rec_sample& s, const FollowedProcess& p,
                                          const ProcessContext& ctx) const {
  if ((s.generation & LJ_REC_EXEC_GENERATION) != 0) {
    return s.end == LJ_END_NO_MODULE || s.end == LJ_END_TRACE_NO_G;
  }
  const ModuleView* m = ctx.module_at(s.end_pc);
  if (m == nullptr) return false;
  auto pub = p.published_ns.find({m->start, m->object});
  return pub != p.published_ns.end() && pub->second > s.time_ns;
}

void SampleIntake::symbolize_sample(const lj_rec_sample& s, const FollowedProcess& p,
                                    const ProcessContext& ctx) {
  const StackMemo::Stack& raw = memo_.stack_of(s, ctx);
  for (const auto& [id, n] : raw.counted) counts_[id] += n;
  if (s.kind == LJ_REC_KIND_OFF_CPU) {
    // Where the thread left the CPU, weighted by how long it was away.
    const StackTable::Entry& e = stacks_.on_fiber(*raw.stack, fiber_of(s, ctx));
    off_cpu_[{&e, s.off_cpu_state}] += static_cast<int64_t>(s.off_cpu_ns);
    keep_time(s, e);
    return;
  }
  if (s.end != LJ_END_ROOT && s.end != LJ_END_RA_ZERO && s.end < before_context_.size() &&
      !raw.stack->first.frames.empty() && walked_before_its_rows(s, p, ctx)) {
    ++before_context_[s.end];
    std::vector<profile::Frame> late = stacks_.frames(*raw.stack);
    late.back().function = fmt::format("[unknown: {}]", counter_text(LJ_REC_CTR_BEFORE_CONTEXT));
    StackTable::Entry& e =
        stacks_.on_fiber(stacks_.entry(s.pid, std::move(late)), fiber_of(s, ctx));
    e.second += 1;
    keep_time(s, e);
    return;
  }
  if (s.end != LJ_END_ROOT && s.end != LJ_END_RA_ZERO) note_end_site(s, ctx);
  StackTable::Entry& e = stacks_.on_fiber(*raw.stack, fiber_of(s, ctx));
  e.second += 1;
  keep_time(s, e);
}

// The fiber the kernel read for the sample (record_types.h lj_rec_sample.fiber_id), its name
// made printable text: it is the target's bytes. Its cord by name (cord_name).
profile::SampleFiber SampleIntake::fiber_of(const lj_rec_sample& s, const ProcessContext& ctx) {
  profile::SampleFiber fiber;
  if (s.fiber_id == 0) return fiber;
  fiber.id = s.fiber_id;
  fiber.name.assign(s.fiber_name, strnlen(s.fiber_name, sizeof(s.fiber_name)));
  make_printable(fiber.name);
  fiber.cord = cord_name(s, ctx);
  ++counts_[LJ_REC_CTR_FIBER_NAMED];
  return fiber;
}

// The name of the cord the sample's fiber belongs to: "main" for main_cord (tarantool fiber.c
// cord_create(&main_cord, "main")); another cord's cord.name from the process when the layout
// has it (DWARF, or machine code whose list patterns matched), kept once read; "cord 0xADDR"
// while it cannot be read (a new thread names its cord in cord_create after it started).
std::string SampleIntake::cord_name(const lj_rec_sample& s, const ProcessContext& ctx) {
  const ModuleView* lj = ctx.luajit;
  if (lj == nullptr || !lj->object->fibers || s.fiber_cord == 0) return "";
  const luajit::FiberLayout& layout = *lj->object->fibers;
  if (s.fiber_cord == layout.main_cord + lj->bias) return "main";
  const std::pair<uint32_t, uint64_t> key{s.pid, s.fiber_cord};
  if (auto known = cord_names_.find(key); known != cord_names_.end()) return known->second;
  char name[40] = {};  // fiber.h struct cord: char name[40]
  if (layout.has_lists && ctx.mem != nullptr &&
      ctx.mem->read(s.fiber_cord + layout.cord_name, name, sizeof name) == 0 && name[0] != 0) {
    std::string read(name, strnlen(name, sizeof name));
    make_printable(read);
    if (cord_names_.size() >= kMaxCordNames) cord_names_.clear();
    return cord_names_.emplace(key, std::move(read)).first->second;
  }
  return fmt::format("cord {:#x}", s.fiber_cord);
}

void SampleIntake::note_end_site(const lj_rec_sample& s, const ProcessContext& ctx) {
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

std::vector<std::pair<std::string, uint64_t>> SampleIntake::top_end_sites(uint32_t end,
                                                                          size_t n) const {
  std::vector<std::pair<std::string, uint64_t>> top(std::min<size_t>(n, end_sites_[end].size()));
  std::partial_sort_copy(end_sites_[end].begin(), end_sites_[end].end(), top.begin(), top.end(),
                         [](const auto& a, const auto& b) { return a.second > b.second; });
  return top;
}

std::vector<ProcessProfile> SampleIntake::take_profiles(int64_t period_ns, int64_t start_unix_ns,
                                                        int64_t end_unix_ns) {
  std::vector<ProcessProfile> profiles;
  std::map<uint32_t, size_t> index;  // pid -> its entry in profiles
  auto add = [&](profile::Sample sample) {
    const uint32_t pid = sample.pid;
    auto [at, added] = index.try_emplace(pid, profiles.size());
    if (added) {
      ProcessProfile pp;
      if (const FollowedProcess* proc = follower_.find(pid)) pp.process = proc->identity;
      pp.process.pid = pid;
      pp.profile.period_ns = period_ns;
      pp.profile.start_time_ns = start_unix_ns;
      pp.profile.duration_ns = end_unix_ns - start_unix_ns;
      profiles.push_back(std::move(pp));
    }
    profiles[at->second].profile.samples.push_back(std::move(sample));
  };
  stacks_.for_each(add);
  for_each_off_cpu(add);
  memo_.clear();
  off_cpu_.clear();
  stacks_.clear();
  return profiles;
}

void SampleIntake::for_each_off_cpu(const std::function<void(profile::Sample)>& f) const {
  for (const auto& [key, ns] : off_cpu_) {
    profile::Sample s = stacks_.sample_of(*key.first);
    s.count = 0;
    s.off_cpu_ns = ns;
    s.state = off_cpu_state_label(key.second);
    if (profile::is_idle_wait(s)) s.state = "idle";
    f(std::move(s));
  }
}

void SampleIntake::add_samples(profile::Profile& prof) const {
  // (stacks symbolized but only seen as before-context samples have count 0 and are left out)
  auto add = [&](profile::Sample s) { prof.samples.push_back(std::move(s)); };
  stacks_.for_each(add);
  for_each_off_cpu(add);
}

}  // namespace ljprof::record
