// heap/address_index.h: which object of a census starts at an address, in constant time. Every
// reference the graph pass follows (a few per object, millions in all) is looked up here; a
// binary search over millions of objects missed the cache at nearly every step.
//
// The census's objects are sorted by address; the index keeps, per 4 KiB page that holds the
// start of any, the range of them starting there, and a lookup searches that range (a few dozen
// in a real heap: no object is under 16 bytes). Where those pages lie close together (a heap is
// a few runs of memory an allocator took), the ranges are a directory by page, 4 bytes a page
// of each run: small enough to stay in the caches, where a hash's bucket was a miss a lookup.
// Pages spread apart (a hostile core) go through an open-addressing hash table (16 bytes per
// such page, at most half full).
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
  bool empty() const { return buckets_.empty() && runs_.empty(); }
  // Whether lookups go through the directory (pages close together), not the hash.
  bool by_directory() const { return !runs_.empty(); }

 private:
  static constexpr unsigned kPageBits = 12;
  // Pages of objects at most this far apart are one run of the directory.
  static constexpr uint64_t kMaxGapPages = 16;
  // The directory is kept when it has at most this many runs and twice the entries the pages
  // holding objects need (a few thousand more for a small heap).
  static constexpr size_t kMaxRuns = 64;

  struct Bucket {
    uint64_t page_plus_one = 0;  // 0: empty
    uint32_t first = 0, end = 0;
  };
  // Pages [first_page, last_page]; their ranges start at starts_[offset + page - first_page],
  // the last one's ending at the entry after it.
  struct Run {
    uint64_t first_page = 0, last_page = 0;
    size_t offset = 0;
  };
  size_t home(uint64_t page) const;
  bool build_directory(std::span<const Object> objects);
  void build_hash(std::span<const Object> objects);
  int64_t search(std::span<const Object> objects, uint32_t first, uint32_t end,
                 uint64_t addr) const;

  std::vector<Run> runs_;
  std::vector<uint32_t> starts_;
  std::vector<Bucket> buckets_;
  unsigned shift_ = 64;  // 64 - log2(buckets)
};

}  // namespace ljprof::heap
