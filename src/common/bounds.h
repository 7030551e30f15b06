// Overflow-checked range arithmetic and bounds-checked struct reads over byte spans: the one
// set of helpers every hand-written parser (ELF, core notes) uses, so each check is written once.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>

namespace ljprof {

// a + b / a * b without wrap-around; true on overflow.
inline bool add_overflows(uint64_t a, uint64_t b, uint64_t* out) {
  return __builtin_add_overflow(a, b, out);
}
inline bool mul_overflows(uint64_t a, uint64_t b, uint64_t* out) {
  return __builtin_mul_overflow(a, b, out);
}

// True when [offset, offset+len) lies inside a buffer of `size` bytes.
inline bool in_bounds(uint64_t offset, uint64_t len, uint64_t size) {
  uint64_t end;
  return !add_overflows(offset, len, &end) && end <= size;
}

// Copies a T from `bytes` at `offset`; false (and *out untouched) when it does not fit.
template <typename T>
bool read_struct(std::span<const uint8_t> bytes, uint64_t offset, T* out) {
  if (!in_bounds(offset, sizeof(T), bytes.size())) return false;
  std::memcpy(out, bytes.data() + offset, sizeof(T));
  return true;
}

}  // namespace ljprof
