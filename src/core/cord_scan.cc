// CoreWalker::other_cords: the cords of a Tarantool process's threads other than the main one
// (iproto, WAL, relay, coio...), each thread's TLS cord_ptr read at its thread pointer. A core
// keeps every thread's thread pointer (x86-64 fs_base, AArch64 NT_ARM_TLS, which qemu-user cores
// lack: thread_cord reads glibc's thread list then); a live process does not show it without a
// stop, so there the thread pointers come from glibc's own thread list (core/thread_pointers.h).
#include <fmt/format.h>

#include <map>

#include "core/core_walk.h"
#include "core/thread_pointers.h"

namespace ljprof::core {

Result<std::vector<CoreWalker::OtherCord>> CoreWalker::other_cords() const {
  LJ_ASSIGN_OR_RETURN(const int64_t from_tp, cord_ptr_offset());
  std::map<uint64_t, uint32_t> cords;  // cord -> the first thread seen running it
  auto add = [&](uint64_t cord, uint32_t tid) {
    if (cord != 0 && cord != main_cord()) cords.emplace(cord, tid);
  };
  if (core_.live_pid()) {
    LJ_ASSIGN_OR_RETURN(std::vector<ListedThread> threads, glibc_threads(core_));
    for (const ListedThread& t : threads) {
      auto cord = core_.read_u64(t.thread_pointer + static_cast<uint64_t>(from_tp));
      if (cord.ok()) add(*cord, t.tid);
    }
  } else {
    for (const Thread& thread : core_.threads()) {
      auto cord = thread_cord(thread);
      if (cord.ok()) add(*cord, thread.tid);
    }
  }
  std::vector<OtherCord> out;
  for (const auto& [cord, tid] : cords) out.push_back({cord, tid});
  return out;
}

}  // namespace ljprof::core
