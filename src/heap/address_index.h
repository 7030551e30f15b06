// heap/address_index.h: which object of a census starts at an address, in constant time. Every
// reference the graph pass follows (a few per object, millions in all) is looked up here; a
// binary search over millions of objects missed the cache at nearly every step.
//
// The census's objects are sorted by address; the index keeps, per 4 KiB page that holds the
// start of any, the range of them starting there, in an open-addressing hash table (a bucket of
// 16 bytes per such page, at most half full). A lookup finds the page's range and searches it
// (a few dozen in a real heap: no object is under 16 bytes).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "heap/heap_object.h"

namespace ljprof::heap {

class AddressIndex {
 public:
  AddressIndex() = default;
  // `objects` sorted by address, each address once.
  explicit AddressIndex(std::span<const Object> objects);

  // The index in `objects` (the span the index was built from) of the object at exactly
  // `addr`, or -1.
  int64_t find(std::span<const Object> objects, uint64_t addr) const;
  bool empty() const { return buckets_.empty(); }

 private:
  static constexpr unsigned kPageBits = 12;
  struct Bucket {
    uint64_t page_plus_one = 0;  // 0: empty
    uint32_t first = 0, end = 0;
  };
  size_t home(uint64_t page) const;

  std::vector<Bucket> buckets_;
  unsigned shift_ = 64;  // 64 - log2(buckets)
};

}  // namespace ljprof::heap
