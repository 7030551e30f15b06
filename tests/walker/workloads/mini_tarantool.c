/* A Tarantool in miniature, for arm64, where no package has one: built here as an executable
 * named `tarantool` with LuaJIT linked in (Tarantool's fork, from Debian's tarantool source,
 * built for arm64 by the LuaJIT matrix), fibers as Tarantool 3.3 declares them
 * (../../luajit/synthetic/tarantool3_fiber.h) on a static main_cord and a TLS cord_ptr, switched
 * by coro_transfer and started by coro_startup as third_party/coro does it on AArch64
 * (coro_aarch64.h). As in Tarantool, each fiber runs its Lua function on a lua_State of its own
 * (lua_newthread, kept in fiber.storage.lua.stack) under lua_pcall, and a fiber that yields from
 * a C function called from Lua leaves its C stack, Lua frames in it, switched out.
 *
 * Lua gets `mini.create(name, fn[, quiet])` (a fiber on main_cord.alive, fids from 101; quiet:
 * without the ljprof-ra lines below), `mini.run()`
 * (switches to each live fiber in turn, once, from the scheduler), `mini.yield()` (back to the
 * scheduler), `mini.park()` (back to it for good), `mini.self()` (the running fiber's id and
 * name), `mini.show(tag)` (prints them and the caller's traceback), `mini.crash()` (abort),
 * `mini.cord(name)` (a thread running a cord of C fibers, cord_thread), `mini.now()` and
 * `mini.thread_cpu()` (CLOCK_MONOTONIC, this thread's CPU time). The C side prints the return
 * addresses a debugger would unwind through (ljprof-ra lines). aarch64-linux-gnu-gcc -O1 -g
 * -DHAVE_MADV_DONTNEED -I<luajit src> -I<synthetic> mini_tarantool.c libluajit.a -lm -ldl -pthread
 * -o tarantool
 *   ./tarantool SCRIPT.lua [ARG...] */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "tarantool3_fiber.h"
/* tarantool3_fiber.h defines coro_context. */
#include "coro_aarch64.h"

enum { kFiberStackWords = 32768 };

static struct cord main_cord;
__thread struct cord* cord_ptr;
static lua_State* main_L; /* the main cord's Lua state, which anchors each fiber's thread */

static void rlist_create(struct rlist* list) {
  list->prev = list->next = list;
}

static void rlist_add_tail(struct rlist* head, struct rlist* item) {
  item->prev = head->prev;
  item->next = head;
  head->prev->next = item;
  head->prev = item;
}

/* Back to the scheduler: the fiber's C stack stays as it is until it is switched to again. At a
 * fiber's first switch-out, prints "ljprof-ra ID yield ADDRESS": where it returns to. */
__attribute__((noinline)) static void fiber_yield(void) {
  struct cord* cord = cord_ptr;
  struct fiber* self = cord->fiber;
  if (self->csw == 1 && self->stack_id == 0) {
    printf("ljprof-ra %llu yield %p\n", (unsigned long long)self->fid, __builtin_return_address(0));
    fflush(stdout);
  }
  cord->fiber = &cord->sched;
  coro_transfer(&self->ctx, &cord->sched.ctx);
}

static double clock_seconds(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Switches to `f` until it yields, adding the thread CPU time that took to f->clock_stat.acc
 * (nanoseconds), as Tarantool's fiber clock (fiber.top) counts it. */
__attribute__((noinline)) static void fiber_call(struct fiber* f) {
  struct cord* cord = cord_ptr;
  const double start = clock_seconds(CLOCK_THREAD_CPUTIME_ID);
  cord->fiber = f;
  f->csw++;
  coro_transfer(&cord->sched.ctx, &f->ctx);
  f->clock_stat.acc += (uint64_t)((clock_seconds(CLOCK_THREAD_CPUTIME_ID) - start) * 1e9);
}

/* A fiber's body (coro_startup calls it): its function, already on its lua_State's stack. Prints
 * "ljprof-ra ID startup ADDRESS", where it would return to in coro_startup. */
__attribute__((noinline)) static void fiber_main(void* arg) {
  struct fiber* f = arg;
  lua_State* co = f->storage.lua.stack;
  if (f->stack_id == 0) {
    printf("ljprof-ra %llu startup %p\n", (unsigned long long)f->fid, __builtin_return_address(0));
  }
  if (lua_pcall(co, 0, 0, 0) != 0) fprintf(stderr, "fiber %s: %s\n", f->name, lua_tostring(co, -1));
  f->flags |= FIBER_IS_DEAD;
  fiber_yield();
  abort(); /* a dead fiber is never switched to */
}

static int mini_create(lua_State* L) {
  const char* name = luaL_checkstring(L, 1);
  luaL_checktype(L, 2, LUA_TFUNCTION);
  struct cord* cord = cord_ptr;
  struct fiber* f = calloc(1, sizeof *f);
  void** stack = malloc(kFiberStackWords * sizeof(void*));
  if (f == NULL || stack == NULL) return luaL_error(L, "out of memory");
  f->fid = cord->next_fid++;
  snprintf(f->inline_name, sizeof f->inline_name, "%s", name);
  f->name = f->inline_name;
  f->stack = stack;
  f->stack_size = kFiberStackWords * sizeof(void*);
  f->stack_id = lua_toboolean(L, 3); /* quiet: no ljprof-ra lines (nothing else uses it here) */
  lua_State* co = lua_newthread(L);
  f->storage.lua.stack = co;
  f->storage.lua.storage_ref = luaL_ref(L, LUA_REGISTRYINDEX); /* keeps the thread alive */
  lua_pushvalue(L, 2);
  lua_xmove(L, co, 1);
  coro_create(&f->ctx, fiber_main, f, stack, kFiberStackWords);
  rlist_create(&f->state);
  rlist_add_tail(&cord->alive, &f->link);
  lua_pushinteger(L, (lua_Integer)f->fid);
  return 1;
}

/* A fiber that finished leaves the cord's list and is freed, as Tarantool recycles it. */
static void fiber_reap(struct fiber* f) {
  f->link.prev->next = f->link.next;
  f->link.next->prev = f->link.prev;
  if (f->storage.lua.stack != NULL) {
    luaL_unref(main_L, LUA_REGISTRYINDEX, f->storage.lua.storage_ref);
  }
  free(f->stack);
  free(f);
}

/* A parked fiber (mini.park) is not switched to again; fiber.f_ret, which nothing else here
 * uses, marks it. */
static void run_round(struct cord* cord) {
  struct rlist* next;
  for (struct rlist* at = cord->alive.next; at != &cord->alive; at = next) {
    struct fiber* f = (struct fiber*)((char*)at - offsetof(struct fiber, link));
    next = at->next;
    if (!(f->flags & FIBER_IS_DEAD) && f->f_ret == 0) fiber_call(f);
    if (f->flags & FIBER_IS_DEAD) fiber_reap(f);
  }
}

static int mini_run(lua_State* L) {
  (void)L;
  run_round(cord_ptr);
  return 0;
}

static int mini_park(lua_State* L) {
  (void)L;
  cord_ptr->fiber->f_ret = 1;
  fiber_yield();
  return 0;
}

/* This thread's CPU time (os.clock is the whole process's). */
static int mini_thread_cpu(lua_State* L) {
  lua_pushnumber(L, clock_seconds(CLOCK_THREAD_CPUTIME_ID));
  return 1;
}

/* mini.cpu(id): the CPU seconds main_cord's fiber `id` has run (fiber_call), nil if none. */
static int mini_cpu(lua_State* L) {
  const uint64_t id = (uint64_t)luaL_checkinteger(L, 1);
  for (struct rlist* at = main_cord.alive.next; at != &main_cord.alive; at = at->next) {
    struct fiber* f = (struct fiber*)((char*)at - offsetof(struct fiber, link));
    if (f->fid != id) continue;
    lua_pushnumber(L, (double)f->clock_stat.acc * 1e-9);
    return 1;
  }
  return 0;
}

static int mini_now(lua_State* L) {
  lua_pushnumber(L, clock_seconds(CLOCK_MONOTONIC));
  return 1;
}

static int mini_yield(lua_State* L) {
  (void)L;
  fiber_yield();
  return 0;
}

static int mini_self(lua_State* L) {
  struct fiber* f = cord_ptr->fiber;
  lua_pushinteger(L, (lua_Integer)f->fid);
  lua_pushstring(L, f->name);
  return 2;
}

/* mini.show(tag): "TAG ID NAME" of the running fiber, then the calling Lua code's traceback as
 * debug.traceback gives it (the same luaL_traceback) between ljprof-traceback-begin/-end. */
static int mini_show(lua_State* L) {
  struct fiber* f = cord_ptr->fiber;
  luaL_traceback(L, L, "", 1);
  printf("%s %llu %s\nljprof-traceback-begin\n%s\nljprof-traceback-end\n", luaL_checkstring(L, 1),
         (unsigned long long)f->fid, f->name, lua_tostring(L, -1));
  fflush(stdout);
  return 0;
}

static int mini_crash(lua_State* L) {
  (void)L;
  fflush(stdout);
  abort();
}

/* A cord of another thread (Tarantool's iproto, WAL...): C fibers only, no Lua. "c-idle" switches
 * out once and stays; "c-spin" burns about a millisecond of CPU per turn. */
static struct fiber* c_fiber(struct cord* cord, const char* name, void (*body)(void*)) {
  struct fiber* f = calloc(1, sizeof *f);
  void** stack = malloc(kFiberStackWords * sizeof(void*));
  if (f == NULL || stack == NULL) abort();
  f->fid = cord->next_fid++;
  snprintf(f->inline_name, sizeof f->inline_name, "%s", name);
  f->name = f->inline_name;
  f->stack = stack;
  f->stack_size = kFiberStackWords * sizeof(void*);
  coro_create(&f->ctx, body, f, stack, kFiberStackWords);
  rlist_create(&f->state);
  rlist_add_tail(&cord->alive, &f->link);
  return f;
}

__attribute__((noinline)) static void c_idle_wait(struct fiber* f) {
  f->f_ret = 1;
  fiber_yield();
}

static void c_idle(void* arg) {
  c_idle_wait(arg);
  abort();
}

static volatile double spin_sink;

__attribute__((noinline)) static void c_spin_turn(void) {
  const double end = clock_seconds(CLOCK_THREAD_CPUTIME_ID) + 0.001;
  while (clock_seconds(CLOCK_THREAD_CPUTIME_ID) < end) spin_sink = spin_sink * 0.5 + 1;
}

static void c_spin(void* arg) {
  (void)arg;
  for (;;) {
    c_spin_turn();
    fiber_yield();
  }
}

static void cord_create(struct cord* cord, const char* name);

static void* cord_thread(void* arg) {
  static struct cord worker;
  cord_create(&worker, arg);
  c_fiber(&worker, "c-idle", c_idle);
  c_fiber(&worker, "c-spin", c_spin);
  for (;;) run_round(&worker);
  return NULL;
}

/* mini.cord(name): a thread running a cord of its own (cord_thread), for good. */
static int mini_cord(lua_State* L) {
  static char name[40];
  pthread_t thread;
  snprintf(name, sizeof name, "%s", luaL_checkstring(L, 1));
  if (pthread_create(&thread, NULL, cord_thread, name) != 0) return luaL_error(L, "pthread_create");
  return 0;
}

static void cord_create(struct cord* cord, const char* name) {
  rlist_create(&cord->alive);
  rlist_create(&cord->ready);
  rlist_create(&cord->dead);
  rlist_create(&cord->sched.link);
  rlist_create(&cord->sched.state);
  cord->sched.fid = 1;
  snprintf(cord->sched.inline_name, sizeof cord->sched.inline_name, "sched");
  cord->sched.name = cord->sched.inline_name;
  cord->next_fid = 101;
  cord->fiber = &cord->sched;
  snprintf(cord->name, sizeof cord->name, "%s", name);
  cord_ptr = cord;
}

int main(int argc, char** argv) {
  static const luaL_Reg mini[] = {
      {"create", mini_create}, {"run", mini_run},   {"yield", mini_yield},
      {"park", mini_park},     {"self", mini_self}, {"crash", mini_crash},
      {"cord", mini_cord},     {"now", mini_now},   {"thread_cpu", mini_thread_cpu},
      {"show", mini_show},     {"cpu", mini_cpu},   {NULL, NULL}};
  if (argc < 2) {
    fprintf(stderr, "usage: %s SCRIPT.lua [ARG...]\n", argv[0]);
    return 2;
  }
  cord_create(&main_cord, "main");
  lua_State* L = luaL_newstate();
  main_L = L;
  luaL_openlibs(L);
  luaL_register(L, "mini", mini);
  lua_pop(L, 1);
  lua_createtable(L, argc, 0); /* arg, as the luajit command line gives it */
  for (int i = 1; i < argc; ++i) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i - 1);
  }
  lua_setglobal(L, "arg");
  if (luaL_loadfile(L, argv[1]) != 0 || lua_pcall(L, 0, 0, 0) != 0) {
    fprintf(stderr, "%s\n", lua_tostring(L, -1));
    return 1;
  }
  return 0;
}
