// libFuzzer target for Tarantool's fiber-list walk (core/fiber_list.h) on corrupted memory: the
// fiber list `ljprof fibers` and `ljprof core --all-fibers` read from a live process or a core.
// The first byte picks fiber.fid's width (4 bytes in 2.x, 8 in 3.x), the rest is memory at kBase
// with the struct cord at kBase and a fixed layout (below). The walk must fail closed or give a
// bounded list of fibers with distinct valid ids and printable names; nothing may crash or
// allocate without bound.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <set>

#include "common/printable.h"
#include "core/fiber_list.h"
#include "memory_image.h"

namespace {

using namespace ljprof;

using fuzz::Image;
using fuzz::kBase;
using fuzz::read_image;
using fuzz::require;

// struct cord: fiber 0, alive 8, ready 24, name 40 (char[40]); struct rlist {prev, next};
// struct fiber: link 0, fid 16, name 24 (char *), state 32 (rlist), csw 48, flags 52,
// storage.lua.stack 56, ctx.sp 64; FIBER_IS_DEAD 1.
luajit::FiberLayout layout(bool wide_fid) {
  luajit::FiberLayout l;
  l.main_cord = kBase;
  l.cord_fiber = 0;
  l.cord_alive = 8;
  l.cord_ready = 24;
  l.cord_name = 40;
  l.rlist_next = 8;
  l.fiber_link = 0;
  l.fiber_fid = 16;
  l.fid_size = wide_fid ? 8 : 4;
  l.fiber_name = 24;
  l.fiber_state = 32;
  l.fiber_csw = 48;
  l.fiber_flags = 52;
  l.flag_dead = 1;
  l.fiber_lua_state = 56;
  l.fiber_ctx_sp = 64;
  return l;
}

void check(const core::FiberName& f) {
  require(f.id != 0 && f.id < (uint64_t{1} << 48));
  require(f.name.size() <= 4 * 256);  // 255 bytes, each at most "\xNN"
  require(is_printable_text(f.name));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const luajit::FiberLayout l = layout((data[0] & 1) != 0);
  Image image{data + 1, size - 1};
  const ljprof_mem_reader mem{&read_image, &image};
  const core::FiberListReader reader(mem, l, kBase, "main_cord");
  (void)reader.running();
  auto list = reader.walk();
  if (!list.ok()) return 0;
  require(list->fibers.size() <= core::kMaxFibers);
  check(list->running);
  std::set<uint64_t> ids;
  for (const core::FiberName& f : list->fibers) {
    check(f);
    require(ids.insert(f.id).second);
    auto again = reader.read_fiber(f.fiber);
    require(again.ok() && again->id == f.id && again->name == f.name);
  }
  require(list->ready.size() <= core::kMaxFibers);
  return 0;
}
