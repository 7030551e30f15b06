// The recorder's row allocator (record/row_allocator.h): ranges of the kernel's row map handed
// out best fit, given back through retirement, merged with free neighbours; every expectation
// follows from the ranges the test itself takes and gives back.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <vector>

#include "record/row_allocator.h"

namespace ljprof::record {
namespace {

TEST(RowAllocator, TakesTheWholeMapAndNothingMore) {
  RowAllocator rows(100);
  EXPECT_EQ(rows.allocate(0), std::nullopt);
  EXPECT_EQ(rows.allocate(101), std::nullopt);
  EXPECT_EQ(rows.allocate(100), 0u);
  EXPECT_EQ(rows.in_use(), 100u);
  EXPECT_EQ(rows.free_rows(), 0u);
  EXPECT_EQ(rows.free_ranges(), 0u);
  EXPECT_EQ(rows.allocate(1), std::nullopt);
}

TEST(RowAllocator, RetiredRowsAreReusedOnlyOnceReleased) {
  RowAllocator rows(100);
  ASSERT_EQ(rows.allocate(60), 0u);
  ASSERT_EQ(rows.allocate(40), 60u);
  rows.retire(0, 60, /*when=*/5);
  EXPECT_EQ(rows.in_use(), 100u);  // retired rows cannot be handed out yet
  EXPECT_EQ(rows.retired_rows(), 60u);
  EXPECT_EQ(rows.allocate(10), std::nullopt);
  rows.retire(60, 40, /*when=*/10);
  EXPECT_EQ(rows.release_retired(7), 60u);  // the one retired by 7
  EXPECT_EQ(rows.retired_rows(), 40u);
  EXPECT_EQ(rows.in_use(), 40u);
  EXPECT_EQ(rows.allocate(60), 0u);
  EXPECT_EQ(rows.release_retired(10), 40u);
  EXPECT_EQ(rows.allocate(40), 60u);
}

TEST(RowAllocator, FreedNeighboursMergeIntoOneRange) {
  RowAllocator rows(100);
  std::vector<uint32_t> at;
  for (int i = 0; i < 4; ++i) at.push_back(*rows.allocate(25));
  EXPECT_EQ(at, (std::vector<uint32_t>{0, 25, 50, 75}));
  rows.retire(50, 25, 0);  // the third, then the second: one range [25, 75)
  rows.retire(25, 25, 0);
  rows.release_retired(0);
  EXPECT_EQ(rows.free_ranges(), 1u);
  EXPECT_EQ(rows.largest_free(), 50u);
  rows.retire(0, 25, 0);  // merges with the range after it
  rows.release_retired(0);
  EXPECT_EQ(rows.free_ranges(), 1u);
  EXPECT_EQ(rows.largest_free(), 75u);
  rows.retire(75, 25, 0);  // merges with the range before it
  rows.release_retired(0);
  EXPECT_EQ(rows.free_ranges(), 1u);
  EXPECT_EQ(rows.largest_free(), 100u);
  EXPECT_EQ(rows.in_use(), 0u);
  EXPECT_EQ(rows.allocate(100), 0u);
}

TEST(RowAllocator, TheSmallestRangeThatFitsIsTaken) {
  RowAllocator rows(100);
  ASSERT_EQ(rows.allocate(30), 0u);
  ASSERT_EQ(rows.allocate(20), 30u);
  ASSERT_EQ(rows.allocate(30), 50u);
  ASSERT_EQ(rows.allocate(20), 80u);
  rows.retire(0, 30, 0);
  rows.retire(30 + 20 + 30, 20, 0);  // [80, 100)
  rows.retire(30, 20, 0);            // [30, 50): merges with [0, 30) into [0, 50)
  rows.release_retired(0);
  EXPECT_EQ(rows.free_ranges(), 2u);
  // 20 rows: [80, 100) fits exactly, [0, 50) would leave a hole.
  EXPECT_EQ(rows.allocate(20), 80u);
  EXPECT_EQ(rows.allocate(15), 0u);
  EXPECT_EQ(rows.allocate(35), 15u);
  EXPECT_EQ(rows.free_rows(), 0u);
}

TEST(RowAllocator, FreeRowsSplitIntoShortRangesDoNotMakeALongOne) {
  RowAllocator rows(100);
  for (uint32_t i = 0; i < 10; ++i) ASSERT_EQ(rows.allocate(10), i * 10);
  for (uint32_t i = 0; i < 10; i += 2) rows.retire(i * 10, 10, 0);
  rows.release_retired(0);
  EXPECT_EQ(rows.free_rows(), 50u);
  EXPECT_EQ(rows.free_ranges(), 5u);
  EXPECT_EQ(rows.largest_free(), 10u);
  EXPECT_EQ(rows.allocate(20), std::nullopt);  // no compaction
  EXPECT_EQ(rows.allocate(10), 0u);
}

// Random takes and gives back of random sizes: every range taken lies inside the map on rows no
// other range holds, the counts agree with the rows the test holds, and once everything is given
// back the map is one free range again.
TEST(RowAllocator, RandomChurnNeverHandsOutARowTwice) {
  constexpr uint32_t kCapacity = 5000;
  RowAllocator rows(kCapacity);
  std::vector<int> owner(kCapacity, -1);
  std::map<int, std::pair<uint32_t, uint32_t>> held;  // id -> (first, count)
  std::mt19937 random(12345);
  uint64_t when = 0;
  int next_id = 0, refused = 0;
  for (int step = 0; step < 20000; ++step) {
    ++when;
    const bool take = held.empty() || random() % 3 != 0;
    if (take) {
      const uint32_t count = 1 + random() % 400;
      const std::optional<uint32_t> first = rows.allocate(count);
      if (!first) {
        ++refused;
        EXPECT_LT(rows.largest_free(), count);
        continue;
      }
      ASSERT_LE(*first + count, kCapacity);
      for (uint32_t r = *first; r < *first + count; ++r) {
        ASSERT_EQ(owner[r], -1) << "row " << r << " handed out twice";
        owner[r] = next_id;
      }
      held[next_id++] = {*first, count};
    } else {
      auto it = std::next(held.begin(), static_cast<long>(random() % held.size()));
      const auto [first, count] = it->second;
      rows.retire(first, count, when);
      for (uint32_t r = first; r < first + count; ++r) owner[r] = -1;
      held.erase(it);
      if (random() % 2 == 0) rows.release_retired(when);
    }
    uint64_t owned = 0;
    for (const auto& [id, range] : held) owned += range.second;
    ASSERT_EQ(rows.in_use(), owned + rows.retired_rows());
  }
  EXPECT_GT(refused, 0) << "the map never filled: the test sizes are wrong";
  for (const auto& [id, range] : held) rows.retire(range.first, range.second, when);
  rows.release_retired(when);
  EXPECT_EQ(rows.in_use(), 0u);
  EXPECT_EQ(rows.free_ranges(), 1u);
  EXPECT_EQ(rows.largest_free(), kCapacity);
}

}  // namespace
}  // namespace ljprof::record
