// The machine-code patterns behind fiber_label_layout_from_code (fiber_layout.h), one per
// exported Tarantool function, on decoded x86-64 code (matchers.h Code). Each returns what it
// proved or fails closed naming the function and the pattern it expected.
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

}  // namespace ljprof::luajit
