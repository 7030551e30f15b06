/* struct fiber and struct cord shaped as Tarantool 3.3 declares them (src/lib/core/fiber.h:
 * member order and types, the members the ENABLE_BACKTRACE and HAVE_MADV_DONTNEED build options
 * add), for tests/luajit/fiber_layout_test.cc: no package here has a Tarantool 3.x, whose fiber
 * id is 64-bit (32-bit in Debian's 2.6) and whose members sit elsewhere. Members ljprof does not
 * read are stand-ins: small's `struct region` as 64 bytes and `struct diag` as 8, sizes that put
 * x86-64 with both options on at the offsets measured on a real 3.3.0 build
 * (../shared/notes/tarantool-fibers.md: csw 152, fid 160, storage.lua.stack 368, name 408,
 * inline_name 416); libev's watchers, the mempool and the slab cache of `struct cord` as opaque
 * bytes. The tests compare ljprof's reading of the DWARF with gdb's, never with these numbers.
 * Included by tarantool3_fiber.c and by tests/walker/workloads/mini_tarantool.c. */
#pragma once
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

struct rlist {
  struct rlist *prev, *next;
};
#define CORO_CONTEXT_DEFINED
typedef struct coro_context {
  void** sp;
} coro_context;
struct clock_stat {
  uint64_t acc, delta, prev_delta, cputime;
};
struct cpu_stat {
  uint64_t prev_clock, prev_cputime;
};
struct fiber_slice {
  double warn, err;
};
struct region {
  unsigned char opaque[64];
};
struct diag {
  void* last;
};
struct lua_State;
typedef int (*fiber_func)(va_list);

enum {
  FIBER_IS_CANCELLED = 1 << 0,
  FIBER_IS_JOINABLE = 1 << 1,
  FIBER_IS_READY = 1 << 2,
  FIBER_IS_DEAD = 1 << 3,
  FIBER_CUSTOM_STACK = 1 << 4,
  FIBER_IS_RUNNING = 1 << 5,
  FIBER_IS_IDLE = 1 << 6,
  FIBER_CUSTOM_SLICE = 1 << 7,
  FIBER_IS_SYSTEM = 1 << 8,
  FIBER_JOIN_BEEN_INVOKED = 1 << 9,
  FIBER_MANAGED_SHUTDOWN = 1 << 10,
  FIBER_DEFAULT_FLAGS = 0
};

struct fiber {
  coro_context ctx;
  void* stack_slab;
  void* stack;
#ifdef HAVE_MADV_DONTNEED
  void* stack_watermark;
#endif
  size_t stack_size;
  struct fiber_slice max_slice;
  unsigned int stack_id;
  struct region gc;
#ifdef ENABLE_BACKTRACE
  void* first_alloc_bt;
#endif
  size_t gc_initial_size;
  struct fiber* caller;
  int csw;
  uint64_t fid;
  uint32_t flags;
  struct clock_stat clock_stat;
  struct rlist link;
  struct rlist state;
  struct rlist on_yield;
  struct rlist on_stop;
  struct rlist on_destroy;
  struct rlist wake;
  fiber_func f;
  union {
    va_list f_data;
    void* f_arg;
  };
  int f_ret;
  struct {
    void* session;
    void* credentials;
    void* txn;
    struct {
      struct lua_State* stack;
      int fid_ref;
      int storage_ref;
    } lua;
    struct {
      uint64_t sync;
    } net;
  } storage;
  void* wait_pad;
  struct diag diag;
  char* name;
  char inline_name[40];
#ifdef ENABLE_BACKTRACE
  void* parent_bt;
#endif
};

struct cord {
  struct fiber* fiber;
  void* loop;
  uint64_t next_fid;
  struct clock_stat clock_stat;
  struct cpu_stat cpu_stat;
  unsigned long id;
  const void* on_exit;
  void* fiber_registry;
  struct rlist alive;
  struct rlist ready;
  struct rlist dead;
  struct fiber* garbage;
  unsigned char event_watchers[4 * 64];
  unsigned char fiber_mempool[128];
  unsigned char slabc[256];
  struct fiber sched;
  double call_time;
  struct fiber_slice max_slice;
  struct fiber_slice slice;
  char name[40];
  struct fiber* main_fiber;
  unsigned char cancel_event[64];
  int client_fiber_count;
  struct fiber* shutdown_fiber;
  _Bool is_shutdown;
};
