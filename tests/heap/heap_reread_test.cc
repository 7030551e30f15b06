// A live read races the program: an object on gc.root can be seen half-written (just allocated,
// or being swept). Simulated on a real core (heap_census.lua under Debian's luajit): a reader
// that shows one gc.root object's type tag as 0, a tag LuaJIT never writes, at its first read
// and the core's own byte after that. Oracle: the census of the unaltered core. Without a second
// look (a core's Memory) the list is cut there and every object behind it, the oldest, the
// roots among them, is missing; with one (a live read's Memory) nothing is.
#include <gtest/gtest.h>

#include "heap/heap_census.h"
#include "heap/heap_core_setup.h"

namespace ljprof {
namespace {

// Reads through `inner`, except that the one-byte read of `at` shows 0 while `faults` last.
struct FlakyMemory {
  ljprof_mem_reader inner;
  uint64_t at = 0;
  int faults = 0;
};

int flaky_read(void* ctx, uint64_t addr, void* out, uint32_t len) {
  auto* f = static_cast<FlakyMemory*>(ctx);
  const int rc = f->inner.read_mem(f->inner.ctx, addr, out, len);
  if (rc == 0 && len == 1 && addr == f->at && f->faults > 0) {
    --f->faults;
    *static_cast<uint8_t*>(out) = 0;
  }
  return rc;
}

TEST(HeapReread, AnObjectHalfWrittenAtTheFirstReadIsReadAgain) {
  test::HeapCoreSetup s;
  ASSERT_NO_FATAL_FAILURE(test::open_heap_core("heap_census.lua", s));
  const uint64_t g = s.g;
  const lj_luajit_info* info = &s.info;
  const core::CoreFile* core = &*s.core;
  const heap::Memory clean(core->mem_reader(), *info);
  const heap::Census& want = s.census;
  // The tenth object of gc.root (GCHeader.nextgc is every object's first field): young, with
  // thousands of older objects behind it.
  uint64_t victim = clean.ref(g + info->g_gc_root).value_or(0);
  for (int i = 0; i < 10 && victim != 0; ++i) victim = clean.ref(victim).value_or(0);
  ASSERT_NE(victim, 0u);

  FlakyMemory flaky{core->mem_reader(), victim + info->gc_gct, 1};
  heap::Memory racing({flaky_read, &flaky}, *info);
  auto cut = heap::take_census(racing, g);
  ASSERT_TRUE(cut.ok()) << cut.message();
  EXPECT_LT(cut->objects.size() + 1000, want.objects.size());
  EXPECT_EQ(cut->malformed["type tag not allowed on gc.root"], 1u);

  flaky.faults = 1;
  int rereads = 0;
  racing.on_reread([&rereads](uint64_t, uint64_t) { return ++rereads > 0; });
  auto whole = heap::take_census(racing, g);
  ASSERT_TRUE(whole.ok()) << whole.message();
  EXPECT_EQ(whole->objects.size(), want.objects.size());
  EXPECT_TRUE(whole->malformed.empty());
  EXPECT_EQ(whole->reread_objects, 1u);
  EXPECT_EQ(rereads, 1);
}

// The collector unlinked and freed an object while the list was read: the link read a moment
// before leads to memory that is no object any more, however often it is read again. Simulated:
// the tenth gc.root object's nextgc shows another object, whose type tag shows 0, until that
// nextgc is read again. The walk reads the link again and goes on; a core's cannot.
TEST(HeapReread, ALinkToAnObjectFreedMeanwhileIsReadAgain) {
  test::HeapCoreSetup s;
  ASSERT_NO_FATAL_FAILURE(test::open_heap_core("heap_census.lua", s));
  const heap::Memory clean(s.core->mem_reader(), s.info);
  const heap::Census& want = s.census;
  uint64_t prev = clean.ref(s.g + s.info.g_gc_root).value_or(0);
  for (int i = 0; i < 10 && prev != 0; ++i) prev = clean.ref(prev).value_or(0);
  ASSERT_NE(prev, 0u);
  // Somewhere else in the heap: an object far down the list.
  const uint64_t freed = want.objects[want.objects.size() / 2].addr();

  test::PatchedMemory u{s.core->mem_reader(),
                        {{prev, freed, s.info.ref_size}, {freed + s.info.gc_gct, 0, 1}}};
  heap::Memory core_like(u.reader(), s.info);
  auto cut = heap::take_census(core_like, s.g);
  ASSERT_TRUE(cut.ok()) << cut.message();
  EXPECT_LT(cut->objects.size() + 1000, want.objects.size());

  heap::Memory live_like(u.reader(), s.info);
  live_like.on_reread([&u, prev](uint64_t addr, uint64_t) {
    if (addr == prev) u.on = false;
    return true;
  });
  auto whole = heap::take_census(live_like, s.g);
  ASSERT_TRUE(whole.ok()) << whole.message();
  EXPECT_EQ(whole->objects.size(), want.objects.size());
  EXPECT_TRUE(whole->malformed.empty()) << whole->malformed.begin()->first;
  EXPECT_EQ(whole->reread_objects, 1u);
}

}  // namespace
}  // namespace ljprof
