#include "record/row_allocator.h"

#include <algorithm>
#include <cassert>
#include <iterator>

namespace ljprof::record {

RowAllocator::RowAllocator(uint32_t capacity) : capacity_(capacity), free_rows_(capacity) {
  if (capacity > 0) free_.emplace(0, capacity);
}

std::optional<uint32_t> RowAllocator::allocate(uint32_t count) {
  if (count == 0) return std::nullopt;
  auto best = free_.end();
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second >= count && (best == free_.end() || it->second < best->second)) best = it;
  }
  if (best == free_.end()) return std::nullopt;
  const uint32_t first = best->first, left = best->second - count;
  free_.erase(best);
  if (left > 0) free_.emplace(first + count, left);
  free_rows_ -= count;
  return first;
}

void RowAllocator::retire(uint32_t first, uint32_t count, uint64_t when) {
  assert(count > 0 && first <= capacity_ && count <= capacity_ - first);
  retired_.push_back({first, count, when});
  retired_rows_ += count;
}

uint64_t RowAllocator::release_retired(uint64_t when) {
  uint64_t freed = 0;
  std::erase_if(retired_, [&](const Retired& r) {
    if (r.when > when) return false;
    free_range(r.first, r.count);
    freed += r.count;
    return true;
  });
  retired_rows_ -= freed;
  return freed;
}

// Puts [first, first + count) back, merged with the free ranges right before and after it.
void RowAllocator::free_range(uint32_t first, uint32_t count) {
  auto next = free_.lower_bound(first);
  assert(next == free_.end() || next->first >= first + count);  // not free already
  free_rows_ += count;
  if (next != free_.end() && next->first == first + count) {
    count += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    assert(prev->first + prev->second <= first);
    if (prev->first + prev->second == first) {
      prev->second += count;
      return;
    }
  }
  free_.emplace_hint(next, first, count);
}

uint32_t RowAllocator::largest_free() const {
  uint32_t largest = 0;
  for (const auto& [first, count] : free_) largest = std::max(largest, count);
  return largest;
}

}  // namespace ljprof::record
