// The type tags of LuaJIT's collectable objects, as every GC object's header holds them: what the
// heap walk sizes objects by, and how a memory scan knows a lua_State.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ljprof::luajit {

// lj_obj.h: GCHeader.gct holds ~itype; the itypes of collectable objects, LJ_TSTR (~4u) to
// LJ_TUDATA (~12u).
enum class Gct : uint8_t {
  Str = 4,
  Upval = 5,
  Thread = 6,
  Proto = 7,
  Func = 8,
  Trace = 9,
  Cdata = 10,
  Tab = 11,
  Udata = 12,
};
inline constexpr uint8_t kMinGct = 4;
inline constexpr uint8_t kMaxGct = 12;
inline constexpr size_t kGctCount = kMaxGct + 1;

}  // namespace ljprof::luajit
