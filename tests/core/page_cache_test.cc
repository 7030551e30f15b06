// CoreFile::cache_pages on a live process (this test's own memory through /proc/PID/mem): reads
// through the cache equal the memory as of each page's first read, starting over reuses the
// cache's slots without mixing pages, a forgotten page is read again, and a full cache that does
// not start over reads through. Oracle: the bytes this test wrote.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "core/core_file.h"

namespace ljprof {
namespace {

constexpr size_t kPage = 4096;
constexpr size_t kPages = 8;

struct Pages {
  alignas(kPage) uint8_t bytes[kPages * kPage];
  uint64_t page(size_t i) const { return reinterpret_cast<uint64_t>(bytes + i * kPage); }
  void fill(size_t i, uint8_t value) { std::memset(bytes + i * kPage, value, kPage); }
};

// The 16 bytes at `offset` of page `i` as the core reads them, all equal to one value or -1.
int read_value(const core::CoreFile& core, const Pages& p, size_t i, size_t offset = 100) {
  ljprof_mem_reader mem = core.mem_reader();
  uint8_t got[16];
  if (mem.read_mem(mem.ctx, p.page(i) + offset, got, sizeof got) != 0) return -1;
  for (uint8_t b : got) {
    if (b != got[0]) return -1;
  }
  return got[0];
}

TEST(PageCache, StartingOverReusesItsSlotsAndKeepsEachPageAsFirstRead) {
  static Pages p;
  for (size_t i = 0; i < kPages; ++i) p.fill(i, static_cast<uint8_t>(10 + i));
  auto core = core::CoreFile::from_process(static_cast<uint32_t>(::getpid()));
  ASSERT_TRUE(core.ok()) << core.message();
  core->cache_pages(true, 3, true);
  for (int round = 0; round < 2; ++round) {
    for (size_t i = 0; i < kPages; ++i)
      ASSERT_EQ(read_value(*core, p, i), 10 + static_cast<int>(i)) << i;
  }
  // Page 7 is cached now (the last start-over was at page 6): the change is not seen until the
  // page is forgotten.
  p.fill(7, 77);
  EXPECT_EQ(read_value(*core, p, 7, 200), 17);
  core->forget_cached_pages(p.page(7) + 5, 1);
  EXPECT_EQ(read_value(*core, p, 7, 300), 77);
  // Pages cached before a start-over are read again after it.
  p.fill(0, 50);
  EXPECT_EQ(read_value(*core, p, 0), 50);
  core->cache_pages(false);
}

TEST(PageCache, AFullCacheThatDoesNotStartOverReadsThrough) {
  static Pages p;
  for (size_t i = 0; i < kPages; ++i) p.fill(i, static_cast<uint8_t>(20 + i));
  auto core = core::CoreFile::from_process(static_cast<uint32_t>(::getpid()));
  ASSERT_TRUE(core.ok()) << core.message();
  core->cache_pages(true, 2, false);
  for (size_t i = 0; i < kPages; ++i)
    ASSERT_EQ(read_value(*core, p, i), 20 + static_cast<int>(i)) << i;
  p.fill(0, 60);
  p.fill(5, 65);
  EXPECT_EQ(read_value(*core, p, 0), 20);  // cached
  EXPECT_EQ(read_value(*core, p, 5), 65);  // read through
  core->cache_pages(true, 0, true);        // no room at all: every read goes through
  p.fill(1, 61);
  EXPECT_EQ(read_value(*core, p, 1), 61);
  EXPECT_EQ(read_value(*core, p, 1), 61);
  core->cache_pages(false);
}

}  // namespace
}  // namespace ljprof
