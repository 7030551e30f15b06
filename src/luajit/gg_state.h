// GG_State (lj_dispatch.h): one allocation holding the main lua_State, then global_State, then
// (with the JIT) jit_State, then the dispatch table. Where the main lua_State sits before G.
#pragma once

#include <array>
#include <cstdint>

namespace ljprof::luajit {

// The sizes sizeof(lua_State) takes, so the main thread is at G minus one of them: 96 with GC64
// and 64 without (lj_obj.h), 16 more with OpenResty's exdata and exdata2, 8 more with its exdata
// alone (luajit2 2018-06..2020-10). Most common first.
constexpr std::array<uint64_t, 3> main_lua_state_sizes(uint8_t ref_size) {
  const uint64_t base = ref_size == 8 ? 96 : 64;
  return {base, base + 16, base + 8};
}

}  // namespace ljprof::luajit
