// core/fiber_snapshot.h: every fiber of one of Tarantool's cords (the main one, or another
// thread's) with its stack, read from a live process without stopping it (`ljprof fibers`) — or
// from a core, where nothing moves.
//
// A live read races the process: a fiber may run, and its stack change, while it is being
// walked. A switched-out fiber's stack changes only when it runs, and every switch to it
// increments fiber.csw; the GC may move its Lua stack (lj_state_shrinkstack) without running it.
// So a fiber's stack is kept only when csw, its saved stack pointer and its lua_State's stack,
// base and top read the same before and after the walk, and it is not the running fiber then;
// otherwise it is read again, and shown without frames ("unsettled") when it keeps changing.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "core/core_walk.h"

namespace ljprof::core {

enum class FiberState {
  Running,    // cord.fiber: on the CPU (its stack is not read: it moves)
  Ready,      // on cord.ready: woken, waiting for its turn
  Suspended,  // switched out, waiting (fiber.sleep, a channel, a box call, ...)
  Dead,       // finished (FIBER_IS_DEAD), not yet joined
};
const char* fiber_state_name(FiberState state);

struct FiberStack {
  FiberName fiber;
  FiberState state = FiberState::Suspended;
  // Native and Lua frames from the fiber's saved context (stack->reached_root), or its Lua frames
  // only, or none; `note` says why it is not the full stack ("" when it is). Never null; shared
  // with the next snapshot when the fiber has not run since (a copy per tick would be the cost
  // of a thousand waiting fibers).
  std::shared_ptr<const ThreadStack> stack = std::make_shared<const ThreadStack>();
  std::string note;
  bool scheduler = false;  // the running "fiber" is the cord's scheduler (cord.sched)
  bool reused = false;     // the stack of the previous take(): the fiber has not run since
};

struct FiberSnapshot {
  std::string cord;                // cord.name
  std::vector<FiberStack> fibers;  // the running fiber first, then cord.alive's order
  uint64_t rereads = 0;            // fibers read again because they changed under the read
  uint64_t unsettled = 0;          // fibers that kept changing: shown without frames
  uint64_t reused = 0;             // stacks taken from the previous snapshot (fiber unchanged)
};

class FiberSnapshotter {
 public:
  // The fibers of the cord at `cord` (CoreWalker::other_cords), of main_cord when 0.
  explicit FiberSnapshotter(const CoreWalker& walker, uint64_t cord = 0)
      : walker_(walker), cord_(cord) {}
  // One snapshot. The fiber list itself is read again (up to a few times) when it changed under
  // the read; an error when it cannot be read consistently or the executable has no fiber
  // layout. A fiber unchanged since the previous take() (same id, csw, saved sp and Lua stack)
  // keeps the stack read then.
  Result<FiberSnapshot> take();

 private:
  struct Stamp {
    uint64_t id = 0, saved_sp = 0, lua_state = 0, lua_stack = 0;
    uint32_t csw = 0;
    bool dead = false;
    friend bool operator==(const Stamp&, const Stamp&) = default;
  };
  Stamp stamp_of(const FiberName& fiber) const;
  Result<FiberList> read_list();
  FiberStack read_stack(const FiberName& fiber, FiberState state, const Stamp& stamp,
                        FiberSnapshot& snapshot);

  const CoreWalker& walker_;
  uint64_t cord_ = 0;
  std::map<uint64_t, std::pair<Stamp, FiberStack>> previous_;  // by struct fiber address
  std::vector<FiberName> previous_list_;  // the fibers the previous take() read
};

}  // namespace ljprof::core
