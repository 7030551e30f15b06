// core/fiber_list.h: Tarantool's fiber list of one cord, read from memory through an
// executable's fiber layout (luajit/fiber_layout.h): a core's memory, a live process's, or a
// fuzzer's bytes (fuzz/fiber_fuzzer.cc). Every read is checked and the walk is bounded; anything
// inconsistent fails the whole list, so a fiber is never named from a corrupt one.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "common/result.h"
#include "luajit/fiber_layout.h"

extern "C" {
#include "abi/read_mem.h"
}

namespace ljprof::core {

// A Tarantool fiber (tarantool src/lib/core/fiber.h struct fiber) as read from memory.
struct FiberName {
  uint64_t fiber = 0;      // the struct fiber's address
  uint64_t id = 0;         // fiber.fid
  std::string name;        // fiber.name, printable (common/printable.h)
  uint64_t lua_state = 0;  // fiber.storage.lua.stack (0: a C fiber, or no Lua state yet)
  uint64_t saved_sp = 0;   // fiber.ctx.sp: where a switched-out fiber's coro_transfer saved it
  uint32_t csw = 0;        // fiber.csw: times switched to; unchanged = has not run since
  bool dead = false;       // fiber.flags has FIBER_IS_DEAD: finished, waiting to be joined
  uint64_t link_next = 0;  // fiber.link.next: the next node of the cord's alive list
  uint64_t name_addr = 0;  // fiber.name: where the name was read from
};

struct FiberList {
  std::vector<FiberName> fibers;  // cord.alive, in list order
  FiberName running;              // cord.fiber
  std::set<uint64_t> ready;       // the fibers on cord.ready (struct fiber addresses)
  std::string cord;               // cord.name ("main" for the main cord)
};

// At most this many fibers on one list: more is taken for a corrupt (or looping) list.
constexpr uint64_t kMaxFibers = uint64_t{1} << 16;

// The bytes of struct fiber that FiberListReader::read_fiber reads, at once: [begin, end).
struct FiberBlock {
  uint32_t begin = 0, end = 0;
};
FiberBlock fiber_block(const luajit::FiberLayout& layout);
// The bytes of struct cord the reader reads (from the cord's address).
uint32_t cord_bytes(const luajit::FiberLayout& layout);

class FiberListReader {
 public:
  // `cord`: the runtime address of the struct cord (main_cord + the executable's load bias);
  // `what` names it in errors ("main_cord").
  FiberListReader(ljprof_mem_reader mem, const luajit::FiberLayout& layout, uint64_t cord,
                  const char* what = "cord")
      : mem_(mem), layout_(layout), cord_(cord), what_(what) {}

  // cord.fiber, cord.ready and cord.alive (rlist_foreach_entry from head.next back to the head).
  // An error when a read fails, a list loops or holds over kMaxFibers, a fid is 0, repeated or
  // over 2^48, or a name is unreadable or unterminated.
  Result<FiberList> walk() const;
  // One struct fiber's fields.
  Result<FiberName> read_fiber(uint64_t fiber) const;
  // cord.fiber (0 when unreadable).
  uint64_t running() const;

 private:
  Result<std::set<uint64_t>> read_ready() const;

  ljprof_mem_reader mem_;
  const luajit::FiberLayout& layout_;
  uint64_t cord_;
  const char* what_;
};

}  // namespace ljprof::core
