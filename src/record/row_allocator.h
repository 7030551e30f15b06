// record/row_allocator.h: which rows of the kernel's `rows` map (bpf/abi/record_types.h) hold
// which file's unwind table. A file's rows are one contiguous range (a module names them by
// first row and count, and the kernel searches them as one sorted array), so the map is handed
// out as ranges from a free list; a range given back is first retired and becomes free only once
// the caller knows no reader can still be in it (record/unwind_rows.h waits for the BPF programs
// that may be walking with it).
//
// Allocation is best fit (the smallest free range that is long enough, the lowest of equals), and
// freed ranges merge with free neighbours, so the free list is as few ranges as the live files
// allow. Live ranges are never moved (no compaction): moving one means rewriting it elsewhere and
// republishing every process context that names it, and under churn of similar files (upgrades
// replace a binary by one of about its size) best fit leaves a hole of the right size behind.
// A request that fits in the free rows in all but in no one range is refused like a full map and
// counted apart (LJ_REC_CTR_ROWS_FRAGMENTED), which tells whether compaction would ever pay.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

namespace ljprof::record {

class RowAllocator {
 public:
  explicit RowAllocator(uint32_t capacity);

  // The first row of a free range of `count` rows now taken, or nullopt when no free range is
  // that long (count 0: nullopt too, a file always has rows).
  std::optional<uint32_t> allocate(uint32_t count);
  // Rows [first, first + count), taken by allocate, are no longer named by any published
  // context, but a reader that found them before may still be in them: they are held apart,
  // stamped with `when` (any clock the caller compares in release_retired), neither free nor
  // handed out again.
  void retire(uint32_t first, uint32_t count, uint64_t when);
  // Every range retired at or before `when` becomes free (its readers are known to be done).
  // Returns the rows freed.
  uint64_t release_retired(uint64_t when);

  uint32_t capacity() const { return capacity_; }
  // Rows taken by allocate and not yet freed (retired ones included: they cannot be reused yet).
  uint64_t in_use() const { return capacity_ - free_rows_; }
  uint64_t retired_rows() const { return retired_rows_; }
  uint64_t free_rows() const { return free_rows_; }
  uint32_t largest_free() const;
  size_t free_ranges() const { return free_.size(); }

 private:
  void free_range(uint32_t first, uint32_t count);
  uint32_t capacity_;
  uint64_t free_rows_;
  uint64_t retired_rows_ = 0;
  std::map<uint32_t, uint32_t> free_;  // first row -> count; disjoint, never adjacent
  struct Retired {
    uint32_t first = 0, count = 0;
    uint64_t when = 0;
  };
  std::vector<Retired> retired_;  // in the order retired
};

}  // namespace ljprof::record
