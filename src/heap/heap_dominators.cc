// dominators (heap/heap_graph_internal.h): Lengauer and Tarjan, "A Fast Algorithm for Finding
// Dominators in a Flowgraph" (TOPLAS 1979), the simple version (path compression without
// balancing, O(E log V)), with the DFS and the compression made iterative so a long chain of
// objects (a linked list of a million tables) cannot overflow the stack.
#include <algorithm>

#include "heap/heap_graph_internal.h"

namespace ljprof::heap {

namespace {

constexpr uint32_t kNone = kUnreached;

struct Forest {
  std::vector<uint32_t> ancestor, label;
  const std::vector<uint32_t>& semi;

  // EVAL with iterative path compression: the node of minimal semi on the path to the root of
  // v's tree in the forest.
  uint32_t eval(uint32_t v) {
    if (ancestor[v] == kNone) return v;
    std::vector<uint32_t> path;
    for (uint32_t u = v; ancestor[ancestor[u]] != kNone; u = ancestor[u]) path.push_back(u);
    for (size_t i = path.size(); i-- > 0;) {
      const uint32_t u = path[i];
      const uint32_t a = ancestor[u];
      if (semi[label[a]] < semi[label[u]]) label[u] = label[a];
      ancestor[u] = ancestor[a];
    }
    return label[v];
  }
};

}  // namespace

Dominators dominators(const Graph& graph) {
  const size_t n = graph.first.size() - 1;
  Dominators out;
  std::vector<uint32_t> semi(n, kNone), parent(n, kNone), vertex;
  vertex.reserve(n);
  // Iterative DFS from the root: semi[v] = its preorder number.
  std::vector<std::pair<uint32_t, uint32_t>> stack;  // node, next edge
  semi[graph.root] = 0;
  vertex.push_back(graph.root);
  stack.push_back({graph.root, graph.first[graph.root]});
  while (!stack.empty()) {
    auto& [v, e] = stack.back();
    if (e == graph.first[v + 1]) {
      stack.pop_back();
      continue;
    }
    const uint32_t w = graph.edges[e++].to;
    if (semi[w] != kNone) continue;
    parent[w] = v;
    semi[w] = static_cast<uint32_t>(vertex.size());
    vertex.push_back(w);
    stack.push_back({w, graph.first[w]});
  }
  // Predecessors of the reached nodes, in compressed rows: counted, summed to each row's end,
  // then filled from the ends down, which leaves pred_first[w] at row w's start.
  std::vector<uint32_t> pred_first(n + 1, 0), preds;
  for (uint32_t v = 0; v < n; ++v) {
    if (semi[v] == kNone) continue;
    for (uint32_t e = graph.first[v]; e < graph.first[v + 1]; ++e) ++pred_first[graph.edges[e].to];
  }
  uint32_t sum = 0;
  for (size_t v = 0; v < n; ++v) {
    sum += pred_first[v];
    pred_first[v] = sum;
  }
  pred_first[n] = sum;
  preds.resize(sum);
  for (uint32_t v = 0; v < n; ++v) {
    if (semi[v] == kNone) continue;
    for (uint32_t e = graph.first[v]; e < graph.first[v + 1]; ++e) {
      preds[--pred_first[graph.edges[e].to]] = v;
    }
  }
  Forest forest{std::vector<uint32_t>(n, kNone), std::vector<uint32_t>(n), semi};
  for (uint32_t v = 0; v < n; ++v) forest.label[v] = v;
  std::vector<uint32_t> idom(n, kNone);
  std::vector<uint32_t> bucket_first(n, kNone), bucket_next(n, kNone);
  for (size_t i = vertex.size(); i-- > 1;) {
    const uint32_t w = vertex[i];
    for (uint32_t p = pred_first[w]; p < pred_first[w + 1]; ++p) {
      const uint32_t u = forest.eval(preds[p]);
      if (semi[u] < semi[w]) semi[w] = semi[u];
    }
    const uint32_t s = vertex[semi[w]];
    bucket_next[w] = bucket_first[s];
    bucket_first[s] = w;
    const uint32_t pw = parent[w];
    forest.ancestor[w] = pw;  // LINK(parent(w), w)
    for (uint32_t v = bucket_first[pw]; v != kNone; v = bucket_next[v]) {
      const uint32_t u = forest.eval(v);
      idom[v] = semi[u] < semi[v] ? u : pw;
    }
    bucket_first[pw] = kNone;
  }
  for (size_t i = 1; i < vertex.size(); ++i) {
    const uint32_t w = vertex[i];
    if (idom[w] != vertex[semi[w]]) idom[w] = idom[idom[w]];
  }
  idom[graph.root] = graph.root;
  out.idom = std::move(idom);
  out.preorder = std::move(vertex);
  return out;
}

}  // namespace ljprof::heap
