/* record_off_cpu.bpf.h: part of record.bpf.c (included once, after sample_current): where
 * followed threads spend time off the CPU (record --off-cpu) and event-loop stalls
 * (record --loop-stalls). Loaded only when asked for, as the programs here and as steps of
 * on_sys_exit: they run on every context switch and syscall of the host. */
#ifndef LJPROF_BPF_RECORD_OFF_CPU_BPF_H
#define LJPROF_BPF_RECORD_OFF_CPU_BPF_H

/* When each followed thread that is off the CPU left it, and why (on_switch_out). */
struct lj_rec_off_cpu {
  uint64_t ns;
  uint32_t state; /* LJ_REC_OFF_CPU_* */
  uint32_t pad;
  /* The user pc and sp saved at the kernel entry it left the CPU in: a syscall that returns
   * with the same ones is that entry's end (off_cpu_syscall_returned). */
  uint64_t user_pc;
  uint64_t user_sp;
};
/* A plain hash, not an LRU one: the syscall-exit program looks it up on every syscall of every
 * task, and an LRU lookup also updates the LRU lists. Entries are deleted when their interval
 * closes; a thread that leaves the CPU for good (PF_EXITING) adds none. */
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, LJ_REC_OFF_CPU_THREADS);
  __type(key, uint32_t);
  __type(value, struct lj_rec_off_cpu);
} off_cpu_since SEC(".maps");

/* When each followed thread last returned from its event loop's wait (record --loop-stalls). */
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, LJ_REC_OFF_CPU_THREADS);
  __type(key, uint32_t);
  __type(value, uint64_t);
} loop_wait_returned SEC(".maps");

/* Off-CPU time (record --off-cpu). sched_switch runs as `prev` leaves the CPU: a followed thread
 * notes when, why, and the user pc and sp of the kernel entry it is in (off_cpu_since). The
 * interval is closed in the thread itself, once it has the CPU back and before it returns to user
 * space — where its memory can be read and the interval's length is known:
 *  - on_switch_in, a kprobe on finish_task_switch, on kernels with kprobes: every interval;
 *  - off_cpu_syscall_returned, at the exit of the syscall it blocked in (same user pc and sp):
 * where kprobes are missing, the intervals spent in a syscall (sleeps, I/O, futex, epoll). An
 *    interval that ends elsewhere (a preemption in user code, a page fault) is counted when the
 *    thread next leaves the CPU, not walked.
 * Under the threshold an interval costs a lookup and a delete; a longer one is walked from the
 * user registers saved at that kernel entry and sent weighted by its length. Threads of processes
 * nobody follows cost one hash lookup per switch. */
LJ_INLINE int close_off_cpu(struct lj_rec_off_cpu* since, uint32_t tgid, uint32_t tid) {
  uint64_t now = bpf_ktime_get_ns(), took = now - since->ns;
  uint32_t state = since->state;
  uint32_t* slotp;
  bpf_map_delete_elem(&off_cpu_since, &tid);
  if (took < off_cpu_threshold_ns) {
    count(LJ_REC_CTR_OFF_CPU_SHORT);
    return 0;
  }
  slotp = bpf_map_lookup_elem(&pids, &tgid);
  if (!slotp) return 0;
  count(LJ_REC_CTR_OFF_CPU_WALKED);
  return sample_current(tgid, tid, *slotp, now, LJ_REC_KIND_OFF_CPU, took, state);
}

SEC("tp_btf/sched_switch")
int BPF_PROG(on_switch_out, bool preempt, struct task_struct* prev, struct task_struct* next) {
  uint32_t tgid, tid;
  struct lj_rec_off_cpu since;
  struct pt_regs* regs;
  (void)next;
  if (off_cpu_threshold_ns == 0) return 0;
  /* prev is a BTF pointer (tp_btf): plain loads, no probe-read helper calls on every switch. */
  tgid = prev->tgid;
  tid = prev->pid;
  if (tgid == 0 || !bpf_map_lookup_elem(&pids, &tgid)) return 0;
  if (prev->flags & 0x4) { /* PF_EXITING: it will not come back */
    bpf_map_delete_elem(&off_cpu_since, &tid);
    return 0;
  }
  /* An interval still open: it ended where no hook could walk it. */
  if (bpf_map_lookup_elem(&off_cpu_since, &tid)) count(LJ_REC_CTR_OFF_CPU_UNWALKED);
  since.ns = bpf_ktime_get_ns();
  /* Not preempted and not runnable (task_struct.__state != TASK_RUNNING): it waits. */
  since.state = !preempt && prev->__state != 0 ? LJ_REC_OFF_CPU_BLOCKED : LJ_REC_OFF_CPU_PREEMPTED;
  since.pad = 0;
  regs = (struct pt_regs*)bpf_task_pt_regs(prev);
  since.user_pc = PT_REGS_IP_CORE(regs);
  since.user_sp = PT_REGS_SP_CORE(regs);
  bpf_map_update_elem(&off_cpu_since, &tid, &since, BPF_ANY);
  return 0;
}

SEC("kprobe")
int on_switch_in(struct pt_regs* ctx) {
  uint64_t id = bpf_get_current_pid_tgid();
  uint32_t tgid = (uint32_t)(id >> 32), tid = (uint32_t)id;
  struct lj_rec_off_cpu* since;
  (void)ctx;
  if (off_cpu_threshold_ns == 0 || tgid == 0) return 0;
  since = bpf_map_lookup_elem(&off_cpu_since, &tid);
  if (!since) return 0;
  return close_off_cpu(since, tgid, tid);
}

/* A syscall returned (on_sys_exit, record.bpf.c): the end of an off-CPU interval its thread
 * spent blocked in it. */
LJ_INLINE void off_cpu_syscall_returned(struct pt_regs* regs) {
  uint64_t id = bpf_get_current_pid_tgid();
  uint32_t tgid = (uint32_t)(id >> 32), tid = (uint32_t)id;
  struct lj_rec_off_cpu* since;
  if (tgid == 0) return;
  since = bpf_map_lookup_elem(&off_cpu_since, &tid);
  if (!since) return;
  if (since->user_pc != PT_REGS_IP_CORE(regs) || since->user_sp != PT_REGS_SP_CORE(regs)) {
    return; /* it left the CPU in another kernel entry: not this syscall's */
  }
  close_off_cpu(since, tgid, tid);
}

/* Event-loop stalls (record --loop-stalls): the time a followed thread spends between returning
 * from its loop's wait and entering the next one — the work of one loop iteration — over the
 * threshold is sent as a stall; the agent finds the samples taken inside it. The waits: epoll_wait,
 * epoll_pwait and epoll_pwait2 (Tarantool's libev and nginx's epoll module). Other syscalls cost
 * a comparison. */
LJ_INLINE int is_loop_wait(long nr) {
#if defined(__TARGET_ARCH_x86)
  return nr == 232 || nr == 281 || nr == 441; /* arch/x86/entry/syscalls/syscall_64.tbl */
#else
  return nr == 22 || nr == 441; /* include/uapi/asm-generic/unistd.h: epoll_pwait, _pwait2 */
#endif
}

/* A loop's wait returned (on_sys_exit, record.bpf.c): the iteration's work starts now. */
LJ_INLINE void loop_wait_returned_now(void) {
  uint64_t id = bpf_get_current_pid_tgid(), now;
  uint32_t tgid = (uint32_t)(id >> 32), tid = (uint32_t)id;
  if (!bpf_map_lookup_elem(&pids, &tgid)) return;
  now = bpf_ktime_get_ns();
  bpf_map_update_elem(&loop_wait_returned, &tid, &now, BPF_ANY);
}

SEC("tp_btf/sys_enter")
int BPF_PROG(on_loop_wait_enter, struct pt_regs* regs, long nr) {
  uint64_t id = bpf_get_current_pid_tgid(), now, *returned;
  uint32_t tgid = (uint32_t)(id >> 32), tid = (uint32_t)id;
  struct lj_rec_stall stall;
  (void)regs;
  if (loop_stall_ns == 0 || !is_loop_wait(nr)) return 0;
  returned = bpf_map_lookup_elem(&loop_wait_returned, &tid);
  if (!returned) return 0;
  now = bpf_ktime_get_ns();
  if (now - *returned < loop_stall_ns) return 0;
  stall.kind = LJ_REC_KIND_STALL;
  stall.pid = tgid;
  stall.tid = tid;
  stall.pad = 0;
  stall.start_ns = *returned;
  stall.duration_ns = now - *returned;
  bpf_map_delete_elem(&loop_wait_returned, &tid);
  if (bpf_ringbuf_output(&events, &stall, sizeof(stall), 0) != 0) count(LJ_REC_CTR_RINGBUF_FULL);
  return 0;
}

#endif /* LJPROF_BPF_RECORD_OFF_CPU_BPF_H */
