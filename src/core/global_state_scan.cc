// CoreWalker::scan_global_states: the VMs of a process that no anchor and no thread names (a live
// luajit or nginx worker, whose threads' registers are unknown without stopping it), found by
// the one allocation every LuaJIT VM makes first, its GG_State (lj_dispatch.h, lj_state.c
// lua_newstate).
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "core/core_walk.h"
#include "luajit/gc_types.h"
#include "luajit/gg_state.h"

namespace ljprof::core {
namespace {

// Bytes read at once, and the dispatch entries that must be VM code.
constexpr uint64_t kScanChunk = 1u << 20;
constexpr size_t kDispatchChecked = 16;
constexpr size_t kMaxStates = 16;

uint64_t load_ref(const uint8_t* at, uint8_t ref_size) {
  if (ref_size == 8) {
    uint64_t v;
    std::memcpy(&v, at, 8);
    return v;
  }
  uint32_t v;
  std::memcpy(&v, at, 4);
  return v;
}

}  // namespace

// A GG_State is proven by three things no other memory has together: a lua_State whose glref
// points just past itself (G, at one of luajit::main_lua_state_sizes), whose type tag is a
// thread's, and whose G's dispatch table (G + GG_State.dispatch-g) starts with kDispatchChecked
// addresses inside this build's VM code. The scan looks at every aligned GCRef-sized word of
// anonymous writable memory once: the word at p is a candidate glref when it equals
// p - glref + size for one of the sizes.
Result<std::vector<uint64_t>> CoreWalker::scan_global_states() const {
  if (!luajit_) return make_error("no LuaJIT layout: {}", luajit_error_);
  const uint8_t ref = info_.ref_size;
  const uint64_t vm_begin = luajit_->vm.begin + vm_bias_, vm_end = luajit_->vm.end + vm_bias_;
  const auto glref = static_cast<uint64_t>(info_.L_glref);
  std::array<uint64_t, 3> deltas{};
  const auto sizes = luajit::main_lua_state_sizes(ref);
  for (size_t i = 0; i < sizes.size(); ++i) deltas[i] = sizes[i] - glref;
  const uint64_t ref_mask = ref == 8 ? ~uint64_t{0} : 0xffffffffu;

  auto proven = [&](uint64_t L, uint64_t g) {
    uint8_t gct = 0;
    if (!core_.read(L + info_.gc_gct, &gct, 1).ok() ||
        gct != static_cast<uint8_t>(luajit::Gct::Thread))
      return false;
    std::array<uint64_t, kDispatchChecked> dispatch{};
    if (!core_.read(g + info_.g_to_dispatch, dispatch.data(), sizeof dispatch).ok()) return false;
    return std::all_of(dispatch.begin(), dispatch.end(),
                       [&](uint64_t a) { return a >= vm_begin && a < vm_end; });
  };

  std::vector<uint64_t> found;
  std::vector<uint8_t> chunk(kScanChunk);
  for (const AddressRange& range : core_.anonymous_writable()) {
    for (uint64_t at = range.start; at < range.end && found.size() < kMaxStates; at += kScanChunk) {
      const uint64_t len = std::min(kScanChunk, range.end - at);
      // A chunk that cannot be read (a live mapping unmapped meanwhile) holds nothing to find.
      if (!core_.read(at, chunk.data(), len).ok()) continue;
      for (uint64_t off = 0; off + ref <= len; off += ref) {
        const uint64_t p = at + off, value = load_ref(chunk.data() + off, ref);
        for (uint64_t delta : deltas) {
          if (value != ((p + delta) & ref_mask) || p < glref) continue;
          const uint64_t L = p - glref, g = p + delta;
          if (std::find(found.begin(), found.end(), g) == found.end() && proven(L, g)) {
            found.push_back(g);
          }
        }
      }
    }
  }
  return found;
}

}  // namespace ljprof::core
