// The census's list walks on a real luajit core (heap_census.lua) whose memory is altered under
// the reader: a string table chain made to loop back to its first string is cut where Brent's
// detection meets it, with the objects before the cut kept once and nothing else lost. Oracle:
// the census of the unaltered core. And the string table walked on a second thread beside
// gc.root (as `ljprof heap CORE` does): the same census as one thread takes, loop and all, and
// with objects on gc.mmudata too (sorted in after the two parts are merged).
#include <gtest/gtest.h>

#include "heap/heap_census.h"
#include "heap/heap_core_setup.h"

namespace ljprof {
namespace {

void expect_same_census(const heap::Census& want, const heap::Census& got) {
  EXPECT_EQ(got.malformed, want.malformed);
  ASSERT_EQ(got.objects.size(), want.objects.size());
  for (size_t i = 0; i < want.objects.size(); ++i) {
    ASSERT_EQ(got.objects[i].addr(), want.objects[i].addr()) << "object " << i;
    ASSERT_EQ(got.objects[i].bytes, want.objects[i].bytes) << "object " << i;
    ASSERT_EQ(got.objects[i].gct, want.objects[i].gct) << "object " << i;
  }
  EXPECT_EQ(got.types, want.types);
}

TEST(HeapLists, AStringChainThatLoopsIsCutWhereItMeetsItself) {
  test::HeapCoreSetup s;
  ASSERT_NO_FATAL_FAILURE(test::open_heap_core("heap_census.lua", s));
  const heap::Memory clean(s.core->mem_reader(), s.info);
  const heap::Census& want = s.census;

  // A chain of the string table with three strings or more: first -> second -> third ...
  const uint32_t mask = clean.get<uint32_t>(s.g + s.info.g_strmask).value_or(0);
  const uint64_t table = clean.get<uint64_t>(s.g + s.info.g_strhash).value_or(0);
  uint64_t first = 0, second = 0;
  size_t length = 0;
  for (uint64_t i = 0; i <= mask && length < 3; ++i) {
    first = clean.ref(table + i * s.info.ref_size).value_or(0) & ~uint64_t{1};
    second = first != 0 ? clean.ref(first).value_or(0) : 0;
    length = 0;
    for (uint64_t o = first; o != 0 && length < 3; o = clean.ref(o).value_or(0)) ++length;
  }
  ASSERT_EQ(length, 3u) << "no chain of three strings";
  size_t chain_length = 0;
  for (uint64_t o = first; o != 0; o = clean.ref(o).value_or(0)) ++chain_length;

  // second.nextgc (GCHeader's first field) -> first: first, second, first again, then the
  // detection meets second.
  test::PatchedMemory patch{s.core->mem_reader(), {{second, first, s.info.ref_size}}};
  const heap::Memory looping(patch.reader(), s.info);
  auto cut = heap::take_census(looping, s.g);
  ASSERT_TRUE(cut.ok()) << cut.message();
  EXPECT_EQ(cut->malformed["the string table loops"], 1u);
  EXPECT_EQ(cut->malformed["object on two lists"], 1u);  // first, listed twice
  EXPECT_EQ(cut->malformed.size(), 2u);
  EXPECT_EQ(cut->objects.size(), want.objects.size() - (chain_length - 2));
  EXPECT_GE(cut->index_of(first), 0);
  EXPECT_GE(cut->index_of(second), 0);

  heap::Memory threaded(patch.reader(), s.info);
  threaded.allow_threads(true);
  auto beside = heap::take_census(threaded, s.g, 1);
  ASSERT_TRUE(beside.ok()) << beside.message();
  expect_same_census(*cut, *beside);
}

TEST(HeapLists, TheStringTableBesideGcRootGivesTheSameCensus) {
  test::HeapCoreSetup s;
  ASSERT_NO_FATAL_FAILURE(test::open_heap_core("heap_census.lua", s));
  heap::Memory threaded(s.core->mem_reader(), s.info);
  threaded.allow_threads(true);
  auto beside = heap::take_census(threaded, s.g, 1);
  ASSERT_TRUE(beside.ok()) << beside.message();
  const heap::Census& want = s.census;  // one thread
  ASSERT_GT(want.strnum, 100u);
  expect_same_census(want, *beside);
}

// g->gc.mmudata pointed at a userdata of gc.root: the list from the object after it runs along
// gc.root (its userdata listed twice) until an object that is not userdata is refused.
TEST(HeapLists, UserdataBeingFinalizedJoinTheThreadedCensusAsOneThreadListsThem) {
  test::HeapCoreSetup s;
  ASSERT_NO_FATAL_FAILURE(test::open_heap_core("heap_census.lua", s));
  uint64_t udata = 0;
  for (const heap::Object& o : s.census.objects) {
    if (o.gct == static_cast<uint8_t>(heap::Gct::Udata)) udata = o.addr();
  }
  ASSERT_NE(udata, 0u) << "no userdata in the workload's heap";
  test::PatchedMemory patch{s.core->mem_reader(),
                            {{s.g + s.info.g_gc_mmudata, udata, s.info.ref_size}}};
  const heap::Memory one(patch.reader(), s.info);
  auto want = heap::take_census(one, s.g);
  ASSERT_TRUE(want.ok()) << want.message();
  EXPECT_GE(want->malformed["object on two lists"], 1u);
  heap::Memory threaded(patch.reader(), s.info);
  threaded.allow_threads(true);
  auto got = heap::take_census(threaded, s.g, 1);
  ASSERT_TRUE(got.ok()) << got.message();
  expect_same_census(*want, *got);
}

}  // namespace
}  // namespace ljprof
