// Hash combining for the hash maps keyed by several fields (boost::hash_combine's mixing step).
#pragma once

#include <cstddef>
#include <cstdint>

namespace ljprof {

inline size_t hash_combine(size_t h, uint64_t v) {
  return h ^ (static_cast<size_t>(v) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
}

}  // namespace ljprof
