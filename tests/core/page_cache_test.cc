// CoreFile::cache_pages on a live process (this test's own memory through /proc/PID/mem): reads
// through the cache equal the memory as of each page's first read, starting over reuses the
// cache's slots without mixing pages, a forgotten page is read again, and a full cache that does
// not start over reads through. Oracle: the bytes this test wrote.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <optional>
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

// This test process, read as a live process, once `p`'s pages are filled with base, base + 1,
// ...; nothing (a failure said) when it cannot be opened.
std::optional<core::CoreFile> own_memory(Pages& p, int base) {
  for (size_t i = 0; i < kPages; ++i) p.fill(i, static_cast<uint8_t>(base + static_cast<int>(i)));
  auto core = core::CoreFile::from_process(static_cast<uint32_t>(::getpid()));
  if (!core.ok()) {
    ADD_FAILURE() << core.message();
    return std::nullopt;
  }
  return std::move(*core);
}

TEST(PageCache, StartingOverReusesItsSlotsAndKeepsEachPageAsFirstRead) {
  static Pages p;
  const std::optional<core::CoreFile> core = own_memory(p, 10);
  ASSERT_TRUE(core);
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
  const std::optional<core::CoreFile> core = own_memory(p, 20);
  ASSERT_TRUE(core);
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

TEST(PageCache, ReadsAheadWhenAWalkGoesPageAfterPageUpOrDown) {
  static Pages p;
  const std::optional<core::CoreFile> core = own_memory(p, 30);
  ASSERT_TRUE(core);
  // Up: pages 0 and 1 missed one after the other, so 1..4 come in one read; a change to page 3
  // after that is not seen (its copy is from that read), one to page 5 is.
  core->cache_pages(true, 64, true, 4);
  EXPECT_EQ(read_value(*core, p, 0), 30);
  EXPECT_EQ(read_value(*core, p, 1), 31);
  p.fill(3, 93);
  p.fill(5, 95);
  EXPECT_EQ(read_value(*core, p, 3), 33);
  EXPECT_EQ(read_value(*core, p, 5), 95);
  // Down: pages 7 and 6, so 3..6 come in one read; page 2, after them, is read alone.
  core->cache_pages(true, 64, true, 4);
  for (size_t i = 0; i < kPages; ++i) p.fill(i, static_cast<uint8_t>(40 + i));
  EXPECT_EQ(read_value(*core, p, 7), 47);
  EXPECT_EQ(read_value(*core, p, 6), 46);
  p.fill(4, 84);
  EXPECT_EQ(read_value(*core, p, 4), 44);
  EXPECT_EQ(read_value(*core, p, 2), 42);
  core->cache_pages(false);
}

TEST(PageCache, AReadAheadIntoUnmappedMemoryFallsBackToThePage) {
  // Three pages mapped, the third unmapped again: a walk up pages 0 and 1 reads ahead into the
  // hole, which fails, so page 1 is read alone.
  auto* m = static_cast<uint8_t*>(
      ::mmap(nullptr, 3 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(m, MAP_FAILED);
  ASSERT_EQ(::munmap(m + 2 * kPage, kPage), 0);
  std::memset(m, 1, kPage);
  std::memset(m + kPage, 2, kPage);
  auto core = core::CoreFile::from_process(static_cast<uint32_t>(::getpid()));
  ASSERT_TRUE(core.ok()) << core.message();
  core->cache_pages(true, 64, true, 8);
  ljprof_mem_reader mem = core->mem_reader();
  uint8_t got[2] = {};
  ASSERT_EQ(mem.read_mem(mem.ctx, reinterpret_cast<uint64_t>(m) + 10, &got[0], 1), 0);
  ASSERT_EQ(mem.read_mem(mem.ctx, reinterpret_cast<uint64_t>(m) + kPage + 10, &got[1], 1), 0);
  EXPECT_EQ(got[0], 1);
  EXPECT_EQ(got[1], 2);
  EXPECT_NE(mem.read_mem(mem.ctx, reinterpret_cast<uint64_t>(m) + 2 * kPage, &got[0], 1), 0);
  core->cache_pages(false);
  ::munmap(m, 2 * kPage);
}

}  // namespace
}  // namespace ljprof
