/* record_follow.bpf.h: part of record.bpf.c (included once, at its end): the programs that
 * follow processes — exec (a context built from the executable's template), fork (the parent's
 * context copied for the child), mmap (a library the loader has seen added to the context), and
 * the notifications that make the agent rescan a process. */
#ifndef LJPROF_BPF_RECORD_FOLLOW_BPF_H
#define LJPROF_BPF_RECORD_FOLLOW_BPF_H

/* A notification: rescan process `pid` now (exec, a new child, new executable mapping). */
LJ_INLINE void notify_rescan(uint32_t pid) {
  bpf_ringbuf_output(&notify, &pid, sizeof(pid), 0);
}

/* The value of auxv entry `type` (AT_*), 0 if absent. */
LJ_INLINE uint64_t auxv_value(const struct exec_auxv* a, uint64_t type) {
  uint32_t i;
  for (i = 0; i + 1 < 64; i += 2) {
    if (a->v[i] == 0) break; /* AT_NULL ends the vector */
    if (a->v[i] == type) return a->v[i + 1];
  }
  return 0;
}

/* The next kernel slot (round robin), emptied for rewriting: no sample uses it meanwhile. */
LJ_INLINE struct lj_rec_proc* next_kernel_slot(uint32_t* slot) {
  uint32_t zero = 0;
  uint64_t* counter = bpf_map_lookup_elem(&exec_count, &zero);
  struct lj_rec_proc* proc;
  uint64_t seq;
  if (!counter) return 0;
  seq = __sync_fetch_and_add(counter, 1);
  *slot = LJ_REC_MAX_PROCS + (uint32_t)(seq % LJ_REC_EXEC_SLOTS);
  proc = bpf_map_lookup_elem(&procs, slot);
  if (!proc) return 0;
  proc->owner_pid = 0;
  proc->generation = LJ_REC_EXEC_GENERATION | (uint32_t)(seq & 0x7fffffff) | 1u;
  return proc;
}

/* Builds the context of process `tgid`, which just exec'd `t`'s executable, in the next kernel
 * slot; returns the slot, or LJ_REC_PID_PENDING when the auxv lacks an anchor. */
LJ_INLINE uint32_t build_exec_context(uint32_t tgid, const struct lj_rec_exec_template* t,
                                      const struct exec_auxv* a) {
  uint32_t slot = 0, i, n = 0;
  struct lj_rec_proc* proc = next_kernel_slot(&slot);
  if (!proc) return LJ_REC_PID_PENDING;
  for (i = 0; i < LJ_REC_EXEC_MODULES; i++) {
    const struct lj_rec_exec_module* m = &t->modules[i & (LJ_REC_EXEC_MODULES - 1)];
    uint64_t anchor, bias;
    if (i >= t->nmodules) break;
    anchor = auxv_value(a, m->anchor);
    if (anchor == 0) return LJ_REC_PID_PENDING;
    bias = anchor + (uint64_t)m->delta;
    proc->modules[i].start = m->link_start + bias;
    proc->modules[i].end = m->link_end + bias;
    proc->modules[i].bias = bias;
    proc->modules[i].row_first = m->row_first;
    proc->modules[i].row_count = m->row_count;
    if (t->lj.version != 0 && i == t->vm_module) proc->vm_bias = bias;
    n++;
  }
  proc->nmodules = n;
  proc->lj = t->lj;
  if (t->lj.version == 0) proc->vm_bias = 0;
  proc->g_hint = 0;
  proc->trace_hint = 0;
  /* The slot may have held a forked Tarantool's context: no fiber layout (record_types.h
   * lj_rec_fiber_layout) until the agent publishes this process's own context. */
  proc->fiber.main_cord = 0;
  proc->owner_pid = tgid;
  count(LJ_REC_CTR_EXEC_CONTEXTS);
  return slot;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(on_exec, struct task_struct* p, pid_t old_pid, struct linux_binprm* bprm) {
  uint32_t tgid = p->tgid, zero = 0;
  uint32_t* slotp = bpf_map_lookup_elem(&pids, &tgid);
  const struct lj_rec_exec_template* t;
  struct lj_rec_exec_key key;
  struct exec_auxv* a;
  struct mm_struct* mm;
  uint32_t slot;
  (void)old_pid;
  (void)bprm;
  if (slotp) {
    /* The old image's context is void from here: no sample may use it. */
    *slotp = LJ_REC_PID_PENDING;
    count(LJ_REC_CTR_EXECS);
    notify_rescan(tgid);
  } else if (notify_all) {
    notify_rescan(tgid);
  } else {
    return 0;
  }
  /* An executable seen before gets its context now, from the new image's auxv. */
  mm = p->mm;
  if (!mm) return 0;
  key.ino = BPF_CORE_READ(mm, exe_file, f_inode, i_ino);
  key.dev = BPF_CORE_READ(mm, exe_file, f_inode, i_sb, s_dev);
  key.pad = 0;
  t = bpf_map_lookup_elem(&exec_templates, &key);
  a = bpf_map_lookup_elem(&auxv_scratch, &zero);
  if (!t || !a || (!slotp && !t->follow_on_exec)) return 0;
  __builtin_memset(a->v, 0, sizeof(a->v));
  if (bpf_core_field_size(mm->saved_auxv) > sizeof(a->v) ||
      bpf_probe_read_kernel(a->v, bpf_core_field_size(mm->saved_auxv), &mm->saved_auxv) != 0) {
    return 0;
  }
  slot = build_exec_context(tgid, t, a);
  if (slotp) {
    *slotp = slot;
  } else if (slot != LJ_REC_PID_PENDING &&
             bpf_map_update_elem(&pids, &tgid, &slot, BPF_NOEXIST) != 0) {
    count(LJ_REC_CTR_PIDS_FULL);
  }
  return 0;
}

/* The slot of a copy of the context in `parent_slot` for `child` (a fork: the same mappings at
 * the same addresses until the child execs or maps more), or LJ_REC_PID_PENDING. */
LJ_INLINE uint32_t copy_fork_context(uint32_t parent_slot, uint32_t parent, uint32_t child) {
  const struct lj_rec_proc* src;
  struct lj_rec_proc* dst;
  uint32_t slot = 0, generation;
  if (parent_slot >= LJ_REC_MAX_PROCS + LJ_REC_EXEC_SLOTS) return LJ_REC_PID_PENDING;
  src = bpf_map_lookup_elem(&procs, &parent_slot);
  if (!src || (parent_slot >= LJ_REC_MAX_PROCS && src->owner_pid != parent)) {
    return LJ_REC_PID_PENDING;
  }
  dst = next_kernel_slot(&slot);
  if (!dst || dst == src) return LJ_REC_PID_PENDING;
  generation = dst->generation;
  /* Map values are kernel memory; a struct this size is no inline copy for the BPF backend. */
  if (bpf_probe_read_kernel(dst, sizeof(*dst), src) != 0) return LJ_REC_PID_PENDING;
  dst->generation = generation;
  dst->owner_pid = child;
  count(LJ_REC_CTR_EXEC_CONTEXTS);
  return slot;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_fork, struct task_struct* parent, struct task_struct* child) {
  uint32_t ptgid = parent->tgid, ctgid = child->tgid, pending = LJ_REC_PID_PENDING, slot;
  uint32_t* parent_slot;
  if (!follow_children || child->pid != child->tgid) return 0; /* a thread: same tgid */
  parent_slot = bpf_map_lookup_elem(&pids, &ptgid);
  if (!parent_slot) return 0;
  if (bpf_map_update_elem(&pids, &ctgid, &pending, BPF_NOEXIST) != 0) {
    count(LJ_REC_CTR_PIDS_FULL);
    return 0;
  }
  count(LJ_REC_CTR_FORKS);
  slot = copy_fork_context(*parent_slot, ptgid, ctgid);
  if (slot != LJ_REC_PID_PENDING) bpf_map_update_elem(&pids, &ctgid, &slot, BPF_EXIST);
  notify_rescan(ctgid);
  return 0;
}

/* What add_library's vma callback needs and finds: the process's context and the mapping. */
struct lib_mapping {
  struct lj_rec_proc* proc;
  uint32_t added;
  uint32_t pad;
};

/* bpf_find_vma callback: `vma` holds the address mmap returned. Adds the file's code to
 * ctx->proc when the loader left a template for the file and the mapping starts where the
 * template's does in the file (same file offset) and is at least as long: the same code at
 * another bias, [start, start + the template's length). Longer: ld.so maps a library whose first
 * segment is its code (AArch64 links without -z separate-code) over its whole span first, and
 * then its data over the tail (glibc elf/dl-map-segments.h _dl_map_segments). Nothing when the
 * range overlaps a module the context has (code mapped over other code: the loader's rescan
 * sorts that out). */
static long add_library_vma(struct task_struct* task, struct vm_area_struct* vma, void* data) {
  struct lib_mapping* lm = data;
  struct lj_rec_proc* proc = lm->proc;
  const struct lj_rec_lib_template* t;
  struct lj_rec_exec_key key;
  struct lj_rec_module* m;
  uint64_t start = vma->vm_start, end = vma->vm_end, bias, *counter;
  uint32_t i, n, zero = 0;
  (void)task;
  if (!vma->vm_file) return 0;
  key.ino = BPF_CORE_READ(vma, vm_file, f_inode, i_ino);
  key.dev = BPF_CORE_READ(vma, vm_file, f_inode, i_sb, s_dev);
  key.pad = 0;
  t = bpf_map_lookup_elem(&lib_templates, &key);
  if (!t || t->pgoff != vma->vm_pgoff || end - start < t->link_end - t->link_start) return 0;
  end = start + (t->link_end - t->link_start);
  n = proc->nmodules;
  if (n >= LJ_REC_MAX_MODULES) return 0;
  for (i = 0; i < LJ_REC_MAX_MODULES; i++) {
    if (i >= n) break;
    if (start < proc->modules[i].end && proc->modules[i].start < end) return 0;
  }
  bias = start - t->link_start;
  m = &proc->modules[n & (LJ_REC_MAX_MODULES - 1)];
  m->start = start;
  m->end = end;
  m->bias = bias;
  m->row_first = t->row_first;
  m->row_count = t->row_count;
  /* The module is whole before the count lets a sample see it: a fetching atomic operation is
   * fully ordered (Documentation/bpf/standardization/instruction-set.rst, BPF_FETCH), and the
   * BPF target without alu32 has it in 64 bits only, so on a counter of its own. */
  counter = bpf_map_lookup_elem(&exec_count, &zero);
  if (!counter || __sync_fetch_and_add(counter, 0) == ~0ull) return 0;
  proc->nmodules = n + 1;
  lm->added = 1;
  return 0;
}

/* A followed process mapped code at `addr`: when it is a library the loader has seen (a
 * template), add it to the process's context now, so the walks of the next samples go through
 * it instead of ending there until the loader's rescan. Only while the process has one thread
 * (ld.so loading the libraries of a new image; no other thread can be appending to the same
 * context), and only to a context of its own (a kernel slot it owns, or the loader's slot its
 * pid points to: a slot the loader replaced is reused only after every other free one). */
LJ_INLINE void add_library(uint32_t tgid, uint32_t slot, uint64_t addr) {
  struct task_struct* task = bpf_get_current_task_btf();
  struct lib_mapping lm = {0, 0, 0};
  if (slot >= LJ_REC_MAX_PROCS + LJ_REC_EXEC_SLOTS) return;
  if (BPF_CORE_READ(task, signal, nr_threads) != 1) return;
  lm.proc = bpf_map_lookup_elem(&procs, &slot);
  if (!lm.proc || (slot >= LJ_REC_MAX_PROCS && lm.proc->owner_pid != tgid)) return;
  bpf_find_vma(task, addr, add_library_vma, &lm, 0);
  if (lm.added) count(LJ_REC_CTR_LIBS_ADDED);
}

/* mmap(2) returned (on_sys_exit, record.bpf.c): a followed process may have mapped new code
 * (dlopen of an nginx module, a library loaded after exec); with notify_all, any process may have
 * loaded LuaJIT. PROT_EXEC is 4 (uapi asm-generic/mman-common.h). */
LJ_INLINE void mmap_returned(struct pt_regs* regs, long ret) {
  uint32_t tgid, *slotp;
  unsigned long prot;
#if defined(__TARGET_ARCH_x86)
  prot = regs->dx; /* third argument */
#else
  prot = regs->regs[2];
#endif
  if (!(prot & 4) || ret < 0) return;
  tgid = (uint32_t)(bpf_get_current_pid_tgid() >> 32);
  slotp = bpf_map_lookup_elem(&pids, &tgid);
  if (!slotp && !notify_all) return;
  if (slotp) add_library(tgid, *slotp, (uint64_t)ret);
  notify_rescan(tgid);
}

char LICENSE[] SEC("license") = "GPL";

#endif /* LJPROF_BPF_RECORD_FOLLOW_BPF_H */
