// CoreWalker::other_cords: the cords of a Tarantool process's threads other than the main one
// (iproto, WAL, relay, coio...), each thread's TLS cord_ptr read at its thread pointer. A core
// keeps every thread's fs_base; a live process does not show it without a stop, so there the
// thread pointers are found in memory instead: on x86-64 glibc places a thread's struct pthread,
// whose first words are its thread control block, at the top of the thread's stack mapping
// (nptl/allocatestack.c allocate_stack), and that block points at itself twice
// (sysdeps/x86_64/nptl/tls.h tcbhead_t: `void *tcb` at 0 and `void *self` at 16, both the thread
// pointer).
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <set>

#include "core/core_walk.h"

namespace ljprof::core {
namespace {

// How much of the top of a mapping is looked at (sizeof(struct pthread) is about 2.3 KiB; the
// static TLS block lies below it), and its alignment (nptl TCB_ALIGNMENT).
constexpr uint64_t kTopBytes = 8192;
constexpr uint64_t kTcbAlign = 64;

// The thread pointers of the live process's threads started by pthread_create.
std::vector<uint64_t> live_thread_pointers(const CoreFile& core) {
  std::vector<uint64_t> out;
  std::array<uint64_t, kTopBytes / 8> words{};
  for (const AddressRange& r : core.anonymous_writable()) {
    if (r.end - r.start < kTopBytes) continue;
    const uint64_t base = r.end - kTopBytes;
    if (!core.read(base, words.data(), kTopBytes).ok()) continue;
    for (uint64_t off = 0; off + 24 <= kTopBytes; off += kTcbAlign) {
      const uint64_t p = base + off;
      if (words[off / 8] == p && words[off / 8 + 2] == p) out.push_back(p);
    }
  }
  return out;
}

}  // namespace

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
  if (core_.threads().empty()) {
    for (uint64_t tp : live_thread_pointers(core_)) {
      auto cord = core_.read_u64(tp + static_cast<uint64_t>(*from_tp));
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
