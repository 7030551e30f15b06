// dominators (heap/heap_graph_internal.h): the Semi-NCA algorithm (Georgiadis, "Linear-Time
// Algorithms for Dominators and Related Problems", 2005, ch. 3; as LLVM's SemiNCAInfo runs it):
// semidominators as Lengauer and Tarjan compute them (path compression over the DFS tree, no
// balancing), then each immediate dominator as the nearest common ancestor of the DFS parent and
// the semidominator. Everything is indexed by DFS preorder number, so the arrays are read in
// order and there are no buckets: seven 32-bit arrays and the predecessors where Lengauer–Tarjan
// needed nine. The DFS and the compression are iterative, so a long chain of objects (a linked
// list of a million tables) cannot overflow the stack.
//
// Leaves (nodes with no references: every string, most cdata, tables of numbers) are left out of
// all of it, and a heap is half leaves or more: a leaf lies on no path to anything else, so the
// others' dominators do not change without it, and its own immediate dominator is the nearest
// common ancestor, in the others' tree, of the nodes that refer to it (its dominators are those
// of every predecessor: dom(w) = {w} ∪ ⋂ dom(p)). Found once the tree is built, by climbing it in
// preorder numbers (an ancestor's number is the smaller).
#include <numeric>

#include "heap/heap_graph_internal.h"

namespace ljprof::heap {

namespace {

constexpr uint32_t kNone = kUnreached;

// Preorder numbers from the root of the nodes that are not leaves (num[node], kNone when not
// reached or a leaf), those nodes by number and each number's DFS parent (the root's: itself).
struct Preorder {
  std::vector<uint32_t> num, vertex, parent;
};

Preorder depth_first(const Graph& graph) {
  Preorder p;
  p.num.assign(graph.first.size() - 1, kNone);
  std::vector<std::pair<uint32_t, uint32_t>> stack;  // node, next edge
  p.num[graph.root] = 0;
  p.vertex.push_back(graph.root);
  p.parent.push_back(0);
  stack.push_back({graph.root, graph.first[graph.root]});
  while (!stack.empty()) {
    auto& [v, e] = stack.back();
    if (e == graph.first[v + 1]) {
      stack.pop_back();
      continue;
    }
    const uint32_t w = graph.edges[e++];
    if (p.num[w] != kNone || graph.is_leaf(w)) continue;
    p.num[w] = static_cast<uint32_t>(p.vertex.size());
    p.vertex.push_back(w);
    p.parent.push_back(p.num[v]);
    stack.push_back({w, graph.first[w]});
  }
  return p;
}

// The predecessors of each reached node by number, in compressed rows: counted, summed to each
// row's end, then filled from the ends down, which leaves first[i] at row i's start.
struct Predecessors {
  std::vector<uint32_t> first, of;
};

Predecessors predecessors(const Graph& graph, const Preorder& p) {
  const size_t reached = p.vertex.size();
  Predecessors preds;
  preds.first.assign(reached + 1, 0);
  // A reached node's successor without a number is a leaf.
  for (uint32_t v : p.vertex) {
    for (uint32_t e = graph.first[v]; e < graph.first[v + 1]; ++e) {
      if (const uint32_t w = p.num[graph.edges[e]]; w != kNone) ++preds.first[w];
    }
  }
  uint32_t sum = 0;
  for (size_t i = 0; i < reached; ++i) {
    sum += preds.first[i];
    preds.first[i] = sum;
  }
  preds.first[reached] = sum;
  preds.of.resize(sum);
  for (uint32_t i = 0; i < reached; ++i) {
    const uint32_t v = p.vertex[i];
    for (uint32_t e = graph.first[v]; e < graph.first[v + 1]; ++e) {
      if (const uint32_t w = p.num[graph.edges[e]]; w != kNone) preds.of[--preds.first[w]] = i;
    }
  }
  return preds;
}

// The forest of the numbers processed so far (those >= `linked`), each linked to its DFS parent.
struct Forest {
  std::vector<uint32_t> ancestor, label;
  const std::vector<uint32_t>& semi;
  std::vector<uint32_t> path;  // eval's, kept between calls: one allocation, not one per call

  // The number of minimal semi on the path from v up to (not including) the root of its tree,
  // compressing the path to point at that root.
  uint32_t eval(uint32_t v, uint32_t linked) {
    if (ancestor[v] < linked) return label[v];
    path.clear();
    uint32_t u = v;
    do {
      path.push_back(u);
      u = ancestor[u];
    } while (ancestor[u] >= linked);
    uint32_t top = u, top_label = label[u];
    for (size_t i = path.size(); i-- > 0;) {
      const uint32_t w = path[i];
      ancestor[w] = ancestor[top];
      if (semi[top_label] < semi[label[w]]) {
        label[w] = top_label;
      } else {
        top_label = label[w];
      }
      top = w;
    }
    return label[v];
  }
};

// The nearest common ancestor of numbers a and b in the tree `idom` (by number, each below its
// own number but the root's).
uint32_t nearest_common(const std::vector<uint32_t>& idom, uint32_t a, uint32_t b) {
  while (a != b) {
    if (a > b) {
      a = idom[a];
    } else {
      b = idom[b];
    }
  }
  return a;
}

// Each reached leaf's immediate dominator into idom_by_node[leaf], as a node, from the tree of
// the others (`vertex` and `idom` by number); returns how many leaves were reached.
size_t dominate_leaves(const Graph& graph, const std::vector<uint32_t>& vertex,
                       const std::vector<uint32_t>& idom, std::vector<uint32_t>& idom_by_node) {
  // Numbers first (the climb is in numbers), nodes once every predecessor is in.
  for (uint32_t i = 0; i < vertex.size(); ++i) {
    const uint32_t v = vertex[i];
    for (uint32_t e = graph.first[v]; e < graph.first[v + 1]; ++e) {
      const uint32_t w = graph.edges[e];
      if (!graph.is_leaf(w)) continue;
      uint32_t& d = idom_by_node[w];
      d = d == kNone ? i : nearest_common(idom, d, i);
    }
  }
  size_t leaves = 0;
  for (uint32_t w = 0; w < idom_by_node.size(); ++w) {
    if (idom_by_node[w] == kNone || !graph.is_leaf(w)) continue;
    idom_by_node[w] = vertex[idom_by_node[w]];
    ++leaves;
  }
  return leaves;
}

}  // namespace

Dominators dominators(const Graph& graph) {
  Preorder p = depth_first(graph);
  const auto reached = static_cast<uint32_t>(p.vertex.size());
  const size_t nodes = p.num.size();
  std::vector<uint32_t> idom;  // by number; the DFS parent until step 2
  {
    const Predecessors preds = predecessors(graph, p);
    std::vector<uint32_t>().swap(p.num);  // numbered now: not needed until the end, rebuilt there
    idom = p.parent;                      // copied once `num` is gone (the pass's peak)
    std::vector<uint32_t> semi(reached);
    std::iota(semi.begin(), semi.end(), 0u);
    Forest forest{std::move(p.parent), std::vector<uint32_t>(reached), semi, {}};
    std::iota(forest.label.begin(), forest.label.end(), 0u);
    // Step 1: semidominators, in reverse preorder; number i + 1 and above are linked.
    for (uint32_t i = reached; i-- > 1;) {
      semi[i] = idom[i];
      for (uint32_t k = preds.first[i]; k < preds.first[i + 1]; ++k) {
        const uint32_t u = forest.eval(preds.of[k], i + 1);
        if (semi[u] < semi[i]) semi[i] = semi[u];
      }
    }
    // Step 2: the immediate dominator is the nearest ancestor of the DFS parent numbered at
    // most the semidominator (those before i are final already).
    for (uint32_t i = 1; i < reached; ++i) {
      uint32_t d = idom[i];
      while (d > semi[i]) d = idom[d];
      idom[i] = d;
    }
  }
  // By node, allocated once the pass's own arrays are gone (they are its peak).
  Dominators out;
  out.idom.assign(nodes, kNone);
  const size_t leaves = dominate_leaves(graph, p.vertex, idom, out.idom);
  for (uint32_t i = 0; i < reached; ++i) out.idom[p.vertex[i]] = p.vertex[idom[i]];
  out.top_down = std::move(p.vertex);
  out.top_down.reserve(reached + leaves);
  for (uint32_t w = 0; w < nodes; ++w) {  // the root is first already, even without references
    if (w != graph.root && graph.is_leaf(w) && out.idom[w] != kNone) out.top_down.push_back(w);
  }
  return out;
}

}  // namespace ljprof::heap
