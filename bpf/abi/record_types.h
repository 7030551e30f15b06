/* record_types.h: what the live recorder's BPF program (bpf/record.bpf.c) and its user-space
 * loader (src/record) share — the per-process unwind context in the `procs` map, the sample
 * records of the ring buffer and the indexes of the per-reason counters.
 *
 * Plain C with fixed-size types (the includer provides them), no padding holes, 8-byte
 * aligned, so both sides see the same bytes. */
#ifndef LJPROF_BPF_RECORD_RECORD_TYPES_H
#define LJPROF_BPF_RECORD_RECORD_TYPES_H

#include "abi/cfi_row.h"
#include "abi/luajit_info.h"
#include "abi/walk_types.h"

/* Map capacities. A process or a table that does not fit is refused by the loader and counted
 * (LJ_REC_CTR_PROCS_FULL and friends), never partly uploaded. */
#define LJ_REC_MAX_PROCS 128         /* processes with an unwind context at one time */
#define LJ_REC_MAX_PIDS 4096         /* processes followed (pid filter) */
#define LJ_REC_OFF_CPU_THREADS 65536 /* followed threads off the CPU at once (off_cpu_since) */
#define LJ_REC_MAX_MODULES 64        /* executable file mappings with CFI per process */
/* CFI rows of the files followed processes map, together: the default capacity of the `rows`
 * map (24 bytes a row: 48 MiB of kernel memory, allocated whole when the map is made; the agent
 * copies a file's rows in through a small window of it mapped for the copy, never keeps it
 * mapped). `--unwind-rows` sets another, at most
 * LJ_REC_MAX_ROWS_LIMIT. A file's rows are freed for reuse once no followed process maps it
 * (src/record/unwind_rows.h). */
#define LJ_REC_MAX_ROWS (1u << 21)
/* Binary search steps over one file's rows (record.bpf.c lj_rec_lookup): 22 halvings narrow
 * 1 << 22 rows to one. A file never has more rows than the map holds, so a map of at most
 * LJ_REC_MAX_ROWS_LIMIT rows keeps every search within the bound. */
#define LJ_REC_ROW_SEARCH_STEPS 22
#define LJ_REC_MAX_ROWS_LIMIT (1u << LJ_REC_ROW_SEARCH_STEPS)
LJ_STATIC_ASSERT(LJ_REC_MAX_ROWS <= LJ_REC_MAX_ROWS_LIMIT, "the default row map is searchable");

#define LJ_REC_ROW_CACHE 4096 /* rows remembered per CPU (record.bpf.c row_cache), a power of 2 */

/* Slots [LJ_REC_MAX_PROCS, LJ_REC_MAX_PROCS + LJ_REC_EXEC_SLOTS) of `procs` are the kernel's
 * own: at the exec of a followed process whose executable the loader has seen before, the
 * program builds a context there from that executable's template (lj_rec_exec_template), so the
 * new image's samples are walked from its first instruction instead of after the loader's round
 * trip (reading /proc/PID/maps takes ~1 ms, and a process living a few ms would lose a third of
 * its samples). Used round robin; the loader's own publish replaces one within milliseconds. */
#define LJ_REC_EXEC_SLOTS 64
#define LJ_REC_EXEC_MODULES 8         /* modules of a template (executable, interpreter, vDSO) */
#define LJ_REC_MAX_EXEC_TEMPLATES 256 /* executables with a template */
/* Context generations: the loader's count up from 1 below this bit, the kernel's have it set. */
#define LJ_REC_EXEC_GENERATION 0x80000000u

/* `pids` map values: the process's slot in `procs`, or one of these. */
#define LJ_REC_PID_PENDING 0xffffffffu /* followed, context not uploaded yet (new or exec'd) */

/* One executable mapping of a file with CFI: rows[row_first, row_first + row_count) of the
 * `rows` map, link-time pcs; runtime pc = link-time pc + bias. */
struct lj_rec_module {
  uint64_t start; /* [start, end): the mapping's runtime addresses */
  uint64_t end;
  uint64_t bias;
  uint32_t row_first;
  uint32_t row_count;
};
LJ_STATIC_ASSERT(sizeof(struct lj_rec_module) == 32, "lj_rec_module: 32 bytes, no padding");

/* One entry of the kernel's per-CPU row cache: the row found for runtime `pc` in the context
 * of that generation. */
struct lj_rec_row_cache_entry {
  uint64_t pc;
  uint32_t generation; /* lj_rec_proc.generation; 0: empty */
  uint32_t pad;
  struct lj_cfi_row row;
};
LJ_STATIC_ASSERT(sizeof(struct lj_rec_row_cache_entry) == 40, "lj_rec_row_cache_entry: 40 bytes");

/* Where a Tarantool thread keeps the fiber it runs (src/luajit/fiber_layout.h, from the
 * executable's DWARF or machine code; tarantool src/lib/core/fiber.h struct cord / struct fiber):
 * its cord is the __thread cord_ptr, cord_tp_offset bytes from its thread pointer (x86-64: the
 * task's fsbase; arm64: its saved TPIDR_EL0), so a sample of any thread running a cord (tx,
 * iproto, WAL, relays) reads its own. Without cord_tp_offset, only the main thread's, through
 * main_cord. */
#define LJ_REC_FIBER_NAME_MAX 40 /* bytes of fiber.name kept, NUL included (FIBER_NAME_INLINE) */
struct lj_rec_fiber_layout {
  uint64_t main_cord;     /* runtime address of main_cord; 0: no fiber layout (not Tarantool) */
  uint32_t cord_fiber;    /* cord.fiber: the running struct fiber * */
  uint32_t fiber_fid;     /* fiber.fid */
  uint32_t fid_size;      /* 4 or 8 */
  uint32_t fiber_name;    /* fiber.name (char *) */
  int64_t cord_tp_offset; /* cord_ptr's address from the thread pointer; 0: not known */
};
LJ_STATIC_ASSERT(sizeof(struct lj_rec_fiber_layout) == 32, "lj_rec_fiber_layout: 32 bytes");

/* The unwind context of one process. Modules are sorted by start and do not overlap. */
struct lj_rec_proc {
  struct lj_luajit_info lj; /* version 0: no LuaJIT (native frames only) */
  uint64_t vm_bias;         /* load bias of the module holding the VM */
  uint64_t g_hint;          /* a global_State candidate (tarantool_L, or a G a walk proved) */
  uint64_t trace_hint;      /* AArch64: the GCtrace a walk last proved running (0 at upload) */
  uint32_t nmodules;
  /* Unique per uploaded context, never 0 (the kernel's row cache is keyed by it): the loader's
   * ProcessContext::generation, low 31 bits; a kernel-built context's has
   * LJ_REC_EXEC_GENERATION set. */
  uint32_t generation;
  /* A kernel-built context: the process it was built for (a sample of another pid still mapped
   * to the slot after LJ_REC_EXEC_SLOTS further execs is not walked with it). 0 otherwise. */
  uint32_t owner_pid;
  uint32_t pad;
  struct lj_rec_fiber_layout fiber;
  struct lj_rec_module modules[LJ_REC_MAX_MODULES];
};
LJ_STATIC_ASSERT(sizeof(struct lj_rec_proc) ==
                     sizeof(struct lj_luajit_info) + 72 + 32 * LJ_REC_MAX_MODULES,
                 "lj_rec_proc: layout record, 40 bytes, fiber layout, modules");

/* What the kernel needs to build an executable's context at exec: its modules that the ELF
 * loader places relative to a value of the new image's auxiliary vector (fs/binfmt_elf.c
 * create_elf_tables), with each one's bias as that value plus a fixed delta, measured by the
 * loader on a process of the same executable from /proc/PID/auxv. Libraries are mapped later
 * by the program interpreter: the kernel adds each as it is mapped (lj_rec_lib_template). */
#define LJ_REC_ANCHOR_ENTRY 9 /* AT_ENTRY: the executable's entry point (its e_entry + bias) */
#define LJ_REC_ANCHOR_BASE 7  /* AT_BASE: the program interpreter's load base */
#define LJ_REC_ANCHOR_VDSO 33 /* AT_SYSINFO_EHDR: the vDSO's ELF header */

/* `exec_templates` key: the executable's inode as /proc/PID/exe names it (mm->exe_file). */
struct lj_rec_exec_key {
  uint64_t ino;
  uint32_t dev; /* the kernel's dev_t: major << 20 | minor */
  uint32_t pad;
};
LJ_STATIC_ASSERT(sizeof(struct lj_rec_exec_key) == 16, "lj_rec_exec_key: 16 bytes");

struct lj_rec_exec_module {
  uint64_t link_start; /* [link_start, link_end) + bias: the mapping's runtime addresses */
  uint64_t link_end;
  int64_t delta;   /* bias = the anchor's auxv value + delta */
  uint32_t anchor; /* LJ_REC_ANCHOR_* (an AT_* type) */
  uint32_t row_first;
  uint32_t row_count;
  uint32_t pad;
};
LJ_STATIC_ASSERT(sizeof(struct lj_rec_exec_module) == 40, "lj_rec_exec_module: 40 bytes");

struct lj_rec_exec_template {
  struct lj_luajit_info lj; /* version 0: the VM is in none of these modules */
  uint32_t nmodules;
  uint32_t vm_module; /* with lj: the module holding the VM (its bias is vm_bias) */
  /* 1: an exec of this executable by a process nobody follows starts following it (`-a` with
   * no filter, for an executable that runs LuaJIT: the loader would follow it a millisecond
   * later anyway, its first samples lost). */
  uint32_t follow_on_exec;
  uint32_t pad;
  struct lj_rec_exec_module modules[LJ_REC_EXEC_MODULES];
};
LJ_STATIC_ASSERT(sizeof(struct lj_rec_exec_template) ==
                     sizeof(struct lj_luajit_info) + 16 + 40 * LJ_REC_EXEC_MODULES,
                 "lj_rec_exec_template: layout record, 16 bytes, modules");

/* What the kernel needs to add a shared library to a followed process's context when the
 * program interpreter (or dlopen) maps its code: the file's executable mapping as the loader
 * saw it in another process, keyed by the file (lj_rec_exec_key: the mapping's inode and
 * device, as /proc/PID/maps shows them). A new mapping of the same file at the same file offset
 * and length is the same code at another bias: bias = the new start - link_start. Without it a
 * process's libraries had no rows until the loader read its mappings again, a millisecond or
 * more after ld.so mapped them, and a short-lived process spends that millisecond in them. */
#define LJ_REC_MAX_LIB_TEMPLATES 1024
struct lj_rec_lib_template {
  uint64_t link_start; /* [link_start, link_end) + bias: the mapping's runtime addresses */
  uint64_t link_end;
  uint64_t pgoff; /* the mapping's file offset in pages (vm_area_struct.vm_pgoff) */
  uint32_t row_first;
  uint32_t row_count;
};
LJ_STATIC_ASSERT(sizeof(struct lj_rec_lib_template) == 32, "lj_rec_lib_template: 32 bytes");

/* A frame as the ring buffer carries it: the walker's frame plus, for Lua frames, what the
 * prototype said at sample time (lj_obj.h GCproto), so the loader never attributes a frame to
 * a prototype that was freed and reused after the sample: it re-reads the prototype and keeps
 * the name only if chunkname and firstline still match. */
struct lj_rec_frame {
  uint64_t pc; /* lj_walk_frame.pc */
  uint64_t b;  /* lj_walk_frame.b */
  uint32_t kind;
  uint32_t lua_state;
  uint64_t proto;     /* Lua: the GCproto, 0 if it could not be read */
  uint64_t chunkname; /* Lua: GCproto.chunkname (a GCstr) */
  int32_t firstline;  /* Lua: GCproto.firstline */
  uint32_t traceno;   /* trace: GCtrace.traceno at sample time (the agent checks it is still it) */
};
LJ_STATIC_ASSERT(sizeof(struct lj_rec_frame) == 48, "lj_rec_frame: 48 bytes, no padding");

/* Every record of the `events` ring starts with its kind (a uint32_t): samples, and the objects
 * of young processes copied at sample time (lj_rec_capture). One ring keeps them in the order the
 * program wrote them: a sample's captures always reach the agent before the sample. */
#define LJ_REC_KIND_SAMPLE 1
#define LJ_REC_KIND_CAPTURE 2
/* An off-CPU interval of a followed thread over the threshold (record.bpf.c on_switch_in): an
 * lj_rec_sample whose stack is where the thread left the CPU, weighted by off_cpu_ns. */
#define LJ_REC_KIND_OFF_CPU 3

/* An event-loop stall (record --loop-stalls): a followed thread was away from its loop's wait
 * (epoll_wait and kin) longer than the threshold, between returning from one wait and entering
 * the next (record.bpf.c on_loop_wait_enter). */
#define LJ_REC_KIND_STALL 4

struct lj_rec_stall {
  uint32_t kind; /* LJ_REC_KIND_STALL */
  uint32_t pid;  /* tgid */
  uint32_t tid;
  uint32_t pad;
  uint64_t start_ns;    /* bpf_ktime_get_ns when the previous wait returned */
  uint64_t duration_ns; /* until the next wait was entered */
};
LJ_STATIC_ASSERT(sizeof(struct lj_rec_stall) == 32, "lj_rec_stall: 32 bytes");

/* Why a thread left the CPU (lj_rec_sample.off_cpu_state). */
#define LJ_REC_OFF_CPU_BLOCKED 1   /* it waited (sleep, I/O, a lock): not runnable */
#define LJ_REC_OFF_CPU_PREEMPTED 2 /* it was runnable and another task got the CPU */

struct lj_rec_sample {
  uint32_t kind; /* LJ_REC_KIND_SAMPLE or LJ_REC_KIND_OFF_CPU */
  uint32_t pid;  /* tgid */
  uint32_t tid;
  uint32_t cpu;
  uint64_t time_ns; /* bpf_ktime_get_ns when the program started on this sample */
  uint32_t nframes;
  uint32_t end; /* LJ_END_* */
  uint32_t lua_states;
  /* The program's own time for this sample, from its start to the ring-buffer output (the
   * walk and the prototype reads; `record --stats` prints the median, bench/record_overhead
   * compares it with the kernel's frame-pointer unwinder). Saturates at UINT32_MAX. */
  uint32_t walk_ns;
  uint64_t end_pc;
  /* lj_rec_proc.generation of the context the walk used: a kernel-built one's samples wait in
   * the loader for its own context of the same image. */
  uint32_t generation;
  uint32_t off_cpu_state; /* LJ_REC_OFF_CPU_*; 0 in a CPU sample */
  /* LJ_REC_KIND_OFF_CPU: how long the thread was off the CPU, in ns (time_ns is when it came
   * back); 0 in a CPU sample. */
  uint64_t off_cpu_ns;
  /* The Tarantool fiber the sampled thread ran (lj_rec_fiber_layout): fiber.fid, 0 when the
   * process has no fiber layout, the thread runs no cord (or is not the main thread, without
   * cord_tp_offset) or a read failed; the struct cord it belongs to; and the first bytes of
   * fiber.name, NUL-terminated. */
  uint64_t fiber_id;
  uint64_t fiber_cord;
  char fiber_name[LJ_REC_FIBER_NAME_MAX];
  struct lj_rec_frame frames[LJ_WALK_MAX_FRAMES];
};
LJ_STATIC_ASSERT(sizeof(struct lj_rec_sample) == 120 + 48 * LJ_WALK_MAX_FRAMES,
                 "lj_rec_sample: 120-byte header + frames");

/* A young process's object copied when a sample first met it: the agent names Lua frames after
 * the fact from the process's memory, and a process that lives a few milliseconds is gone by
 * then. So while a process is young (record.bpf.c capture_young_ns) the program copies, once per
 * object and process, what naming reads: a prototype (lj_obj.h GCproto: header, bytecode,
 * constants, lineinfo, uvinfo and varinfo live in one block of GCproto.sizept bytes, lj_parse.c
 * fs_finish), the strings it names (its chunk name, its first string constants), and a JIT trace
 * (lj_trace.c trace_save: GCtrace, IR, snapshots and snapshot map in one block ending at
 * snapmap + nsnapmap entries). The agent reads these bytes before the process's memory
 * (record/captured_memory.h). Of a larger object the first LJ_REC_CAPTURE_MAX - 1 bytes are
 * copied (a power of 2, so a mask bounds the length for the verifier); reads past them go to the
 * process as before. */
#define LJ_REC_CAPTURE_MAX 8192
#define LJ_REC_CAPTURE_STRING_MAX 256 /* bytes of a string's text copied */
#define LJ_REC_CAPTURE_KGC 16         /* a prototype's string constants copied, from k down */
#define LJ_REC_CAPTURE_PER_SAMPLE 32  /* objects one sample may copy; the next sample goes on */
#define LJ_REC_CAPTURED_OBJECTS 16384 /* (process, object) pairs remembered as copied (LRU) */

#define LJ_REC_CAPTURE_PROTO 1
#define LJ_REC_CAPTURE_STRING 2
#define LJ_REC_CAPTURE_TRACE 3

struct lj_rec_capture {
  uint32_t kind; /* LJ_REC_KIND_CAPTURE */
  uint32_t pid;  /* tgid */
  uint64_t addr; /* where the bytes are in the process */
  uint32_t len;  /* bytes that follow, below LJ_REC_CAPTURE_MAX */
  uint32_t what; /* LJ_REC_CAPTURE_* */
  uint8_t bytes[LJ_REC_CAPTURE_MAX];
};
LJ_STATIC_ASSERT(sizeof(struct lj_rec_capture) == 24 + LJ_REC_CAPTURE_MAX,
                 "lj_rec_capture: 24-byte header + bytes");

/* The key of the program's record of objects copied (record.bpf.c `captured`). */
struct lj_rec_capture_key {
  uint32_t pid;
  uint32_t what;
  uint64_t addr;
};
LJ_STATIC_ASSERT(sizeof(struct lj_rec_capture_key) == 16, "lj_rec_capture_key: 16 bytes");

/* The recorder's counters, declared once: X(ID, id, where, metric, text). KERNEL counters are
 * slots of the BPF program's per-CPU `counters` array (ids below LJ_REC_NCOUNTERS; slots
 * 0..LJ_END_COUNT-1 count how each delivered sample's walk ended, walk_types.h LJ_WALK_ENDS);
 * AGENT counters are kept by the user-space recorder. Ids are stable and a retired id is never
 * reused; `metric` is the stable snake_case name (unique, checked in src/record/counters.cc),
 * `text` what the end-of-run summary and the pprof comments say. The BPF enum below, the
 * summary and the metric names are all generated from this list. The headline counters
 * (src/record/counters.h kHeadlineCounters: SAMPLES, DELIVERED, REACHED_ROOT, WITHOUT_CONTEXT)
 * are the summary's first line, not reasons under it: their `text` is the metrics page's help,
 * and a profile's counters name them as kHeadlineCounters does.
 * Retired ids: 75 (jit_lines_unsupported: every JIT sample of a LuaJIT without SnapShot.mcofs,
 * before the exit-based lookup of symbolize/trace_exits.h). */
#define LJ_REC_COUNTERS(X)                                                                       \
  X(SAMPLES, 32, KERNEL, "samples", "samples of followed processes")                             \
  X(NO_CONTEXT, 33, KERNEL, "no_unwind_context",                                                 \
    "no unwind context yet (process just started or exec'd)")                                    \
  X(RINGBUF_FULL, 34, KERNEL, "ringbuf_full", "ring buffer full (sample dropped)")               \
  X(NO_REGS, 35, KERNEL, "no_user_registers", "no user registers")                               \
  X(LUA_INFO_FAULT, 36, KERNEL, "lua_proto_unreadable_at_sample",                                \
    "Lua prototype unreadable at sample time")                                                   \
  X(FORKS, 37, KERNEL, "children_followed", "children followed")                                 \
  X(EXECS, 38, KERNEL, "execs", "execs of followed processes")                                   \
  X(PIDS_FULL, 39, KERNEL, "pid_map_full", "pid map full (child not followed)")                  \
  X(EXITING, 40, KERNEL, "samples_while_exiting",                                                \
    "samples while the process exits (its user stack is being torn down: not walked)")           \
  X(CAPTURES, 41, KERNEL, "young_objects_copied",                                                \
    "objects of young processes copied at sample time (prototypes, strings, traces)")            \
  X(EXEC_CONTEXTS, 43, KERNEL, "kernel_contexts",                                                \
    "contexts built by the kernel at a fork, or at an exec of an executable seen before")        \
  X(IN_EXEC, 44, KERNEL, "samples_in_exec",                                                      \
    "samples while the process execs (the old image's stack is being replaced: not walked)")     \
  X(CAPTURE_FAULT, 42, KERNEL, "young_object_unreadable",                                        \
    "objects of young processes that could not be copied at sample time")                        \
  X(OFF_CPU_WALKED, 45, KERNEL, "off_cpu_intervals",                                             \
    "off-CPU intervals over the threshold (walked where the thread left the CPU)")               \
  X(OFF_CPU_SHORT, 46, KERNEL, "off_cpu_under_threshold",                                        \
    "off-CPU intervals under the threshold (counted, not walked)")                               \
  X(OFF_CPU_UNWALKED, 47, KERNEL, "off_cpu_not_walked",                                          \
    "off-CPU intervals that ended outside a syscall on a kernel without kprobes (not walked)")   \
  X(LIBS_ADDED, 48, KERNEL, "libraries_added",                                                   \
    "libraries the kernel added to a process's context as they were mapped")                     \
  X(TICKS_LATE, 49, KERNEL, "sampling_timer_late",                                               \
    "samples taken late: the CPU's sampling timer had not fired for two periods or more "        \
    "(a virtual CPU the host did not run, or interrupts held off)")                              \
  X(TICKS_MISSED, 50, KERNEL, "sampling_periods_missed",                                         \
    "sampling periods without a sample on a CPU running a followed process (time its CPU clock " \
    "counts and the profile does not)")                                                          \
  X(BEFORE_CONTEXT, 64, AGENT, "walk_before_context",                                            \
    "walk stopped in code whose unwind rows were published after the sample (process starting)") \
  X(MALFORMED, 65, AGENT, "malformed_records", "malformed ring buffer records")                  \
  X(NO_PROCESS, 66, AGENT, "sample_without_process", "sample of a process without context")      \
  X(PROCS_FULL, 67, AGENT, "procs_map_full", "map full: processes")                              \
  X(PID_MAP_FULL, 68, AGENT, "pid_map_full_on_follow", "pid map full")                           \
  X(ROWS_FULL, 69, AGENT, "rows_map_full", "map full: CFI rows")                                 \
  X(MODULES_FULL, 70, AGENT, "modules_map_full", "map full: modules per process")                \
  X(LUA_GONE, 71, AGENT, "lua_proto_unreadable",                                                 \
    "Lua frame not named: prototype unreadable (process exited?)")                               \
  X(LUA_CHANGED, 72, AGENT, "lua_proto_changed",                                                 \
    "Lua frame not named: prototype changed since the sample")                                   \
  X(LUA_UNDECODED, 73, AGENT, "lua_proto_undecoded",                                             \
    "Lua frame not named: prototype does not decode")                                            \
  X(TRACE_UNREAD, 74, AGENT, "trace_unreadable", "JIT trace not named: GCtrace unreadable")      \
  X(JIT_UNPROVEN, 76, AGENT, "jit_snapshot_unproven",                                            \
    "JIT code shown at its trace's start: its snapshot could not be proven")                     \
  X(TRACE_CHANGED, 77, AGENT, "trace_changed",                                                   \
    "JIT code shown at its trace's start: the trace changed since the sample")                   \
  X(JIT_BOUNDARY, 78, AGENT, "jit_snapshot_boundary_unknown",                                    \
    "JIT code shown at its trace's start: between two snapshots, and this LuaJIT records no "    \
    "machine-code offsets to tell which")                                                        \
  X(CAPTURE_DROPPED, 79, AGENT, "young_objects_dropped",                                         \
    "objects copied at sample time dropped (over the per-process bound)")                        \
  X(ROWS_FRAGMENTED, 90, AGENT, "rows_map_fragmented",                                           \
    "map full: CFI rows refused though as many rows were free (in no one range: no compaction)") \
  X(ROWS_FREED, 91, AGENT, "unwind_tables_freed",                                                \
    "files whose unwind rows were freed for reuse (no followed process maps them)")              \
  X(OBJECTS_PRUNED, 92, AGENT, "object_cache_pruned",                                            \
    "files dropped from the object cache (unmapped, least recently used beyond its bound)")      \
  X(DELIVERED, 93, AGENT, "samples_delivered", "samples that reached user space")                \
  X(REACHED_ROOT, 94, AGENT, "samples_unwound_to_root",                                          \
    "delivered samples whose walk ended at a proven stack root")                                 \
  X(WITHOUT_CONTEXT, 95, AGENT, "samples_without_context",                                       \
    "samples taken before their process's unwind context was published")                         \
  X(FIBER_NAMED, 96, AGENT, "samples_with_fiber",                                                \
    "samples labelled with the Tarantool fiber they ran on")

#define LJ_REC_COUNTER_ENUMERATOR(id, value, ...) LJ_REC_CTR_##id = value,
enum lj_rec_counter { LJ_REC_CTR_END_BASE = 0, LJ_REC_COUNTERS(LJ_REC_COUNTER_ENUMERATOR) };
#undef LJ_REC_COUNTER_ENUMERATOR
#define LJ_REC_NCOUNTERS 51    /* the kernel's counters array: walk ends, then KERNEL counters */
#define LJ_REC_COUNTER_IDS 128 /* every id, kernel and agent, is below this */
LJ_STATIC_ASSERT((int)LJ_END_COUNT <= (int)LJ_REC_CTR_SAMPLES,
                 "walk ends fit below the kernel counters");

/* The recorder's levels (metrics of type gauge, kept by the agent), declared once:
 * X(ID, metric, text). `metric` is the stable snake_case name (ljprof_<metric> on the metrics
 * page; unique among gauges and counters, checked in src/record/counters.cc), `text` what
 * `record --stats` and the agent's exit summary say. */
#define LJ_REC_GAUGES(X)                                                           \
  X(ROWS_IN_USE, "unwind_rows_in_use",                                             \
    "unwind rows in use (files followed processes map or mapped a moment ago)")    \
  X(ROWS_CAPACITY, "unwind_rows_capacity",                                         \
    "unwind rows the kernel's row map holds (--unwind-rows)")                      \
  X(OBJECT_CACHE_ENTRIES, "object_cache_entries",                                  \
    "files in the object cache (mapped by a followed process, or kept for reuse)") \
  X(OBJECT_CACHE_BYTES, "object_cache_bytes",                                      \
    "bytes the object cache holds (symbol tables, unwind tables, LuaJIT layouts)")

#define LJ_REC_GAUGE_ENUMERATOR(id, ...) LJ_REC_GAUGE_##id,
enum lj_rec_gauge { LJ_REC_GAUGES(LJ_REC_GAUGE_ENUMERATOR) LJ_REC_NGAUGES };
#undef LJ_REC_GAUGE_ENUMERATOR

#endif /* LJPROF_BPF_RECORD_RECORD_TYPES_H */
