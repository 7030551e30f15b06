// The census's list walks on a real luajit core (heap_census.lua) whose memory is altered under
// the reader: a string table chain made to loop back to its first string is cut where Brent's
// detection meets it, with the objects before the cut kept once and nothing else lost. Oracle:
// the census of the unaltered core.
#include <gtest/gtest.h>

#include "heap/heap_census.h"
#include "heap/heap_core_setup.h"

namespace ljprof {
namespace {

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
}

}  // namespace
}  // namespace ljprof
