#include "heap/address_index.h"

#include <algorithm>
#include <bit>

namespace ljprof::heap {

size_t AddressIndex::home(uint64_t page) const {
  // Fibonacci hashing (Knuth, TAOCP 6.4): neighbouring pages spread over the table.
  return static_cast<size_t>((page * 0x9e3779b97f4a7c15ull) >> shift_);
}

AddressIndex::AddressIndex(std::span<const Object> objects) {
  if (objects.empty()) return;
  if (!build_directory(objects)) build_hash(objects);
}

bool AddressIndex::build_directory(std::span<const Object> objects) {
  // The runs first, without entries: whether the directory is worth keeping.
  size_t pages = 0;
  uint64_t previous = 0;
  for (size_t i = 0; i < objects.size(); ++i) {
    const uint64_t page = objects[i].addr() >> kPageBits;
    if (i > 0 && page == previous) continue;
    ++pages;
    if (i > 0 && page - previous <= kMaxGapPages) {
      runs_.back().last_page = page;
    } else if (runs_.size() == kMaxRuns) {
      runs_.clear();
      return false;
    } else {
      runs_.push_back({page, page, 0});
    }
    previous = page;
  }
  size_t entries = 0;
  for (Run& run : runs_) {
    run.offset = entries;
    entries += run.last_page - run.first_page + 2;  // a start per page, then the run's end
  }
  if (entries > 2 * pages + 4096) {
    runs_.clear();
    return false;
  }
  starts_.resize(entries);
  size_t i = 0;
  for (const Run& run : runs_) {
    // Each page's first object at or after it: a page without one starts where the next ends.
    for (uint64_t page = run.first_page; page <= run.last_page; ++page) {
      while (i < objects.size() && (objects[i].addr() >> kPageBits) < page) ++i;
      starts_[run.offset + (page - run.first_page)] = static_cast<uint32_t>(i);
    }
    while (i < objects.size() && (objects[i].addr() >> kPageBits) <= run.last_page) ++i;
    starts_[run.offset + (run.last_page - run.first_page + 1)] = static_cast<uint32_t>(i);
  }
  return true;
}

void AddressIndex::build_hash(std::span<const Object> objects) {
  size_t pages = 0;
  for (size_t i = 0; i < objects.size(); ++i) {
    if (i == 0 || (objects[i].addr() >> kPageBits) != (objects[i - 1].addr() >> kPageBits)) ++pages;
  }
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

int64_t AddressIndex::search(std::span<const Object> objects, uint32_t first, uint32_t end,
                             uint64_t addr) const {
  if (first >= end) return -1;
  // The page's objects are spread over it about evenly: start where the address's place in the
  // page says and step to it, through neighbouring entries of the census (one or two cache
  // lines), where a binary search over a page's dozens of objects took five or six misses. At
  // most a page's entries (no object is under 16 bytes).
  const uint64_t in_page = addr & ((uint64_t{1} << kPageBits) - 1);
  uint64_t i = first + ((in_page * (end - first)) >> kPageBits);
  if (objects[i].addr() < addr) {
    while (++i < end && objects[i].addr() < addr) {
    }
  } else {
    while (i > first && objects[i - 1].addr() >= addr) --i;
  }
  if (i >= end || objects[i].addr() != addr) return -1;
  return static_cast<int64_t>(i);
}

int64_t AddressIndex::find(std::span<const Object> objects, uint64_t addr) const {
  const uint64_t page = addr >> kPageBits;
  if (!runs_.empty()) {
    // The last run starting at or before the page.
    auto run = std::upper_bound(runs_.begin(), runs_.end(), page,
                                [](uint64_t p, const Run& r) { return p < r.first_page; });
    if (run == runs_.begin()) return -1;
    --run;
    if (page > run->last_page) return -1;
    const size_t at = run->offset + (page - run->first_page);
    return search(objects, starts_[at], starts_[at + 1], addr);
  }
  if (buckets_.empty()) return -1;
  const size_t mask = buckets_.size() - 1;
  for (size_t b = home(page);; b = (b + 1) & mask) {
    const Bucket& bucket = buckets_[b];
    if (bucket.page_plus_one == 0) return -1;
    if (bucket.page_plus_one != page + 1) continue;
    return search(objects, bucket.first, bucket.end, addr);
  }
}

}  // namespace ljprof::heap
