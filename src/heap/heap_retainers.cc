// find_retainers (heap/heap_graph.h): the graph, its dominators, each object's retained size, the
// biggest retainers with their paths, and the memory profile by dominator chain.
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <unordered_map>
#include <vector>

#include "heap/heap_graph.h"
#include "heap/heap_graph_internal.h"

namespace ljprof::heap {

namespace {

constexpr size_t kMaxFrames = 48;  // frames of one memory-profile stack

// A memory profile as it is built: stacks of frames (each a parent stack and a frame name; 0 is
// the root, no frame) and groups of objects (a stack, or a stack and a type) with their bytes
// and counts. Each asks the last one asked for first: objects come in runs (a big table's
// entries are one frame under one stack, a million times in a row), and a hash lookup per
// object was most of the pass.
class ProfileBuilder {
 public:
  uint32_t depth(uint32_t stack) const { return stacks_[stack].depth; }

  // The stack of frame `name` under stack `up`.
  uint32_t stack(uint32_t up, std::string name) {
    if (names_.empty() || name != last_name_) {
      auto [it, fresh] = name_ids_.try_emplace(name, names_.size());
      if (fresh) names_.push_back(name);
      last_name_ = std::move(name);
      last_name_id_ = it->second;
    }
    const uint64_t key = (uint64_t{up} << 32) | last_name_id_;
    if (key != last_stack_key_) {
      auto [id, fresh] = stack_ids_.try_emplace(key, stacks_.size());
      if (fresh) stacks_.push_back({up, last_name_id_, stacks_[up].depth + 1});
      last_stack_key_ = key;
      last_stack_ = id->second;
    }
    return last_stack_;
  }

  // One object of `bytes` in the group of `stack` (and of type `gct`, when not 0).
  void add(uint32_t stack, uint8_t gct, uint64_t bytes) {
    const uint64_t key = (uint64_t{stack} << 8) | gct;
    if (key != last_key_) {
      auto [it, fresh] = groups_.try_emplace(key, 0, 0);
      if (fresh) order_.push_back(key);
      last_key_ = key;
      last_group_ = &it->second;  // an unordered_map's elements stay put
    }
    last_group_->first += bytes;
    last_group_->second += 1;
  }

  // The groups in the order they came, each its frames root first.
  std::vector<ProfileEntry> entries() const {
    std::vector<ProfileEntry> out;
    for (uint64_t key : order_) {
      ProfileEntry e;
      const auto& [bytes, count] = groups_.at(key);
      e.bytes = bytes;
      e.count = count;
      if ((key & 0xff) != 0) e.frames.push_back(fmt::format("({})", gct_name(key & 0xff)));
      for (uint32_t s = static_cast<uint32_t>(key >> 8); s != 0; s = stacks_[s].parent) {
        e.frames.push_back(names_[stacks_[s].frame]);
      }
      std::reverse(e.frames.begin(), e.frames.end());
      out.push_back(std::move(e));
    }
    return out;
  }

 private:
  struct Stack {
    uint32_t parent = 0, frame = 0, depth = 0;
  };
  std::vector<Stack> stacks_ = std::vector<Stack>(1);
  std::vector<std::string> names_;
  std::unordered_map<std::string, uint32_t> name_ids_;
  std::unordered_map<uint64_t, uint32_t> stack_ids_;
  std::unordered_map<uint64_t, std::pair<uint64_t, uint64_t>> groups_;  // bytes, objects
  std::vector<uint64_t> order_;
  std::string last_name_;
  uint32_t last_name_id_ = 0;
  uint64_t last_stack_key_ = UINT64_MAX;
  uint32_t last_stack_ = 0;
  uint64_t last_key_ = UINT64_MAX;
  std::pair<uint64_t, uint64_t>* last_group_ = nullptr;
};

// The memory profile: objects grouped by their chain of dominators, each dominator named by
// the step that reaches it (PathNamer::frame: table slots of arrays and big maps as "[*]"), so
// equal chains are one stack; an object that dominates nothing else is grouped under its
// dominator by type, so a table of a million strings is one frame "(string)". Stacks stop
// growing at kMaxFrames.
std::vector<ProfileEntry> profile_entries(const PathNamer& namer, const Census& census,
                                          uint32_t root, const Dominators& dom,
                                          const std::vector<bool>& dominates) {
  ProfileBuilder profile;
  std::vector<uint32_t> stack_of(census.objects.size() + 1, 0);
  for (uint32_t v : dom.top_down) {
    if (v == root) continue;
    const uint32_t up = stack_of[dom.idom[v]];
    const Object& o = census.objects[v];
    if (!dominates[v]) {
      profile.add(up, o.gct, o.bytes);
      continue;
    }
    stack_of[v] = profile.depth(up) + 1 >= kMaxFrames ? up : profile.stack(up, namer.frame(v));
    profile.add(stack_of[v], 0, o.bytes);
  }
  return profile.entries();
}

struct Pick {
  uint32_t v = 0;
  uint64_t retained = 0;
  uint32_t count = 0;
};

// Per node, `own(v)` of each reached object summed up the dominator tree: its own and that of
// everything it dominates.
template <typename T, typename Own>
std::vector<T> sum_up_dominators(const Dominators& dom, uint32_t root, Own own) {
  std::vector<T> sum(dom.idom.size(), 0);
  for (uint32_t v : dom.top_down) {
    if (v != root) sum[v] = own(v);
  }
  // A dominator precedes what it dominates in top_down: sum in reverse.
  for (size_t i = dom.top_down.size(); i-- > 1;) {
    const uint32_t v = dom.top_down[i];
    sum[dom.idom[v]] += sum[v];
  }
  return sum;
}

// The `top` objects retaining the most bytes (0: all), most first, and the reached and
// unreached totals into `out`; `dominates[v]`: v is some reached object's immediate dominator.
// Retained bytes, then objects, summed one after the other (never both arrays at once).
std::vector<Pick> pick_retainers(const Census& census, const Dominators& dom, uint32_t root,
                                 size_t top, Retainers& out, std::vector<bool>& dominates) {
  const size_t n = census.objects.size();
  dominates.assign(n + 1, false);
  for (uint32_t v : dom.top_down) {
    if (v == root) continue;
    dominates[dom.idom[v]] = true;
    ++out.reachable_count;
    out.reachable_bytes += census.objects[v].bytes;
  }
  out.unreached_count = n - out.reachable_count;
  out.unreached_bytes = census.object_bytes() - out.reachable_bytes;
  std::vector<Pick> picks;
  {
    const std::vector<uint64_t> retained = sum_up_dominators<uint64_t>(
        dom, root, [&](uint32_t v) { return uint64_t{census.objects[v].bytes}; });
    const auto better = [&](uint32_t a, uint32_t b) {
      return retained[a] != retained[b] ? retained[a] > retained[b] : a < b;
    };
    // With a `top`, a heap of the best so far whose front is the worst of them.
    std::vector<uint32_t> best;
    for (uint32_t v : dom.top_down) {
      if (v == root) continue;
      if (top == 0 || best.size() < top) {
        best.push_back(v);
        if (top != 0) std::push_heap(best.begin(), best.end(), better);
      } else if (better(v, best.front())) {
        std::pop_heap(best.begin(), best.end(), better);
        best.back() = v;
        std::push_heap(best.begin(), best.end(), better);
      }
    }
    if (top == 0) {
      std::sort(best.begin(), best.end(), better);
    } else {
      std::sort_heap(best.begin(), best.end(), better);
    }
    picks.reserve(best.size());
    for (uint32_t v : best) picks.push_back({v, retained[v], 0});
  }
  // At most the census's objects: under 2^32.
  const std::vector<uint32_t> count =
      sum_up_dominators<uint32_t>(dom, root, [](uint32_t) { return uint32_t{1}; });
  for (Pick& p : picks) p.count = count[p.v];
  return picks;
}

}  // namespace

Retainers find_retainers(const Memory& mem, const Census& census, size_t top,
                         const ThreadNames& thread_names) {
  Retainers out;
  Graph graph = build_graph(mem, census);
  mem.checkpoint({HeapPass::Graph, census.objects.size(), census.objects.size(), true});
  out.edges = graph.edges.size();
  out.unreadable_refs = graph.unreadable_refs;
  out.dropped_edges = graph.dropped_edges;
  const uint32_t root = graph.root;
  const Dominators dom = dominators(graph);
  const PathNamer namer(mem, census, graph, thread_names);
  // The namer reads how each edge is held from memory again: the graph is not needed past here,
  // and its memory goes before the retained sizes take theirs.
  graph = Graph{};
  std::vector<bool> dominates;
  const std::vector<Pick> picks = pick_retainers(census, dom, root, top, out, dominates);
  for (const Pick& p : picks) {
    const Object& o = census.objects[p.v];
    out.top.push_back({namer.path(p.v), o.addr(), o.gct, p.retained, o.bytes, p.count});
  }
  out.profile = profile_entries(namer, census, root, dom, dominates);
  return out;
}

}  // namespace ljprof::heap
