// CoreWalker::other_cords: the cords of a Tarantool process's threads other than the main one
// (iproto, WAL, relay, coio...), each thread's TLS cord_ptr read at its thread pointer. A core
// keeps every thread's fs_base; a live process does not show it without a stop, so there the
// thread pointers are found in memory instead (core/thread_pointers.h).
#include <fmt/format.h>

#include <set>

#include "core/core_walk.h"
#include "core/thread_pointers.h"

namespace ljprof::core {

Result<std::vector<uint64_t>> CoreWalker::other_cords() const {
  if (!luajit_file_index_ || !tarantool_) {
    return make_error("the LuaJIT file is not a Tarantool executable");
  }
  if (fiber_layout() == nullptr) return fiber_layout_->error();
  auto from_tp = luajit::cord_ptr_from_tp(*fiber_layout(), core_.arch());
  if (!from_tp || core_.arch() != elf::Arch::X86_64) {
    return make_error("{}: a thread's cord is known only on x86-64 from the TLS symbol cord_ptr{}",
                      luajit_file_, from_tp ? "" : " (absent)");
  }
  std::set<uint64_t> cords;
  auto add = [&](uint64_t cord) {
    if (cord != 0 && cord != main_cord()) cords.insert(cord);
  };
  if (core_.live_pid()) {
    LJ_ASSIGN_OR_RETURN(std::vector<LiveThread> threads, live_threads(core_));
    for (const LiveThread& t : threads) {
      auto cord = core_.read_u64(t.thread_pointer + static_cast<uint64_t>(*from_tp));
      if (cord.ok()) add(*cord);
    }
  } else {
    for (const Thread& thread : core_.threads()) {
      auto cord = thread_cord(thread);
      if (cord.ok()) add(*cord);
    }
  }
  return std::vector<uint64_t>(cords.begin(), cords.end());
}

}  // namespace ljprof::core
