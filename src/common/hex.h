// common/hex.h: addresses and offsets as every output prints them.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>

namespace ljprof {

inline std::string hex(uint64_t v) {  // "0x7f3a…"
  return fmt::format("{:#x}", v);
}

}  // namespace ljprof
