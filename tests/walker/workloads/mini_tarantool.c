/* A Tarantool in miniature, for arm64, where no package has one: built here as an executable
 * named `tarantool` with LuaJIT linked in (Tarantool's fork, from Debian's tarantool source,
 * built for arm64 by the LuaJIT matrix), fibers as Tarantool 3.3 declares them
 * (../../luajit/synthetic/tarantool3_fiber.h) on a static main_cord and a TLS cord_ptr, switched
 * by coro_transfer and started by coro_startup as third_party/coro does it on AArch64
 * (coro_aarch64.h). As in Tarantool, each fiber runs its Lua function on a lua_State of its own
 * (lua_newthread, kept in fiber.storage.lua.stack) under lua_pcall, and a fiber that yields from
 * a C function called from Lua leaves its C stack, Lua frames in it, switched out.
 *
 * Lua gets `mini.create(name, fn)` (a fiber on main_cord.alive, fids from 101), `mini.run()`
 * (switches to each live fiber in turn, once, from the scheduler), `mini.yield()` (back to the
 * scheduler), `mini.self()` (the running fiber's id and name) and `mini.crash()` (abort). The C
 * side prints the return addresses a debugger would unwind through (ljprof-ra lines).
 *   aarch64-linux-gnu-gcc -O1 -g -DHAVE_MADV_DONTNEED -I<luajit src> -I<synthetic>
 *     mini_tarantool.c libluajit.a -lm -ldl -o tarantool
 *   ./tarantool SCRIPT.lua */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>

#include "tarantool3_fiber.h"
/* tarantool3_fiber.h defines coro_context. */
#include "coro_aarch64.h"

enum { kFiberStackWords = 32768 };

static struct cord main_cord;
__thread struct cord* cord_ptr;

static void rlist_create(struct rlist* list) {
  list->prev = list->next = list;
}

static void rlist_add_tail(struct rlist* head, struct rlist* item) {
  item->prev = head->prev;
  item->next = head;
  head->prev->next = item;
  head->prev = item;
}

/* Back to the scheduler: the fiber's C stack stays as it is until it is switched to again. Prints
 * "ljprof-ra ID yield ADDRESS", where it returns to once switched to again. */
__attribute__((noinline)) static void fiber_yield(void) {
  struct cord* cord = cord_ptr;
  struct fiber* self = cord->fiber;
  printf("ljprof-ra %llu yield %p\n", (unsigned long long)self->fid, __builtin_return_address(0));
  fflush(stdout);
  cord->fiber = &cord->sched;
  coro_transfer(&self->ctx, &cord->sched.ctx);
}

__attribute__((noinline)) static void fiber_call(struct fiber* f) {
  struct cord* cord = cord_ptr;
  cord->fiber = f;
  f->csw++;
  coro_transfer(&cord->sched.ctx, &f->ctx);
}

/* A fiber's body (coro_startup calls it): its function, already on its lua_State's stack. Prints
 * "ljprof-ra ID startup ADDRESS", where it would return to in coro_startup. */
__attribute__((noinline)) static void fiber_main(void* arg) {
  struct fiber* f = arg;
  lua_State* co = f->storage.lua.stack;
  printf("ljprof-ra %llu startup %p\n", (unsigned long long)f->fid, __builtin_return_address(0));
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

static int mini_run(lua_State* L) {
  struct cord* cord = cord_ptr;
  (void)L;
  for (struct rlist* at = cord->alive.next; at != &cord->alive; at = at->next) {
    struct fiber* f = (struct fiber*)((char*)at - offsetof(struct fiber, link));
    if (!(f->flags & FIBER_IS_DEAD)) fiber_call(f);
  }
  return 0;
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

static int mini_crash(lua_State* L) {
  (void)L;
  fflush(stdout);
  abort();
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
  static const luaL_Reg mini[] = {{"create", mini_create}, {"run", mini_run},
                                  {"yield", mini_yield},   {"self", mini_self},
                                  {"crash", mini_crash},   {NULL, NULL}};
  if (argc < 2) {
    fprintf(stderr, "usage: %s SCRIPT.lua\n", argv[0]);
    return 2;
  }
  cord_create(&main_cord, "main");
  lua_State* L = luaL_newstate();
  luaL_openlibs(L);
  luaL_register(L, "mini", mini);
  lua_pop(L, 1);
  if (luaL_loadfile(L, argv[1]) != 0 || lua_pcall(L, 0, 0, 0) != 0) {
    fprintf(stderr, "%s\n", lua_tostring(L, -1));
    return 1;
  }
  return 0;
}
