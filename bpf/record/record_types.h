/* record_types.h: what the live recorder's BPF program (bpf/record.bpf.c) and its user-space
 * loader (src/record) share — the per-process unwind context in the `procs` map, the sample
 * records of the ring buffer and the indexes of the per-reason counters.
 *
 * Plain C with fixed-size types (the includer provides them), no padding holes, 8-byte
 * aligned, so both sides see the same bytes. */
#ifndef LJPROF_BPF_RECORD_RECORD_TYPES_H
#define LJPROF_BPF_RECORD_RECORD_TYPES_H

#include "walker/cfi_row.h"
#include "walker/luajit_info.h"
#include "walker/walk_types.h"

/* Map capacities. A process or a table that does not fit is refused by the loader and counted
 * (LJ_REC_CTR_MAP_FULL), never partly uploaded. */
#define LJ_REC_MAX_PROCS 128       /* processes with an unwind context at one time */
#define LJ_REC_MAX_PIDS 4096       /* processes followed (pid filter) */
#define LJ_REC_MAX_MODULES 64      /* executable file mappings with CFI per process */
#define LJ_REC_MAX_ROWS (1u << 21) /* CFI rows of all uploaded files together (48 MiB) */
#define LJ_REC_ROW_SEARCH_STEPS 22 /* binary search steps: enough for 1 << 21 rows */

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

/* The unwind context of one process. Modules are sorted by start and do not overlap. */
struct lj_rec_proc {
  struct lj_luajit_info lj; /* version 0: no LuaJIT (native frames only) */
  uint64_t vm_bias;         /* load bias of the module holding the VM */
  uint64_t g_hint;          /* a global_State candidate (tarantool_L, or a G a walk proved) */
  uint32_t nmodules;
  uint32_t generation; /* bumped by the loader on each upload of this slot */
  struct lj_rec_module modules[LJ_REC_MAX_MODULES];
};
LJ_STATIC_ASSERT(sizeof(struct lj_rec_proc) ==
                     sizeof(struct lj_luajit_info) + 24 + 32 * LJ_REC_MAX_MODULES,
                 "lj_rec_proc: layout record, 24 bytes, modules");

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
  uint32_t pad;
};
LJ_STATIC_ASSERT(sizeof(struct lj_rec_frame) == 48, "lj_rec_frame: 48 bytes, no padding");

struct lj_rec_sample {
  uint32_t pid; /* tgid */
  uint32_t tid;
  uint64_t time_ns; /* bpf_ktime_get_ns */
  uint32_t cpu;
  uint32_t nframes;
  uint32_t end; /* LJ_END_* */
  uint32_t lua_states;
  uint64_t end_pc;
  struct lj_rec_frame frames[LJ_WALK_MAX_FRAMES];
};
LJ_STATIC_ASSERT(sizeof(struct lj_rec_sample) == 40 + 48 * LJ_WALK_MAX_FRAMES,
                 "lj_rec_sample: 40-byte header + frames");

/* Per-reason counters (per-CPU array, index): LJ_END_* reasons first, then these. */
#define LJ_REC_CTR_END_BASE 0        /* + LJ_END_* : how each delivered sample's walk ended */
#define LJ_REC_CTR_SAMPLES 32        /* samples of followed processes */
#define LJ_REC_CTR_NO_CONTEXT 33     /* followed, but no unwind context uploaded yet */
#define LJ_REC_CTR_RINGBUF_FULL 34   /* the ring buffer had no room: sample dropped */
#define LJ_REC_CTR_NO_REGS 35        /* user registers unavailable (kernel thread) */
#define LJ_REC_CTR_LUA_INFO_FAULT 36 /* a Lua frame's prototype could not be read */
#define LJ_REC_CTR_FORKS 37          /* child processes added to the pid filter */
#define LJ_REC_CTR_EXECS 38          /* execs of followed processes (context re-uploaded) */
#define LJ_REC_CTR_PIDS_FULL 39      /* a child could not be followed: pid map full */
#define LJ_REC_NCOUNTERS 40

/* Read-only configuration of the program (set by the loader before load). */
struct lj_rec_config {
  uint32_t follow_children; /* 1: add forked children of followed processes */
  uint32_t pad;
};
LJ_STATIC_ASSERT(sizeof(struct lj_rec_config) == 8, "lj_rec_config: 8 bytes");

#endif /* LJPROF_BPF_RECORD_RECORD_TYPES_H */
