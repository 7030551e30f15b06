// heap/heap_object.h: one collectable object of a census, as small as it can be kept.
#pragma once

#include <cstdint>

namespace ljprof::heap {

// 16 bytes: a census holds millions. No LuaJIT object reaches 4 GiB (lj_def.h: LJ_MAX_STR and
// LJ_MAX_UDATA are below 2^31, a table's array part at most LJ_MAX_ASIZE slots and its hash part
// 2^LJ_MAX_HBITS nodes), so a larger size is refused as impossible.
struct Object {
  uint64_t addr = 0;
  uint32_t bytes = 0;  // what freeing it gives back to gc.total (lj_tab_free, lj_str_free, ...)
  uint8_t gct = 0;     // Gct
};
static_assert(sizeof(Object) == 16);

}  // namespace ljprof::heap
