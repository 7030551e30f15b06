// heap/heap_object.h: one collectable object of a census, as small as it can be kept.
#pragma once

#include <cstdint>

namespace ljprof::heap {

// 12 bytes: a census holds millions, and every pass after it keeps it. No LuaJIT object reaches
// 4 GiB (lj_def.h: LJ_MAX_STR and LJ_MAX_UDATA are below 2^31, a table's array part at most
// LJ_MAX_ASIZE slots and its hash part 2^LJ_MAX_HBITS nodes), so a larger size is refused as
// impossible; nor does one lie above 2^48 (lj_obj.h: a GC64 reference holds 47 bits,
// LJ_GCVMASK; others 32), so such an address is refused too (kMaxAddress).
struct Object {
  static constexpr uint64_t kMaxAddress = (uint64_t{1} << 48) - 1;

  Object() = default;
  // `addr` <= kMaxAddress.
  Object(uint64_t addr, uint32_t bytes, uint8_t gct)
      : addr_low(static_cast<uint32_t>(addr)),
        bytes(bytes),
        addr_high(static_cast<uint16_t>(addr >> 32)),
        gct(gct) {}
  uint64_t addr() const { return uint64_t{addr_high} << 32 | addr_low; }

  uint32_t addr_low = 0;
  uint32_t bytes = 0;  // what freeing it gives back to gc.total (lj_tab_free, lj_str_free, ...)
  uint16_t addr_high = 0;
  uint8_t gct = 0;  // Gct
};
static_assert(sizeof(Object) == 12);

}  // namespace ljprof::heap
