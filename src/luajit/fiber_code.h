// The machine-code patterns behind fiber_layout_from_code (fiber_layout.h), one per exported
// Tarantool function, on decoded x86-64 code (matchers.h Code). Each returns what it proved or
// fails closed naming the function and the pattern it expected. The first four give what labels
// a CPU sample with its fiber (fiber_code.cc); the rest what walks the cords' fiber lists
// (fiber_list_code.cc).
#pragma once

#include <cstdint>

#include "common/result.h"
#include "luajit/matchers.h"

namespace ljprof::luajit {

struct MainCord {
  uint64_t address = 0;    // &main_cord, link-time
  int64_t tls_offset = 0;  // cord_ptr's offset from the thread pointer (negative on x86-64)
};

// cord_is_main: the compare of cord_ptr (fs:[D], or a register loaded from it) with main_cord's
// address (an immediate, or a register a rip-relative lea set).
Result<MainCord> match_cord_is_main(const Code& c);

// fiber_self: the cord pointer loaded from cord_ptr (at `tls_offset`), then the 8 bytes at
// [cord + X] returned: X is cord.fiber.
Result<int64_t> match_fiber_self(const Code& c, int64_t tls_offset);

// fiber_set_name: `f->name != f->inline_name`, a load through the first argument (or a copy of
// it) compared with an address computed from it: the loaded member is fiber.name.
Result<int64_t> match_fiber_name(const Code& c);

struct FidStore {
  int64_t offset = 0;  // fiber.fid
  uint8_t size = 0;    // its width
};

// fiber_new_ex: after the compare with FIBER_ID_MAX_RESERVED, the new id stored twice from one
// register: into the cord (a register loaded from cord_ptr at `tls_offset`) and into the fiber.
Result<FidStore> match_fiber_fid(const Code& c, int64_t tls_offset);

// fiber_stat: `rlist_foreach_entry(fiber, &cord()->alive, link) cb(fiber, ctx)`. The head's next
// loaded from the cord, the loop's end compared with the head's address, each fiber (the node
// minus fiber.link) passed to the callback, the next node loaded through that fiber.
struct AliveList {
  int64_t cord_alive = 0;  // cord.alive
  int64_t rlist_next = 0;  // rlist.next
  int64_t fiber_link = 0;  // fiber.link
};
Result<AliveList> match_alive_list(const Code& c, int64_t tls_offset);

// fiber_wakeup: `if ((f->flags & (READY | DEAD | RUNNING)) == 0)` — the first test of a member of
// the argument — then `rlist_move_tail_entry(&cord()->ready, f, state)`: the address of the
// fiber's state link stored into the next of the node the cord's ready head held as its prev.
struct ReadyList {
  int64_t cord_ready = 0;   // cord.ready
  int64_t fiber_state = 0;  // fiber.state
  int64_t fiber_flags = 0;  // fiber.flags
  int64_t wake_mask = 0;    // the flags that keep a fiber from waking, FIBER_IS_DEAD among them
};
Result<ReadyList> match_ready_list(const Code& c, int64_t tls_offset, int64_t rlist_next);

// fiber_join: `while (!fiber_is_dead(f)) fiber_yield();` — one bit of one member of the argument
// tested before and again after a call: fiber.flags and FIBER_IS_DEAD.
struct DeadFlag {
  int64_t fiber_flags = 0;
  int64_t flag_dead = 0;
};
Result<DeadFlag> match_dead_flag(const Code& c);

// fiber_call: the running fiber (cord.fiber) and the argument switched by a call or jump to
// coro_transfer(&caller->ctx, &callee->ctx) (at `coro_transfer`), and one fiber's
// `csw++` (a 4-byte add of 1) on the way.
struct SwitchFields {
  int64_t fiber_ctx = 0;  // fiber.ctx (its first member, the saved sp)
  int64_t fiber_csw = 0;  // fiber.csw
};
Result<SwitchFields> match_switch(const Code& c, int64_t tls_offset, int64_t cord_fiber,
                                  uint64_t coro_transfer);

// tarantool_lua_run_script: `script_fiber = fiber_new(...); script_fiber->storage.lua.stack =
// tarantool_L;` — the value of the variable at `tarantool_l` stored into what the call to
// `fiber_new` returned.
Result<int64_t> match_lua_stack(const Code& c, uint64_t fiber_new, uint64_t tarantool_l);

// cord_set_name: `snprintf(cord()->name, sizeof(cord()->name), ...)`, the first call's
// arguments: the name's address inside the cord and its size.
struct CordName {
  int64_t offset = 0;
  int64_t size = 0;
};
Result<CordName> match_cord_name(const Code& c, int64_t tls_offset);

}  // namespace ljprof::luajit
