/* record_follow.bpf.h: part of record.bpf.c (included once, at its end): the programs that
 * follow processes — exec (a context built from the executable's template), fork (the parent's
 * context copied for the child), and the notifications that make the agent rescan a process. */
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

/* mmap(2) returned (on_sys_exit, record.bpf.c): a followed process may have mapped new code
 * (dlopen of an nginx module, a library loaded after exec); with notify_all, any process may have
 * loaded LuaJIT. PROT_EXEC is 4 (uapi asm-generic/mman-common.h). */
LJ_INLINE void mmap_returned(struct pt_regs* regs, long ret) {
  uint32_t tgid;
  unsigned long prot;
#if defined(__TARGET_ARCH_x86)
  prot = regs->dx; /* third argument */
#else
  prot = regs->regs[2];
#endif
  if (!(prot & 4) || ret < 0) return;
  tgid = (uint32_t)(bpf_get_current_pid_tgid() >> 32);
  if (!bpf_map_lookup_elem(&pids, &tgid) && !notify_all) return;
  notify_rescan(tgid);
}

char LICENSE[] SEC("license") = "GPL";

#endif /* LJPROF_BPF_RECORD_FOLLOW_BPF_H */
