#include "core/fiber_snapshot.h"

#include <fmt/format.h>

#include <set>

namespace ljprof::core {

namespace {

// How many times a fiber (or the fiber list) is read again when it changed under the read: a
// fiber that runs more often than it can be walked is a busy one, and is marked instead.
constexpr int kReads = 3;

}  // namespace

const char* fiber_state_name(FiberState state) {
  switch (state) {
    case FiberState::Running:
      return "running";
    case FiberState::Ready:
      return "ready";
    case FiberState::Suspended:
      return "suspended";
    case FiberState::Dead:
      return "dead";
  }
  return "?";
}

FiberSnapshotter::Stamp FiberSnapshotter::stamp_of(const FiberName& f) const {
  return {f.id, f.saved_sp, f.lua_state, walker_.lua_stack_stamp(f.lua_state), f.csw, f.dead};
}

FiberStack FiberSnapshotter::read_stack(const FiberName& fiber, FiberState state,
                                        FiberSnapshot& snapshot) {
  FiberStack out;
  out.fiber = fiber;
  out.state = state;
  if (state == FiberState::Running) {
    out.note = "running: its stack is on the CPU and is not read without stopping the process";
    return out;
  }
  FiberName f = fiber;
  Stamp before = stamp_of(f);
  auto memo = previous_.find(f.fiber);
  if (memo != previous_.end() && memo->second.first == before) {
    ++snapshot.reused;
    FiberStack kept = memo->second.second;
    kept.fiber = f;  // the name may have changed in place
    kept.state = state;
    return kept;
  }
  for (int read = 0; read < kReads; ++read) {
    if (read > 0) ++snapshot.rereads;
    auto full = walker_.walk_fiber(f);
    if (full.ok()) {
      out.stack = std::move(*full);
      out.note.clear();
    } else {
      out.note = full.message();
      out.stack = f.lua_state != 0 ? walker_.walk_lua_state(f.lua_state) : ThreadStack{};
    }
    auto again = walker_.reread_fiber(f);
    if (again.ok() && stamp_of(*again) == before && walker_.running_fiber() != f.fiber) {
      out.fiber = *again;
      previous_[f.fiber] = {before, out};
      return out;
    }
    if (!again.ok()) break;  // freed under the read: nothing left to show
    f = *again;
    before = stamp_of(f);
  }
  ++snapshot.unsettled;
  out.stack = ThreadStack{};
  out.note = fmt::format("its stack changed under {} reads (the fiber kept running)", kReads);
  return out;
}

Result<FiberSnapshot> FiberSnapshotter::take() {
  Result<FiberList> list = make_error("not read");
  for (int read = 0; read < kReads; ++read) {
    list = walker_.walk_fibers();
    if (list.ok()) break;
  }
  if (!list.ok()) return list.error();
  FiberSnapshot out;
  out.cord = list->cord;
  auto state_of = [&](const FiberName& f) {
    if (f.fiber == list->running.fiber) return FiberState::Running;
    if (f.dead) return FiberState::Dead;
    return list->ready.count(f.fiber) ? FiberState::Ready : FiberState::Suspended;
  };
  out.fibers.push_back(read_stack(list->running, FiberState::Running, out));
  bool running_is_alive = false;
  for (const FiberName& f : list->fibers) running_is_alive |= f.fiber == list->running.fiber;
  if (!running_is_alive) {
    // cord.sched is on no list: the cord runs its scheduler, not one of its fibers.
    out.fibers.front().note =
        "the cord's scheduler: no fiber is running (the thread is in its event loop)";
    out.fibers.front().scheduler = true;
  }
  for (const FiberName& f : list->fibers) {
    if (f.fiber == list->running.fiber) continue;
    out.fibers.push_back(read_stack(f, state_of(f), out));
  }
  // Forget the fibers that are gone, so the memo stays the size of the live list.
  std::set<uint64_t> live;
  for (const FiberName& f : list->fibers) live.insert(f.fiber);
  std::erase_if(previous_, [&](const auto& entry) { return !live.count(entry.first); });
  return out;
}

}  // namespace ljprof::core
