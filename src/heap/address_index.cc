#include "heap/address_index.h"

#include <algorithm>
#include <bit>

namespace ljprof::heap {

size_t AddressIndex::home(uint64_t page) const {
  // Fibonacci hashing (Knuth, TAOCP 6.4): neighbouring pages spread over the table.
  return static_cast<size_t>((page * 0x9e3779b97f4a7c15ull) >> shift_);
}

AddressIndex::AddressIndex(std::span<const Object> objects) {
  size_t pages = 0;
  for (size_t i = 0; i < objects.size(); ++i) {
    if (i == 0 || (objects[i].addr() >> kPageBits) != (objects[i - 1].addr() >> kPageBits)) ++pages;
  }
  if (pages == 0) return;
  const size_t size = std::bit_ceil(2 * pages);
  shift_ = 64 - static_cast<unsigned>(std::countr_zero(size));
  buckets_.resize(size);
  const size_t mask = size - 1;
  for (size_t first = 0; first < objects.size();) {
    const uint64_t page = objects[first].addr() >> kPageBits;
    size_t end = first + 1;
    while (end < objects.size() && (objects[end].addr() >> kPageBits) == page) ++end;
    size_t b = home(page);
    while (buckets_[b].page_plus_one != 0) b = (b + 1) & mask;
    buckets_[b] = {page + 1, static_cast<uint32_t>(first), static_cast<uint32_t>(end)};
    first = end;
  }
}

int64_t AddressIndex::find(std::span<const Object> objects, uint64_t addr) const {
  if (buckets_.empty()) return -1;
  const uint64_t page = addr >> kPageBits;
  const size_t mask = buckets_.size() - 1;
  for (size_t b = home(page);; b = (b + 1) & mask) {
    const Bucket& bucket = buckets_[b];
    if (bucket.page_plus_one == 0) return -1;
    if (bucket.page_plus_one != page + 1) continue;
    const auto begin = objects.begin() + bucket.first, end = objects.begin() + bucket.end;
    const auto it = std::lower_bound(begin, end, addr,
                                     [](const Object& o, uint64_t a) { return o.addr() < a; });
    if (it == end || it->addr() != addr) return -1;
    return it - objects.begin();
  }
}

}  // namespace ljprof::heap
