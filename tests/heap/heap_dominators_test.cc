// heap's dominators (Semi-NCA) against the definition on random graphs: d dominates v when every
// path from the root to v passes through d, so v cannot be reached once d is taken out; v's
// immediate dominator is the strict dominator that every other strict dominator dominates. The
// graphs are shaped like heaps at small scale: sparse references, cycles, self references,
// objects nothing reaches, long chains, and many leaves (the pass leaves them out and places them
// after: random graphs this sparse have plenty).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "heap/heap_graph_internal.h"

namespace ljprof::heap {
namespace {

using Adjacency = std::vector<std::vector<uint32_t>>;  // node -> successors; the root last

Graph graph_of(const Adjacency& adj) {
  Graph g;
  g.root = static_cast<uint32_t>(adj.size() - 1);
  for (const auto& out : adj) {
    g.first.push_back(static_cast<uint32_t>(g.edges.size()));
    for (uint32_t w : out) g.edges.push_back(w);
  }
  g.first.push_back(static_cast<uint32_t>(g.edges.size()));
  return g;
}

// Whether `target` is reached from the root without passing through `removed`.
bool reached_without(const Adjacency& adj, uint32_t target, uint32_t removed) {
  const auto root = static_cast<uint32_t>(adj.size() - 1);
  if (removed == root) return target == root;
  std::vector<bool> seen(adj.size());
  std::vector<uint32_t> todo{root};
  seen[root] = true;
  while (!todo.empty()) {
    const uint32_t v = todo.back();
    todo.pop_back();
    if (v == target) return true;
    for (uint32_t w : adj[v]) {
      if (w != removed && !seen[w]) {
        seen[w] = true;
        todo.push_back(w);
      }
    }
  }
  return false;
}

std::vector<uint32_t> definition_idoms(const Adjacency& adj) {
  const auto n = static_cast<uint32_t>(adj.size());
  const uint32_t root = n - 1;
  const uint32_t none = kUnreached;
  std::vector<std::vector<bool>> dom(n, std::vector<bool>(n));  // dom[v][d]: d strictly dominates v
  std::vector<bool> reached(n);
  for (uint32_t v = 0; v < n; ++v) reached[v] = reached_without(adj, v, none);
  for (uint32_t v = 0; v < n; ++v) {
    for (uint32_t d = 0; d < n && reached[v]; ++d) {
      dom[v][d] = d != v && !reached_without(adj, v, d);
    }
  }
  std::vector<uint32_t> idom(n, none);
  idom[root] = root;
  for (uint32_t v = 0; v < n; ++v) {
    if (!reached[v] || v == root) continue;
    for (uint32_t d = 0; d < n; ++d) {
      if (!dom[v][d]) continue;
      bool dominated_by_all_others = true;
      for (uint32_t o = 0; o < n; ++o) {
        if (o != d && dom[v][o] && !dom[d][o]) dominated_by_all_others = false;
      }
      if (dominated_by_all_others) idom[v] = d;
    }
  }
  return idom;
}

Adjacency random_graph(std::mt19937& rng, uint32_t n, double edges_per_node) {
  Adjacency adj(n + 1);
  std::uniform_int_distribution<uint32_t> node(0, n - 1), from(0, n);  // n: the root
  const auto edges = static_cast<uint32_t>(edges_per_node * n);
  for (uint32_t i = 0; i < edges; ++i) adj[from(rng)].push_back(node(rng));
  for (uint32_t i = 0; i < 1 + n / 10; ++i) adj[n].push_back(node(rng));  // the roots
  return adj;
}

TEST(HeapDominators, EqualTheDefinitionOnRandomHeapShapedGraphs) {
  std::mt19937 rng(7);
  for (int round = 0; round < 150; ++round) {
    const uint32_t n = 2 + rng() % 60;
    const Adjacency adj = random_graph(rng, n, 0.5 + (rng() % 30) / 10.0);
    const Dominators d = dominators(graph_of(adj));
    ASSERT_EQ(d.idom, definition_idoms(adj)) << "round " << round;
    // Every reached node once, after its immediate dominator (the retained sizes sum up it).
    ASSERT_EQ(d.top_down.front(), n);
    std::vector<int> at(n + 1, -1);
    for (size_t i = 0; i < d.top_down.size(); ++i) {
      const uint32_t v = d.top_down[i];
      ASSERT_NE(d.idom[v], kUnreached);
      ASSERT_EQ(at[v], -1) << "node " << v << " twice, round " << round;
      at[v] = static_cast<int>(i);
      if (v != n) {
        ASSERT_NE(at[d.idom[v]], -1) << "node " << v << " before its dominator";
      }
    }
    ASSERT_EQ(static_cast<size_t>(std::count_if(d.idom.begin(), d.idom.end(),
                                                [](uint32_t i) { return i != kUnreached; })),
              d.top_down.size());
  }
}

TEST(HeapDominators, ARootWithoutReferencesReachesOnlyItself) {
  const Adjacency adj(4);  // three objects and the root, no references at all
  const Dominators d = dominators(graph_of(adj));
  EXPECT_EQ(d.top_down, std::vector<uint32_t>{3});
  EXPECT_EQ(d.idom, (std::vector<uint32_t>{kUnreached, kUnreached, kUnreached, 3}));
}

TEST(HeapDominators, ALongChainIsWalkedWithoutRecursion) {
  const uint32_t n = 1u << 20;
  Adjacency adj(n + 1);
  for (uint32_t v = 0; v + 1 < n; ++v) adj[v].push_back(v + 1);
  adj[n].push_back(0);
  adj[n - 1].push_back(0);  // back to the head: a cycle
  const Dominators d = dominators(graph_of(adj));
  ASSERT_EQ(d.top_down.size(), n + 1);
  EXPECT_EQ(d.idom[0], n);
  for (uint32_t v = 1; v < n; ++v) ASSERT_EQ(d.idom[v], v - 1);
}

}  // namespace
}  // namespace ljprof::heap
