// record/kernel_contexts.cc: exec templates given to the kernel, and the contexts it built read
// back from its slots.
#include "record/kernel_contexts.h"

#include <bpf/bpf.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "record/exec_template.h"

namespace ljprof::record {

void KernelContexts::publish_exec_template(uint32_t pid, const ProcessContext& ctx) {
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
  if (bpf_map_update_elem(session_.exec_templates_fd(), &*key, &*t, BPF_ANY) != 0) {
    return;  // the map is full: later executables are set up by the recorder alone
  }
  exec_templates_.emplace(std::make_pair(key->ino, key->dev), *t);
}

void KernelContexts::publish_lib_templates(const ProcessContext& ctx) {
  for (const ModuleView& m : ctx.modules) {
    const MappedObject& obj = *m.object;
    if (m.inode == 0 || m.dev == 0 || !obj.uploaded || m.offset % 4096 != 0) continue;
    lj_rec_lib_template t{};
    t.link_start = m.start - m.bias;
    t.link_end = m.end - m.bias;
    t.pgoff = m.offset / 4096;
    t.row_first = obj.row_first;
    t.row_count = obj.row_count;
    const auto file = std::make_pair(m.inode, m.dev);
    auto known = lib_templates_.find(file);
    if (known != lib_templates_.end() && std::memcmp(&known->second, &t, sizeof(t)) == 0) continue;
    lj_rec_exec_key key{m.inode, m.dev, 0};
    if (bpf_map_update_elem(session_.lib_templates_fd(), &key, &t, BPF_ANY) != 0) {
      continue;  // the map is full: later files are added by the recorder's rescans alone
    }
    lib_templates_[file] = t;
  }
}

const ProcessContext* KernelContexts::context(uint32_t pid, uint32_t generation,
                                              std::shared_ptr<const proc::CapturedMemory> copies) {
  if (auto it = contexts_.find(generation); it != contexts_.end()) {
    if (it->second.ctx->pid != pid) return nullptr;
    // The kernel may have added libraries to the slot since it was read (add_library): the
    // samples walked through them need them to be symbolized.
    lj_rec_proc rec{};
    if (bpf_map_lookup_elem(session_.procs_fd(), &it->second.slot, &rec) != 0 ||
        rec.generation != generation || rec.owner_pid != pid ||
        rec.nmodules == it->second.nmodules) {
      return it->second.ctx.get();
    }
    // Read again, with the memory reader of the first read: the process may be gone by now,
    // and what naming reads of it (or of the kernel's copies) came through that reader.
    const uint32_t slot = it->second.slot;
    auto again = read_back(pid, generation, rec, nullptr, std::move(it->second.ctx->mem));
    replaced_.push_back(std::move(it->second));
    it->second = Read{Clock::now(), std::move(again), slot, rec.nmodules};
    return it->second.ctx.get();
  }
  const ProcessContext* found = nullptr;
  for_each_kernel_slot([&](uint32_t slot, lj_rec_proc& rec) {
    if (found != nullptr || rec.generation != generation || rec.owner_pid != pid) return;
    auto ctx = read_back(pid, generation, rec, copies, nullptr);
    if (contexts_.size() >= LJ_REC_EXEC_SLOTS) contexts_.erase(contexts_.begin());
    found = contexts_.emplace(generation, Read{Clock::now(), std::move(ctx), slot, rec.nmodules})
                .first->second.ctx.get();
  });
  return found;
}

std::unique_ptr<ProcessContext> KernelContexts::read_back(
    uint32_t pid, uint32_t generation, const lj_rec_proc& rec,
    std::shared_ptr<const proc::CapturedMemory> copies, std::unique_ptr<proc::ProcessMemory> mem) {
  auto ctx = std::make_unique<ProcessContext>();
  ctx->pid = pid;
  // Apart from the recorder's own, and from the same slot read before the kernel added a
  // library (caches keyed by it hold names of the modules it had).
  ctx->generation = (uint64_t{1} << 40) | (uint64_t{rec.nmodules} << 48) | generation;
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
  if (mem != nullptr) {
    ctx->mem = std::move(mem);
    return ctx;
  }
  auto opened = proc::ProcessMemory::open(pid);
  ctx->mem = opened.ok() ? std::move(*opened) : proc::ProcessMemory::gone(pid);
  ctx->mem->use_captured(std::move(copies));
  return ctx;
}

// Each of the kernel's own slots of `procs` (record.bpf.c next_kernel_slot) as read now.
void KernelContexts::for_each_kernel_slot(
    const std::function<void(uint32_t slot, lj_rec_proc& rec)>& f) {
  for (uint32_t slot = LJ_REC_MAX_PROCS; slot < LJ_REC_MAX_PROCS + LJ_REC_EXEC_SLOTS; ++slot) {
    lj_rec_proc rec{};
    if (bpf_map_lookup_elem(session_.procs_fd(), &slot, &rec) == 0) f(slot, rec);
  }
}

// A file's rows are being given back (UnwindRows::retire): the exec templates and the kernel's
// own contexts that name them go first, so no exec builds, and no sample walks, a context with
// rows another file may get. (An exec that read a template just before it went still builds
// one; the rows are freed only after every program running then has returned, and that
// process's own context replaces it within milliseconds.)
void KernelContexts::forget_rows(uint32_t row_first, uint32_t row_count) {
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
      bpf_map_delete_elem(session_.exec_templates_fd(), &key);
      it = exec_templates_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = lib_templates_.begin(); it != lib_templates_.end();) {
    if (names(&it->second, 1)) {
      lj_rec_exec_key key{it->first.first, it->first.second, 0};
      bpf_map_delete_elem(session_.lib_templates_fd(), &key);
      it = lib_templates_.erase(it);
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
    bpf_map_update_elem(session_.procs_fd(), &slot, &rec, BPF_ANY);
  });
  // The recorder's own slots name only files it counts as mapped, but the kernel may have added
  // a library to one (add_library) from a template read just before it went: that module loses
  // its rows (its walks stop there) until the recorder's rescan publishes the process again.
  for (uint32_t slot = 0; slot < LJ_REC_MAX_PROCS; ++slot) {
    lj_rec_proc rec{};
    if (bpf_map_lookup_elem(session_.procs_fd(), &slot, &rec) != 0) continue;
    bool changed = false;
    for (uint32_t i = 0; i < std::min<uint32_t>(rec.nmodules, LJ_REC_MAX_MODULES); ++i) {
      if (names(&rec.modules[i], 1)) {
        rec.modules[i].row_count = 0;
        changed = true;
      }
    }
    if (changed) bpf_map_update_elem(session_.procs_fd(), &slot, &rec, BPF_ANY);
  }
}

void KernelContexts::expire() {
  std::erase_if(contexts_, [](const auto& e) { return seconds_since(e.second.read) > kKeepS; });
  std::erase_if(replaced_, [](const Read& r) { return seconds_since(r.read) > kKeepS; });
}

}  // namespace ljprof::record
