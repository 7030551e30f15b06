// proc/captured_memory: the kernel's copies of a young process's objects are served exactly
// where they were copied from, a read that leaves one copy is refused (never half served), a
// newer copy of an address replaces the older, and the bound holds. Expectations follow from
// the bytes each test puts in.
#include "proc/captured_memory.h"

#include <gtest/gtest.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <numeric>
#include <vector>

namespace ljprof::record {
namespace {

std::vector<uint8_t> counting(size_t n, uint8_t first) {
  std::vector<uint8_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

TEST(CapturedMemory, ServesReadsInsideOneCopyOnly) {
  proc::CapturedMemory m;
  ASSERT_TRUE(m.add(0x1000, counting(16, 0), 1 << 20));
  ASSERT_TRUE(m.add(0x1010, counting(16, 100), 1 << 20));  // adjacent, not merged
  std::array<uint8_t, 4> out{};
  ASSERT_EQ(m.read(0x1004, out.data(), 4), 0);
  EXPECT_EQ(out, (std::array<uint8_t, 4>{4, 5, 6, 7}));
  ASSERT_EQ(m.read(0x1010, out.data(), 4), 0);
  EXPECT_EQ(out, (std::array<uint8_t, 4>{100, 101, 102, 103}));
  ASSERT_EQ(m.read(0x100c, out.data(), 4), 0);  // the last 4 bytes of the first copy
  EXPECT_EQ(out, (std::array<uint8_t, 4>{12, 13, 14, 15}));
  out = {9, 9, 9, 9};
  EXPECT_EQ(m.read(0x100e, out.data(), 4), -EFAULT);  // spans two copies
  EXPECT_EQ(out, (std::array<uint8_t, 4>{0, 0, 0, 0}));
  EXPECT_EQ(m.read(0xfff, out.data(), 2), -EFAULT);   // starts before the first
  EXPECT_EQ(m.read(0x101e, out.data(), 4), -EFAULT);  // runs past the last
  EXPECT_EQ(m.read(UINT64_MAX - 1, out.data(), 4), -EFAULT);
}

TEST(CapturedMemory, ANewerCopyReplacesTheOlderAndTheBoundHolds) {
  proc::CapturedMemory m;
  ASSERT_TRUE(m.add(0x2000, counting(32, 0), 64));
  EXPECT_EQ(m.bytes(), 32u);
  ASSERT_TRUE(m.add(0x2000, counting(8, 50), 64));  // replaces: 8 bytes kept
  EXPECT_EQ(m.bytes(), 8u);
  std::array<uint8_t, 2> out{};
  ASSERT_EQ(m.read(0x2006, out.data(), 2), 0);
  EXPECT_EQ(out, (std::array<uint8_t, 2>{56, 57}));
  EXPECT_EQ(m.read(0x2008, out.data(), 2), -EFAULT);  // the older copy's tail is gone
  ASSERT_TRUE(m.add(0x3000, counting(56, 0), 64));    // 8 + 56 = the bound
  EXPECT_FALSE(m.add(0x4000, counting(1, 0), 64));    // one byte more
  EXPECT_EQ(m.bytes(), 64u);
  EXPECT_FALSE(m.add(0x5000, {}, 64));
  m.clear();
  EXPECT_TRUE(m.empty());
  EXPECT_EQ(m.read(0x3000, out.data(), 2), -EFAULT);
}

}  // namespace
}  // namespace ljprof::record
