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
                                        const Stamp& stamp, FiberSnapshot& snapshot) {
  FiberStack out;
  out.fiber = fiber;
  out.state = state;
  if (state == FiberState::Running) {
    out.note = "running: its stack is on the CPU and is not read without stopping the process";
    return out;
  }
  FiberName f = fiber;
  Stamp before = stamp;
  auto memo = previous_.find(f.fiber);
  if (memo != previous_.end() && memo->second.first == before) {
    ++snapshot.reused;
    FiberStack kept = memo->second.second;
    kept.fiber = f;  // the name may have changed in place
    kept.state = state;
    kept.reused = true;
    return kept;
  }
  for (int read = 0; read < kReads; ++read) {
    if (read > 0) ++snapshot.rereads;
    // The walk reads the fiber's stack and the Lua objects it names in pieces a few bytes apart:
    // a page at a time. Its check below reads the process as it is then, uncached.
    walker_.cache_pages(true);
    auto full = walker_.walk_fiber(f);
    if (full.ok()) {
      out.stack = std::make_shared<const ThreadStack>(std::move(*full));
      out.note.clear();
    } else {
      out.note = full.message();
      out.stack = std::make_shared<const ThreadStack>(
          f.lua_state != 0 ? walker_.walk_lua_state(f.lua_state) : ThreadStack{});
    }
    walker_.cache_pages(false);
    auto again = walker_.reread_fiber(f);
    if (!again.ok()) break;  // freed under the read: nothing left to show
    const Stamp after = stamp_of(*again);
    if (after == before && walker_.running_fiber(cord_) != f.fiber) {
      out.fiber = *again;
      previous_[f.fiber] = {before, out};
      return out;
    }
    // Read again from the state it has now.
    f = *again;
    before = after;
  }
  ++snapshot.unsettled;
  out.stack = std::make_shared<const ThreadStack>();
  out.note = fmt::format("its stack changed under {} reads (the fiber kept running)", kReads);
  return out;
}

Result<FiberList> FiberSnapshotter::read_list() {
  // What the previous list read, in one batch (a live process), so that a thousand waiting
  // fibers cost a few system calls; the reads then see memory as of that one moment. A list that
  // cannot be walked is read again without the batch.
  walker_.prefetch_fibers(previous_list_, cord_);
  Result<FiberList> list = walker_.walk_cord_fibers(cord_);
  for (int read = 1; read < kReads && !list.ok(); ++read) {
    walker_.drop_prefetch();
    list = walker_.walk_cord_fibers(cord_);
  }
  return list;
}

Result<FiberSnapshot> FiberSnapshotter::take() {
  Result<FiberList> list = read_list();
  if (!list.ok()) {
    walker_.drop_prefetch();
    return list.error();
  }
  // The stamps come from the batch too; the walks and their checks read the process as it is
  // now (a fiber that ran since the batch fails its check and is read again).
  std::vector<Stamp> stamps;
  stamps.reserve(list->fibers.size());
  for (const FiberName& f : list->fibers) stamps.push_back(stamp_of(f));
  walker_.drop_prefetch();
  FiberSnapshot out;
  out.cord = list->cord;
  auto state_of = [&](const FiberName& f) {
    if (f.fiber == list->running.fiber) return FiberState::Running;
    if (f.dead) return FiberState::Dead;
    return list->ready.count(f.fiber) ? FiberState::Ready : FiberState::Suspended;
  };
  out.fibers.push_back(read_stack(list->running, FiberState::Running, {}, out));
  bool running_is_alive = false;
  for (size_t i = 0; i < list->fibers.size(); ++i) {
    const FiberName& f = list->fibers[i];
    if (f.fiber == list->running.fiber) {
      running_is_alive = true;
      continue;
    }
    out.fibers.push_back(read_stack(f, state_of(f), stamps[i], out));
  }
  if (!running_is_alive) {
    // cord.sched is on no list: the cord runs its scheduler, not one of its fibers.
    out.fibers.front().note =
        "the cord's scheduler: no fiber is running (the thread is in its event loop)";
    out.fibers.front().scheduler = true;
  }
  // Forget the fibers that are gone, so the memo stays the size of the live list.
  std::set<uint64_t> live;
  for (const FiberName& f : list->fibers) live.insert(f.fiber);
  std::erase_if(previous_, [&](const auto& entry) { return !live.count(entry.first); });
  previous_list_ = std::move(list->fibers);
  previous_list_.push_back(list->running);
  return out;
}

}  // namespace ljprof::core
