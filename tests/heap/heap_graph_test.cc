// build_graph on two threads (a core's memory allows them) against one thread, on a real luajit
// core (heap_census.lua): the same references of every object in the same order, the same roots
// and the same counts, whatever the split. And labelled_edges, which paths read an edge's kind
// from: the same targets in the same order as the graph's row, for every object and the root.
// And a path through a slot a live program emptied after the graph was read: named "[?]" there,
// never as another slot.
#include <gtest/gtest.h>

#include <set>

#include "heap/heap_census.h"
#include "heap/heap_core_setup.h"
#include "heap/heap_graph_internal.h"

namespace ljprof {
namespace {

void expect_same_graph(const heap::Graph& want, const heap::Graph& got) {
  ASSERT_EQ(got.root, want.root);
  ASSERT_EQ(got.first, want.first);
  ASSERT_EQ(got.edges.size(), want.edges.size());
  for (size_t e = 0; e < want.edges.size(); ++e) {
    ASSERT_EQ(got.edges[e], want.edges[e]) << "edge " << e;
  }
  EXPECT_EQ(got.unreadable_refs, want.unreadable_refs);
  EXPECT_EQ(got.dropped_edges, want.dropped_edges);
}

TEST(HeapGraph, TwoThreadsFollowTheSameReferencesAsOne) {
  test::HeapCoreSetup s;
  ASSERT_NO_FATAL_FAILURE(test::open_heap_core("heap_census.lua", s));
  const heap::Memory mem(s.core->mem_reader(), s.info);
  const heap::Census& census = s.census;
  ASSERT_GT(census.objects.size(), 1000u);
  const heap::Graph one = heap::build_graph(mem, census);
  ASSERT_GT(one.edges.size(), census.objects.size());

  // As `ljprof heap CORE` reads: in place, two threads from any size.
  heap::Memory threaded(s.core->mem_reader(), s.info);
  const core::CoreFile& core = *s.core;
  threaded.on_in_place([&core](uint64_t addr) {
    const core::CoreFile::InPlaceBytes run = core.in_place_at(addr);
    return heap::Memory::InPlace{run.start, run.bytes.data(), run.bytes.size()};
  });
  threaded.allow_threads(true);
  expect_same_graph(one, heap::build_graph(threaded, census, 2));
  expect_same_graph(one, heap::build_graph(threaded, census, census.objects.size()));
}

// The retained sizes summed on a second thread while the profile is built: every retainer, in
// the same order, and the same profile as on one thread.
TEST(HeapGraph, TwoThreadsFindTheSameRetainersAndProfileAsOne) {
  test::HeapCoreSetup s;
  ASSERT_NO_FATAL_FAILURE(test::open_heap_core("heap_census.lua", s));
  const heap::Memory mem(s.core->mem_reader(), s.info);
  const heap::Retainers one = heap::find_retainers(mem, s.census, 0, {}, SIZE_MAX);
  const heap::Retainers two = heap::find_retainers(mem, s.census, 0, {}, 2);
  ASSERT_GT(one.top.size(), 1000u);
  ASSERT_EQ(two.top.size(), one.top.size());
  for (size_t i = 0; i < one.top.size(); ++i) {
    const heap::Retainer &a = one.top[i], &b = two.top[i];
    ASSERT_TRUE(a.addr == b.addr && a.path == b.path && a.gct == b.gct &&
                a.retained_bytes == b.retained_bytes && a.own_bytes == b.own_bytes &&
                a.count == b.count)
        << "retainer " << i << ": " << a.path << " / " << b.path;
  }
  EXPECT_EQ(two.reachable_count, one.reachable_count);
  EXPECT_EQ(two.reachable_bytes, one.reachable_bytes);
  EXPECT_EQ(two.unreached_count, one.unreached_count);
  EXPECT_EQ(two.unreached_bytes, one.unreached_bytes);
  ASSERT_EQ(two.profile.size(), one.profile.size());
  for (size_t i = 0; i < one.profile.size(); ++i) {
    EXPECT_EQ(two.profile[i].frames, one.profile[i].frames) << "entry " << i;
    EXPECT_EQ(two.profile[i].bytes, one.profile[i].bytes) << "entry " << i;
    EXPECT_EQ(two.profile[i].count, one.profile[i].count) << "entry " << i;
  }
}

TEST(HeapGraph, LabelledEdgesAreTheGraphsRowsInOrder) {
  test::HeapCoreSetup s;
  ASSERT_NO_FATAL_FAILURE(test::open_heap_core("heap_census.lua", s));
  const heap::Memory mem(s.core->mem_reader(), s.info);
  const heap::Graph g = heap::build_graph(mem, s.census);
  std::set<heap::EdgeKind> kinds;
  for (uint32_t v = 0; v <= g.root; ++v) {
    const std::vector<heap::Edge> labelled = heap::labelled_edges(mem, s.census, v);
    ASSERT_EQ(labelled.size(), g.first[v + 1] - g.first[v]) << "node " << v;
    for (size_t k = 0; k < labelled.size(); ++k) {
      ASSERT_EQ(labelled[k].to, g.edges[g.first[v] + k]) << "node " << v << " edge " << k;
      kinds.insert(labelled[k].kind);
    }
  }
  // The workload holds tables, closures, upvalues, a suspended coroutine: most kinds occur.
  for (heap::EdgeKind k :
       {heap::EdgeKind::RootGlobals, heap::EdgeKind::ArraySlot, heap::EdgeKind::HashValue,
        heap::EdgeKind::Upvalue, heap::EdgeKind::StackSlot, heap::EdgeKind::Prototype}) {
    EXPECT_TRUE(kinds.count(k)) << "kind " << static_cast<int>(k);
  }
}

TEST(HeapGraph, APathThroughASlotEmptiedSinceTheGraphSaysSo) {
  test::HeapCoreSetup s;
  ASSERT_NO_FATAL_FAILURE(test::open_heap_core("heap_census.lua", s));
  const heap::Memory mem(s.core->mem_reader(), s.info);
  const heap::Graph g = heap::build_graph(mem, s.census);
  const heap::PathNamer namer(mem, s.census, g, {});
  // An object reached through an array slot of a table: the first edge of its tree parent's row
  // that leads to it is that slot.
  uint32_t v = 0, parent = 0;
  heap::Edge slot;
  for (uint32_t w = 0; w < g.root && slot.kind != heap::EdgeKind::ArraySlot; ++w) {
    parent = namer.parent(w);
    if (parent == heap::kUnreached || parent == g.root) continue;
    for (const heap::Edge& e : heap::labelled_edges(mem, s.census, parent)) {
      if (e.to != w) continue;
      if (e.kind == heap::EdgeKind::ArraySlot) slot = e;
      break;
    }
    v = w;
  }
  ASSERT_EQ(slot.kind, heap::EdgeKind::ArraySlot) << "no object held by an array slot";
  const std::string before = namer.path(v);
  const std::string index = "[" + std::to_string(slot.aux) + "]";
  ASSERT_EQ(before.substr(before.size() - index.size()), index) << before;

  // The slot now nil (all ones is nil with GC64 and without: its high word is LJ_TNIL).
  const uint64_t array = mem.ref(s.census.objects[parent].addr() + s.info.tab_array).value_or(0);
  ASSERT_NE(array, 0u);
  test::PatchedMemory patch{s.core->mem_reader(), {{array + 8 * slot.aux, ~uint64_t{0}, 8}}};
  const heap::Memory changed(patch.reader(), s.info);
  const heap::PathNamer renamed(changed, s.census, g, {});
  const std::string after = renamed.path(v);
  EXPECT_EQ(after, before.substr(0, before.size() - index.size()) + "[?]");
  EXPECT_EQ(renamed.step(v), "[?]") << before << " -> " << after;
}

}  // namespace
}  // namespace ljprof
