/* record.bpf.c: the live recorder's kernel half. On every perf_event sample of a followed
 * process it runs the one stack walker (bpf/walker/walker.h, the same code `ljprof core` runs
 * natively) over the thread's user registers and sends the mixed stack through a ring buffer.
 *
 * Maps the loader (src/record) fills:
 *   pids   tgid -> slot in `procs` (LJ_REC_PID_PENDING: followed, no context yet)
 *   procs  per-process unwind context: modules with CFI, LuaJIT layout, G hint
 *   rows   the CFI rows of the files followed processes map (written by the loader, shared
 *          between processes that map the same file; its size set by the loader, --unwind-rows)
 * and it reads back `events` (samples), `notify` (a followed process exec'd, forked or mapped
 * new code: rescan it now) and the per-CPU `counters`. */
#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "abi/inline.h"
#include "abi/record_types.h"

/* The walker's environment: the context of the sampled process. */
struct lj_walk_env {
  const struct lj_rec_proc* proc;
  uint32_t scratch; /* the per-CPU scratch slot of the running program (LJ_REC_SCRATCH_SLOTS) */
};

/* 1 (record --stats): the program tallies what its walks do (the tally_* counters below, for
 * the per-frame breakdown of its time). Off, the verifier drops the tallying. The counters are
 * global: each step adds to them where it stands, with no register kept for them (a pointer to
 * per-sample counts carried through the walk made its frame spill more, over the 512 bytes of
 * stack the kernel allows the walk's call chain: Linux 6.1 counts each frame rounded up to 32;
 * counts on the stack made every bpf_loop iteration a new verifier state). On, it costs some 3%
 * of a 58-frame walk's time (measured 2026-12-07). */
const volatile uint32_t tally_work = 0;
uint64_t tally_frames = 0;     /* frames of the walks tallied */
uint64_t tally_reads = 0;      /* user-memory reads through the walker's reader */
uint64_t tally_read_bytes = 0; /* their bytes */
uint64_t tally_lookups = 0;    /* row lookups (lj_rec_lookup) */
uint64_t tally_cache_hits = 0; /* of them, answered by the per-CPU row cache */
uint64_t tally_row_reads = 0;  /* row-map elements the other lookups' binary searches read */
#define LJ_LOOKUP_ROW_READ 256 /* lj_rec_lookup's result: its status below, its row reads above */

/* Per-CPU scratch (walk state, result, sample record, registers, row cache) has one slot per
 * program that may interrupt another on the same CPU: the perf-event sampler (slot 0) runs in
 * the timer interrupt, which can land while an off-CPU program (slot 1: sys_exit, kprobe) is
 * halfway through its walk. Sharing one slot would mix two stacks in one record. */
#define LJ_REC_SCRATCH_SLOTS 2

LJ_INLINE int lj_walk_read(struct lj_walk_env* env, void* dst, uint32_t len, uint64_t addr) {
  /* env is null in the young objects' copies (record_capture.bpf.h): not a walk's read. */
  if (tally_work && env) {
    __sync_fetch_and_add(&tally_reads, 1);
    __sync_fetch_and_add(&tally_read_bytes, len);
  }
  return bpf_probe_read_user(dst, len, (const void*)addr);
}

/* Mappable: the loader copies a file's rows in through mmap (src/record/unwind_rows.cc). */
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, LJ_REC_MAX_ROWS);
  __uint(map_flags, BPF_F_MMAPABLE);
  __type(key, uint32_t);
  __type(value, struct lj_cfi_row);
} rows SEC(".maps");

/* The rows lookups found lately, per CPU, by (context generation, pc): the same return
 * addresses (main, lua_pcall, the VM entry) come back in nearly every sample, and a binary
 * search over the 48 MiB row table misses the cache and the TLB at almost every step (measured
 * at ~250 ns per lookup, against ~30 ns for a hit here). Per CPU, so no entry is ever written
 * by two programs at once. An entry is never stale: a published context's rows are never
 * rewritten (the loader frees a file's rows only once no published context names them and
 * every program that could have found them has returned, src/record/unwind_rows.h), and every
 * context is published under a generation no other context had, so an entry found for a
 * context that is no longer published is never looked up again (a program still walking with
 * such a context may write one, before the loader reuses its rows). */
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, LJ_REC_ROW_CACHE* LJ_REC_SCRATCH_SLOTS);
  __type(key, uint32_t);
  __type(value, struct lj_rec_row_cache_entry);
} row_cache SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, LJ_REC_MAX_PROCS + LJ_REC_EXEC_SLOTS);
  __type(key, uint32_t);
  __type(value, struct lj_rec_proc);
} procs SEC(".maps");

/* Executables the loader has seen -> how to build their context at exec (record_types.h). */
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, LJ_REC_MAX_EXEC_TEMPLATES);
  __type(key, struct lj_rec_exec_key);
  __type(value, struct lj_rec_exec_template);
} exec_templates SEC(".maps");

/* Library files the loader has seen -> how to add their code to a context when a followed
 * process maps it (record_types.h lj_rec_lib_template; record_follow.bpf.h add_library). */
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, LJ_REC_MAX_LIB_TEMPLATES);
  __type(key, struct lj_rec_exec_key);
  __type(value, struct lj_rec_lib_template);
} lib_templates SEC(".maps");

/* Contexts built at exec so far: the next one's slot and generation. */
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, uint32_t);
  __type(value, uint64_t);
} exec_count SEC(".maps");

/* The new image's auxiliary vector (mm_struct.saved_auxv: AT_* type/value pairs), read at exec. */
struct exec_auxv {
  uint64_t v[64];
};
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, uint32_t);
  __type(value, struct exec_auxv);
} auxv_scratch SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, LJ_REC_MAX_PIDS);
  __type(key, uint32_t);
  __type(value, uint32_t);
} pids SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, LJ_REC_NCOUNTERS);
  __type(key, uint32_t);
  __type(value, uint64_t);
} counters SEC(".maps");

/* When this CPU's sampling timer last fired (bpf_ktime_get_ns), for ticks_missed. */
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, uint32_t);
  __type(value, uint64_t);
} last_tick SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, LJ_REC_SCRATCH_SLOTS);
  __type(key, uint32_t);
  __type(value, struct lj_walk_result);
} walk_scratch SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, LJ_REC_SCRATCH_SLOTS);
  __type(key, uint32_t);
  __type(value, struct lj_rec_sample);
} sample_scratch SEC(".maps");

/* The sampled thread's user registers, copied from its task: in a map value, not on the BPF
 * stack, which they would fill past the verifier's 512-byte limit for on_sample and its loop
 * callbacks together (arm64's struct pt_regs is 336 bytes). */
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, LJ_REC_SCRATCH_SLOTS);
  __type(key, uint32_t);
  __type(value, struct pt_regs);
} user_regs SEC(".maps");

/* The walk's step-to-step state: in a map value, not on the BPF stack, so the verifier checks
 * the step callback about once (walker.h struct lj_walk_ctx). */
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, LJ_REC_SCRATCH_SLOTS);
  __type(key, uint32_t);
  __type(value, struct lj_walk_state);
} walk_state SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 2 << 20); /* the loader may resize it (--ringbuf-mb) */
} events SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 64 << 10);
} notify SEC(".maps");

/* The objects of young processes copied so far (record_types.h lj_rec_capture), with the version
 * each was copied at: an object is copied again only when the program sees it changed (a freed
 * prototype's address reused by another). LRU: a forgotten entry costs one copy more, never a
 * wrong name (the agent keeps the newest copy of an address). */
struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, LJ_REC_CAPTURED_OBJECTS);
  __type(key, struct lj_rec_capture_key);
  __type(value, uint64_t);
} captured SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, uint32_t);
  __type(value, struct lj_rec_capture);
} capture_scratch SEC(".maps");

/* Set by the loader before load (skeleton .rodata). */
const volatile uint32_t follow_children = 0;
/* 1 (-a, ljprof agent): every exec and every executable mmap on the host is notified, so a
 * LuaJIT process that starts, or a running one that loads LuaJIT (dlopen), is followed from its
 * first milliseconds; the agent's /proc scan then only looks at processes it has never seen. */
const volatile uint32_t notify_all = 0;
/* Samples wake the agent only once this many bytes wait in `events` (a quarter of it): the agent
 * drains the ring on its own short timer instead, so it is not woken 1000 times a second. */
const volatile uint64_t wakeup_bytes = 0;
/* A process whose thread group started less than this long ago (task_struct.start_time, the
 * CLOCK_MONOTONIC time of its fork) is young: its samples copy the objects naming reads
 * (lj_rec_capture). 0: nothing is copied. Processes older than this cost one comparison. */
const volatile uint64_t capture_young_ns = 0;
/* record --off-cpu: off-CPU intervals of followed threads at least this long are walked and
 * sent (LJ_REC_KIND_OFF_CPU). 0: off-CPU time is not recorded (its programs are not loaded, and
 * the verifier drops its step of on_sys_exit). */
const volatile uint64_t off_cpu_threshold_ns = 0;
/* record --loop-stalls: a followed thread away from its event loop's wait at least this long is
 * a stall (lj_rec_stall). 0: not watched (its syscall-entry program is not loaded, and the
 * verifier drops its step of on_sys_exit). */
const volatile uint64_t loop_stall_ns = 0;
/* The sampling timer's period in ns (1e9 / -F; perf turns a cpu-clock frequency into this fixed
 * period: kernel/events/core.c perf_swevent_init_hrtimer). 0: ticks_missed is not checked. */
const volatile uint64_t sample_period_ns = 0;

LJ_INLINE void count_n(uint32_t index, uint64_t n) {
  uint64_t* c = bpf_map_lookup_elem(&counters, &index);
  if (c) *c += n;
}

LJ_INLINE void count(uint32_t index) {
  count_n(index, 1);
}

/* The index of the module mapped at runtime address `pc` in p->modules, or -1. A global
 * function of its own so that its result reaches lj_rec_lookup as one unknown index: inlined,
 * the verifier followed the row search once per module slot the scan could stop at (each a
 * pointer with a different fixed offset, so no two states merged): 290k of the 312k
 * instructions it processed for the whole program, 0.5 s of every ljprof start on x86-64 and
 * some 10 s in the emulated arm64 VM. */
__attribute__((noinline)) int lj_rec_module_of(const struct lj_rec_proc* p, uint64_t pc) {
  uint32_t i, n;
  if (!p) return -1;
  n = p->nmodules;
  for (i = 0; i < LJ_REC_MAX_MODULES; i++) {
    if (i >= n) break;
    if (pc >= p->modules[i].start && pc < p->modules[i].end) return (int)i;
  }
  return -1;
}

/* Finds the module of runtime address `pc` and the row covering it (a binary search over that
 * module's rows, sorted by pc_start; cfi_row.h). A global (non-static, never inlined) function:
 * the verifier checks it once on its own instead of once per walker path that calls it, which
 * keeps the walk step within the verifier's budget. Returns 0 or LJ_LOOKUP_NO_MODULE, plus
 * LJ_LOOKUP_ROW_READ for each row-map element its binary search read (the tally's; counted in
 * the result, not through a pointer argument, which kept its stack frame one 32-byte step
 * larger: over the kernel's 512 bytes for the call chain on Linux 6.1). */
__attribute__((noinline)) int lj_rec_lookup(const struct lj_rec_proc* p, uint64_t pc,
                                            struct lj_cfi_row* row, uint32_t scratch) {
  const struct lj_rec_module* m;
  uint32_t i, lo = 0, hi, step, key;
  struct lj_cfi_row* hit;
  uint64_t link;

  struct lj_rec_row_cache_entry* cached;
  uint32_t row_reads = 0;

  if (!p || !row) return LJ_LOOKUP_NO_MODULE;
  key = (uint32_t)(((pc ^ ((uint64_t)p->generation << 32)) * 0x9e3779b97f4a7c15ULL) >> 52) &
        (LJ_REC_ROW_CACHE - 1);
  if (scratch != 0) key += LJ_REC_ROW_CACHE;
  cached = bpf_map_lookup_elem(&row_cache, &key);
  if (cached && cached->generation == p->generation && cached->pc == pc && p->generation != 0) {
    *row = cached->row;
    return 0;
  }
  i = (uint32_t)lj_rec_module_of(p, pc);
  if (i >= LJ_REC_MAX_MODULES) return LJ_LOOKUP_NO_MODULE;
  m = &p->modules[i];
  if (m->row_count == 0) return LJ_LOOKUP_NO_MODULE;
  link = pc - m->bias;
  hi = m->row_count;
  /* Invariant: the row sought (the last with pc_start <= link) is in [lo, hi). */
  for (step = 0; step < LJ_REC_ROW_SEARCH_STEPS; step++) {
    uint32_t mid;
    if (hi - lo <= 1) break;
    mid = lo + (hi - lo) / 2;
    key = m->row_first + mid;
    hit = bpf_map_lookup_elem(&rows, &key);
    row_reads += LJ_LOOKUP_ROW_READ;
    if (!hit) return LJ_LOOKUP_NO_MODULE | row_reads;
    if (hit->pc_start <= link)
      lo = mid;
    else
      hi = mid;
  }
  if (hi - lo > 1) return LJ_LOOKUP_NO_MODULE | row_reads; /* more rows than the bound: refuse */
  key = m->row_first + lo;
  hit = bpf_map_lookup_elem(&rows, &key);
  row_reads += LJ_LOOKUP_ROW_READ;
  if (!hit || hit->pc_start > link) return LJ_LOOKUP_NO_MODULE | row_reads;
  *row = *hit;
  if (cached) {
    cached->pc = pc;
    cached->generation = p->generation;
    cached->row = *hit;
  }
  return (int)row_reads;
}

LJ_INLINE int lj_walk_lookup(struct lj_walk_env* env, uint64_t pc, struct lj_cfi_row* row) {
  const int rc = lj_rec_lookup(env->proc, pc, row, env->scratch);
  if (tally_work) {
    __sync_fetch_and_add(&tally_lookups, 1);
    __sync_fetch_and_add(&tally_row_reads, (uint32_t)rc / LJ_LOOKUP_ROW_READ);
    if (rc == 0) __sync_fetch_and_add(&tally_cache_hits, 1); /* no row read: the row cache's */
  }
  return rc & (LJ_LOOKUP_ROW_READ - 1);
}

#define LJ_WALK_LOOP(n, fn, ctx) bpf_loop((n), (fn), (ctx), 0)
#include "walker/walker.h"

/* The sampled thread's user registers as the walker wants them. */
LJ_INLINE uint64_t dwarf_reg(const struct pt_regs* r, uint32_t n) {
#if defined(__TARGET_ARCH_x86)
  /* x86-64 DWARF numbering (System V psABI table 3.36). */
  switch (n) {
    case 0:
      return r->ax;
    case 1:
      return r->dx;
    case 2:
      return r->cx;
    case 3:
      return r->bx;
    case 4:
      return r->si;
    case 5:
      return r->di;
    case 6:
      return r->bp;
    case 7:
      return r->sp;
    case 8:
      return r->r8;
    case 9:
      return r->r9;
    case 10:
      return r->r10;
    case 11:
      return r->r11;
    case 12:
      return r->r12;
    case 13:
      return r->r13;
    case 14:
      return r->r14;
    case 15:
      return r->r15;
    default:
      return 0;
  }
#elif defined(__TARGET_ARCH_arm64)
  return n < 31 ? r->regs[n & 31] : 0;
#else
#error "record.bpf.c: build with -D__TARGET_ARCH_x86 or -D__TARGET_ARCH_arm64"
#endif
}

LJ_INLINE void load_regs(const struct pt_regs* r, const struct lj_luajit_info* lj,
                         struct lj_native_regs* out) {
#if defined(__TARGET_ARCH_x86)
  out->pc = r->ip;
  out->sp = r->sp;
  out->fp = r->bp;
  /* vm_x64.dasc: BASE is rdx, PC is rbx while the interpreter runs. */
  out->vm_base = r->dx;
  out->vm_pc = r->bx;
  out->bx_valid = 1;
#else
  out->pc = r->pc;
  out->sp = r->sp;
  out->fp = r->regs[29];
  out->lr = r->regs[30];
  out->lr_valid = 1;
  /* vm_arm64.dasc: BASE is x19, PC is x21. */
  out->vm_base = r->regs[19];
  out->vm_pc = r->regs[21];
#endif
  out->fp_valid = 1;
  if (lj) {
    out->dispatch = dwarf_reg(r, lj->dispatch_reg);
    out->dispatch_valid = 1;
  }
}

/* Fills the ring-buffer frame `i` from the walk, reading each Lua frame's prototype now. The
 * last function and prototype read are remembered (recursion repeats them; each user-memory
 * read costs far more than the bytes it copies): the sample's memory does not change while
 * this program runs on it. */
struct convert_ctx {
  const struct lj_luajit_info* lj;
  const struct lj_walk_result* walk;
  struct lj_rec_sample* sample;
  struct lj_walk_env* env;
  uint64_t last_func; /* 0: none yet */
  uint64_t last_proto;
  uint64_t last_chunkname;
  int32_t last_firstline;
  uint32_t pad;
};

/* GCproto.chunkname and .firstline (lj_obj.h: adjacent in every fork's layout, the reference
 * 8 or 4 bytes); one read when they are adjacent, two otherwise. */
LJ_INLINE int read_chunk_and_line(struct lj_walk_env* env, const struct lj_luajit_info* lj,
                                  uint64_t proto, uint64_t* chunkname, int32_t* firstline) {
  if (lj->gc64 && lj->pt_firstline == lj->pt_chunkname + 8) {
    struct {
      uint64_t name;
      int32_t line;
    } __attribute__((packed)) both;
    if (lj_walk_read(env, &both, sizeof(both), proto + lj->pt_chunkname) != 0) return -1;
    *chunkname = both.name;
    *firstline = both.line;
    return 0;
  }
  if (!lj->gc64 && lj->pt_firstline == lj->pt_chunkname + 4) {
    uint32_t both[2] = {0, 0};
    if (lj_walk_read(env, both, sizeof(both), proto + lj->pt_chunkname) != 0) return -1;
    *chunkname = both[0];
    *firstline = (int32_t)both[1];
    return 0;
  }
  if (lj_read_ref(env, lj, proto + lj->pt_chunkname, chunkname) != 0 ||
      lj_walk_read(env, firstline, 4, proto + lj->pt_firstline) != 0)
    return -1;
  return 0;
}

LJ_INLINE void lua_frame_info(struct convert_ctx* c, struct lj_rec_frame* f, uint64_t walked) {
  const struct lj_luajit_info* lj = c->lj;
  uint64_t first_ins = 0, proto = walked, chunkname = 0;
  int32_t firstline = 0;
  f->proto = 0;
  f->chunkname = 0;
  f->firstline = 0;
  if (f->pc != c->last_func || c->last_func == 0) {
    /* lj_obj.h funcproto(): the GCproto header sits right before the function's first
     * instruction, GCfuncL.pc; the walk read it with the function's header when it could
     * (lj_walk_frame.proto). */
    if (proto == 0 && (lj_read_ref(c->env, lj, f->pc + lj->fn_pc, &first_ins) != 0 ||
                       first_ins < (uint64_t)lj->pt_size)) {
      count(LJ_REC_CTR_LUA_INFO_FAULT);
      return;
    }
    if (proto == 0) proto = first_ins - lj->pt_size;
    if (proto != c->last_proto || c->last_func == 0) {
      if (read_chunk_and_line(c->env, lj, proto, &chunkname, &firstline) != 0) {
        count(LJ_REC_CTR_LUA_INFO_FAULT);
        return;
      }
      c->last_chunkname = chunkname;
      c->last_firstline = firstline;
    }
    c->last_func = f->pc;
    c->last_proto = proto;
  }
  /* The agent decodes the line from this prototype after checking it is still this one
   * (record/sample_frames.cc); the kernel only identifies it. */
  f->proto = c->last_proto;
  f->chunkname = c->last_chunkname;
  f->firstline = c->last_firstline;
}

static long convert_frame(uint64_t i, void* ctx) {
  struct convert_ctx* c = ctx;
  const struct lj_walk_frame* wf;
  struct lj_rec_frame* f;
  if (i >= LJ_WALK_MAX_FRAMES) return 1;
  wf = &c->walk->frames[i];
  f = &c->sample->frames[i];
  f->pc = wf->pc;
  f->b = wf->b;
  f->kind = wf->kind;
  f->lua_state = wf->lua_state;
  f->proto = 0;
  f->chunkname = 0;
  f->firstline = 0;
  f->traceno = 0;
  if (wf->kind == LJ_FRAME_LUA && c->lj) lua_frame_info(c, f, wf->proto);
  if (wf->kind == LJ_FRAME_TRACE && c->lj) {
    uint16_t traceno = 0;
    if (lj_walk_read(c->env, &traceno, 2, wf->b + c->lj->tr_traceno) == 0) f->traceno = traceno;
  }
  return 0;
}

#include "record_capture.bpf.h"

/* Whether the sampled task has a user stack worth walking; counts why not. */
LJ_INLINE int task_walkable(struct task_struct* task) {
  /* A process past exit_group (PF_EXITING, include/linux/sched.h) is tearing down its memory:
   * the kernel's exit work has no user stack to walk, and a walk through half-unmapped code
   * would end anywhere. */
  if (task->flags & 0x4) {
    count(LJ_REC_CTR_EXITING);
    return 0;
  }
  /* Inside execve (task_struct.in_execve): the registers saved at kernel entry are the old
   * image's, whose memory may already be replaced by the new one's (fs/exec.c exec_mmap). */
  if (BPF_CORE_READ_BITFIELD(task, in_execve)) {
    count(LJ_REC_CTR_IN_EXEC);
    return 0;
  }
  return 1;
}

/* Runs the one walker over the user registers `regs` of process `proc` into `out`, and keeps
 * the hints the walk proved in `proc`. */
LJ_INLINE void walk_user_stack(struct lj_rec_proc* proc, const struct lj_luajit_info* lj,
                               struct lj_walk_env* env, const struct pt_regs* regs,
                               struct lj_walk_state* st, struct lj_walk_result* out) {
  struct lj_walk_ctx wc;
  /* All but the windows and the step's row, which the walk marks empty (lj_walk) or sets
   * before it reads them: their bytes need no clearing, and clang's inline memset stops short
   * of the whole state. */
  __builtin_memset(st, 0, __builtin_offsetof(struct lj_walk_state, lua_window));
  env->proc = proc;
  wc.env = env;
  wc.lj = lj;
  wc.out = out;
  wc.st = st;
  st->g = proc->g_hint;
  st->trace_hint = proc->trace_hint;
  st->vm_bias = proc->vm_bias;
  load_regs(regs, lj, &st->regs);
  lj_walk(&wc);
  /* Keep a G and an AArch64 trace this walk proved: the next sample in a trace can use them
   * (hints, re-proved before every use, so a racy write is harmless). */
  if (out->g != 0 && out->g != proc->g_hint) proc->g_hint = out->g;
  if (st->trace_hint != proc->trace_hint) proc->trace_hint = st->trace_hint;
}

/* The sample record's header from the walk; returns its frame count. */
LJ_INLINE uint32_t fill_sample_header(struct lj_rec_sample* sample,
                                      const struct lj_walk_result* out, uint32_t tgid, uint32_t tid,
                                      uint64_t start_ns, uint32_t generation) {
  uint32_t n;
  sample->kind = LJ_REC_KIND_SAMPLE;
  sample->pid = tgid;
  sample->tid = tid;
  sample->time_ns = start_ns;
  sample->cpu = bpf_get_smp_processor_id();
  n = out->nframes;
  if (n > LJ_WALK_MAX_FRAMES) n = LJ_WALK_MAX_FRAMES;
  sample->nframes = n;
  sample->end = out->end;
  sample->lua_states = out->lua_states;
  sample->end_pc = out->end_pc;
  sample->generation = generation;
  sample->off_cpu_state = 0;
  sample->off_cpu_ns = 0;
  return n;
}

/* The cord the current thread runs (lj_rec_fiber_layout): its __thread cord_ptr at the thread
 * pointer: x86-64 the task's fsbase, arm64 its TPIDR_EL0 as saved at each switch out
 * (arch/arm64/kernel/process.c tls_thread_switch; 0 until glibc's own write of it in the main
 * thread is first saved). Without either, main_cord for the main thread. 0: none. */
LJ_INLINE uint64_t current_cord(const struct lj_rec_fiber_layout* f, uint32_t tgid, uint32_t tid) {
  uint64_t tp = 0, cord = 0;
  if (f->cord_tp_offset != 0) {
    struct task_struct* task = bpf_get_current_task_btf();
#if defined(__TARGET_ARCH_x86)
    tp = BPF_CORE_READ(task, thread.fsbase);
#elif defined(__TARGET_ARCH_arm64)
    tp = BPF_CORE_READ(task, thread.uw.tp_value);
#endif
  }
  if (tp != 0) {
    if (bpf_probe_read_user(&cord, 8, (void*)(tp + f->cord_tp_offset)) != 0) return 0;
    return cord;
  }
  return tid == tgid ? f->main_cord : 0;
}

/* The fiber the sampled thread runs now (lj_rec_fiber_layout): its cord's fiber, that fiber's fid
 * and the first bytes of its name. Any failed read leaves fiber_id 0 (no fiber named, never a
 * wrong one). */
LJ_INLINE void read_fiber(struct lj_rec_sample* sample, const struct lj_rec_fiber_layout* f,
                          uint32_t tgid, uint32_t tid) {
  uint64_t cord = 0, fiber = 0, fid = 0, name = 0;
  sample->fiber_id = 0;
  sample->fiber_cord = 0;
  sample->fiber_name[0] = 0;
  if (f->main_cord == 0) return;
  cord = current_cord(f, tgid, tid);
  if (cord == 0) return;
  if (bpf_probe_read_user(&fiber, 8, (void*)(cord + f->cord_fiber)) != 0 || fiber == 0) return;
  if (bpf_probe_read_user(&fid, f->fid_size == 4 ? 4 : 8, (void*)(fiber + f->fiber_fid)) != 0)
    return;
  if (bpf_probe_read_user(&name, 8, (void*)(fiber + f->fiber_name)) == 0 && name != 0 &&
      bpf_probe_read_user_str(sample->fiber_name, sizeof(sample->fiber_name), (void*)name) < 0) {
    sample->fiber_name[0] = 0;
  }
  sample->fiber_id = fid;
  sample->fiber_cord = cord;
}

/* The walk's `n` frames into the sample record (convert_frame). */
LJ_INLINE void convert_frames(const struct lj_luajit_info* lj, const struct lj_walk_result* out,
                              struct lj_rec_sample* sample, struct lj_walk_env* env, uint32_t n) {
  struct convert_ctx cc;
  cc.lj = lj;
  cc.walk = out;
  cc.sample = sample;
  cc.env = env;
  cc.last_func = 0;
  cc.last_proto = 0;
  cc.last_chunkname = 0;
  cc.last_firstline = 0;
  cc.pad = 0;
  bpf_loop(n, convert_frame, &cc, 0);
}

/* Copies the objects the sample's `n` frames name (capture_frame), within the per-sample
 * budget. */
LJ_INLINE void capture_frames(const struct lj_luajit_info* lj, const struct lj_rec_sample* sample,
                              uint32_t tgid, uint32_t n) {
  struct capture_ctx kc;
  kc.lj = lj;
  kc.sample = sample;
  kc.pid = tgid;
  kc.budget = LJ_REC_CAPTURE_PER_SAMPLE;
  bpf_loop(n, capture_frame, &kc, 0);
}

/* Sends the sample record with its `n` frames and the program's time on it to `events`. */
LJ_INLINE void send_sample(struct lj_rec_sample* sample, uint32_t n, uint64_t start_ns) {
  uint64_t size, wakeup, took;
  took = bpf_ktime_get_ns() - start_ns;
  sample->walk_ns = took > 0xffffffffULL ? 0xffffffffu : (uint32_t)took;
  size =
      __builtin_offsetof(struct lj_rec_sample, frames) + (uint64_t)n * sizeof(struct lj_rec_frame);
  if (size > sizeof(*sample)) size = sizeof(*sample);
  wakeup = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= wakeup_bytes ? BPF_RB_FORCE_WAKEUP
                                                                         : BPF_RB_NO_WAKEUP;
  if (bpf_ringbuf_output(&events, sample, size, wakeup) != 0) count(LJ_REC_CTR_RINGBUF_FULL);
}

/* Walks the current thread's user stack (the registers saved at its kernel entry) and sends
 * it: a CPU sample (kind LJ_REC_KIND_SAMPLE), or an off-CPU interval of `off_cpu_ns` ns that
 * ended now (LJ_REC_KIND_OFF_CPU, `state` LJ_REC_OFF_CPU_*). `slot` is the process's context. */
LJ_INLINE int sample_current(uint32_t tgid, uint32_t tid, uint32_t slot, uint64_t start_ns,
                             uint32_t kind, uint64_t off_cpu_ns, uint32_t state) {
  /* The sampler's slot, or the off-CPU programs' (LJ_REC_SCRATCH_SLOTS). */
  uint32_t scratch = kind == LJ_REC_KIND_OFF_CPU ? 1 : 0, n;
  struct lj_rec_proc* proc;
  struct lj_walk_result* out;
  struct lj_rec_sample* sample;
  struct task_struct* task;
  struct pt_regs* regs;
  struct lj_walk_env env;
  struct lj_walk_state* st;
  const struct lj_luajit_info* lj;
  uint32_t generation;

  if (slot >= LJ_REC_MAX_PROCS + LJ_REC_EXEC_SLOTS) {
    count(LJ_REC_CTR_NO_CONTEXT);
    return 0;
  }
  proc = bpf_map_lookup_elem(&procs, &slot);
  out = bpf_map_lookup_elem(&walk_scratch, &scratch);
  sample = bpf_map_lookup_elem(&sample_scratch, &scratch);
  st = bpf_map_lookup_elem(&walk_state, &scratch);
  regs = bpf_map_lookup_elem(&user_regs, &scratch);
  if (!proc || !out || !sample || !st || !regs) return 0;
  env.scratch = scratch;

  task = bpf_get_current_task_btf();
  if (!task_walkable(task)) return 0;
  /* A kernel-built context serves only the process it was built for. */
  generation = proc->generation;
  if (slot >= LJ_REC_MAX_PROCS && proc->owner_pid != tgid) {
    count(LJ_REC_CTR_NO_CONTEXT);
    return 0;
  }

  /* The user registers saved at kernel entry: the sample's own registers when the tick hit
   * user code, the syscall/fault entry registers when it hit the kernel on the thread's
   * behalf (perf_event's ctx->regs would be kernel registers then); for an off-CPU interval,
   * where the thread entered the kernel before it left the CPU. */
  if (bpf_probe_read_kernel(regs, sizeof(*regs), (void*)bpf_task_pt_regs(task)) != 0) {
    count(LJ_REC_CTR_NO_REGS);
    return 0;
  }

  lj = 0;
  if (proc->lj.version == LJ_LUAJIT_INFO_VERSION) lj = &proc->lj;
  /* Keep `lj` a real pointer-or-NULL: without the barrier clang may fold the test into the
   * address arithmetic, which the verifier rejects as a scalar dereference. */
  asm volatile("" : "+r"(lj));
  walk_user_stack(proc, lj, &env, regs, st, out);
  /* A kernel-built slot rebuilt for another exec while this walk read it (LJ_REC_EXEC_SLOTS
   * execs within one walk: not seen in practice) gave no trustworthy stack. */
  if (proc->generation != generation) {
    count(LJ_REC_CTR_NO_CONTEXT);
    return 0;
  }
  count(LJ_REC_CTR_END_BASE + (out->end & 31));

  n = fill_sample_header(sample, out, tgid, tid, start_ns, generation);
  if (tally_work) __sync_fetch_and_add(&tally_frames, n);
  sample->kind = kind;
  sample->off_cpu_ns = off_cpu_ns;
  sample->off_cpu_state = state;
  read_fiber(sample, &proc->fiber, tgid, tid);
  convert_frames(lj, out, sample, &env, n);
  /* Before the sample's own record: the agent must have the copies when it names the sample.
   * CPU samples only: the copies' scratch is the sampler's (a young process's off-CPU stack is
   * named from its memory, or from copies its CPU samples took). */
  if (lj && kind == LJ_REC_KIND_SAMPLE && slot < LJ_REC_MAX_PROCS && capture_young_ns != 0 &&
      start_ns - task->group_leader->start_time < capture_young_ns) {
    capture_frames(lj, sample, tgid, n);
  }
  send_sample(sample, n, start_ns);
  return 0;
}

/* How many of this CPU's sampling periods ended without its timer firing, up to `now`. The
 * cpu-clock timer fires every period on every CPU, idle or not (an idle CPU's tick samples the
 * idle task), so a gap of two periods or more means the CPU took no interrupt meanwhile: a
 * virtual CPU the host did not run (its guest sees no steal time when the hypervisor reports
 * none, and charges the whole gap to the task that was on the CPU: its CPU clock, os.clock,
 * advances with no sample), or interrupts held off. Rounded to whole periods. */
LJ_INLINE uint64_t ticks_missed(uint64_t now) {
  uint32_t zero = 0;
  uint64_t* last = bpf_map_lookup_elem(&last_tick, &zero);
  uint64_t gap, missed = 0;
  if (!last || sample_period_ns == 0) return 0;
  gap = now - *last;
  if (*last != 0 && gap >= sample_period_ns + sample_period_ns / 2) {
    missed = (gap + sample_period_ns / 2) / sample_period_ns - 1;
  }
  *last = now;
  return missed;
}

SEC("perf_event")
int on_sample(struct bpf_perf_event_data* ctx) {
  uint64_t id = bpf_get_current_pid_tgid();
  uint32_t tgid = (uint32_t)(id >> 32), tid = (uint32_t)id;
  uint32_t* slotp;
  uint64_t start_ns = bpf_ktime_get_ns(), missed = ticks_missed(start_ns);
  (void)ctx;

  if (tgid == 0) return 0;
  slotp = bpf_map_lookup_elem(&pids, &tgid);
  if (!slotp) return 0;
  count(LJ_REC_CTR_SAMPLES);
  if (missed != 0) {
    count(LJ_REC_CTR_TICKS_LATE);
    count_n(LJ_REC_CTR_TICKS_MISSED, missed);
  }
  return sample_current(tgid, tid, *slotp, start_ns, LJ_REC_KIND_SAMPLE, 0, 0);
}

#include "record_follow.bpf.h"
#include "record_off_cpu.bpf.h"

/* Every syscall exit of every task on the host runs this one program: the mmap watcher's check,
 * and with --off-cpu and --loop-stalls theirs, behind one BPF trampoline (one program each cost a
 * trampoline per syscall: bench/off_cpu_switches). The raw syscall-exit tracepoint (ftrace-based
 * fexit hooks are not available on every kernel); the settings are load-time constants, so the
 * verifier drops the parts of features that are off. Syscall numbers: mmap 9
 * (arch/x86/entry/syscalls/syscall_64.tbl), 222 (include/uapi/asm-generic/unistd.h). */
SEC("tp_btf/sys_exit")
int BPF_PROG(on_sys_exit, struct pt_regs* regs, long ret) {
#if defined(__TARGET_ARCH_x86)
  long nr = regs->orig_ax;
  if (nr == 9) mmap_returned(regs, ret);
#else
  long nr = regs->syscallno;
  if (nr == 222) mmap_returned(regs, ret);
#endif
  if (off_cpu_threshold_ns != 0) off_cpu_syscall_returned(regs);
  if (loop_stall_ns != 0 && is_loop_wait(nr)) loop_wait_returned_now();
  return 0;
}
