// find_retainers (heap/heap_graph.h): the graph, its dominators, each object's retained size, the
// biggest retainers with their paths, and the memory profile by dominator chain.
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <string>
#include <thread>
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

// The objects that dominate another (each some reached object's immediate dominator, the root
// among them), each with a dense slot: what is kept per dominator (a retained size, a profile
// stack) takes an array of as many, not one entry per object. In a heap of small tables of
// strings a third of the objects dominate; every other object retains only itself.
class DominatorSlots {
 public:
  explicit DominatorSlots(size_t nodes) : bits_((nodes + 63) / 64, 0) {}
  void add(uint32_t v) { bits_[v >> 6] |= uint64_t{1} << (v & 63); }
  // After the last add: the slots are numbered.
  void number() {
    before_.resize(bits_.size());
    uint32_t sum = 0;
    for (size_t w = 0; w < bits_.size(); ++w) {
      before_[w] = sum;
      sum += static_cast<uint32_t>(std::popcount(bits_[w]));
    }
    count_ = sum;
  }
  bool has(uint32_t v) const { return ((bits_[v >> 6] >> (v & 63)) & 1) != 0; }
  uint32_t slot(uint32_t v) const {
    const uint64_t below = bits_[v >> 6] & ((uint64_t{1} << (v & 63)) - 1);
    return before_[v >> 6] + static_cast<uint32_t>(std::popcount(below));
  }
  size_t count() const { return count_; }

 private:
  std::vector<uint64_t> bits_;
  std::vector<uint32_t> before_;  // slots of the words before each word
  size_t count_ = 0;
};

// DominatorSlots::slot of immediate dominators: objects come in runs under one (a table's
// entries, in a row), so the last one asked is asked first.
class IdomSlots {
 public:
  explicit IdomSlots(const DominatorSlots& dominating) : dominating_(dominating) {}
  uint32_t operator()(uint32_t idom) {
    if (idom != last_idom_) {
      last_idom_ = idom;
      last_slot_ = dominating_.slot(idom);
    }
    return last_slot_;
  }

 private:
  const DominatorSlots& dominating_;
  uint32_t last_idom_ = kUnreached, last_slot_ = 0;
};

// The memory profile: objects grouped by their chain of dominators, each dominator named by
// the step that reaches it (PathNamer::frame: table slots of arrays and big maps as "[*]"), so
// equal chains are one stack; an object that dominates nothing else is grouped under its
// dominator by type, so a table of a million strings is one frame "(string)". Stacks stop
// growing at kMaxFrames.
std::vector<ProfileEntry> profile_entries(const PathNamer& namer, const Census& census,
                                          uint32_t root, const Dominators& dom,
                                          const DominatorSlots& dominating) {
  ProfileBuilder profile;
  std::vector<uint32_t> stack_of(dominating.count(), 0);  // by slot; the root's is 0
  IdomSlots idom_slot(dominating);
  for (uint32_t v : dom.top_down) {
    if (v == root) continue;
    const uint32_t up = stack_of[idom_slot(dom.idom[v])];
    const Object& o = census.objects[v];
    if (!dominating.has(v)) {
      profile.add(up, o.gct, o.bytes);
      continue;
    }
    const uint32_t mine =
        profile.depth(up) + 1 >= kMaxFrames ? up : profile.stack(up, namer.frame(v));
    stack_of[dominating.slot(v)] = mine;
    profile.add(mine, 0, o.bytes);
  }
  return profile.entries();
}

struct Pick {
  uint32_t v = 0;
  uint64_t retained = 0;
  uint32_t count = 0;
};

// `own(v)` of each reached object summed up the dominator tree, by dominator slot: a
// dominator's own and that of everything it dominates. Any other object's sum is its own.
template <typename T, typename Own>
std::vector<T> sum_up_dominators(const Dominators& dom, uint32_t root,
                                 const DominatorSlots& dominating, Own own) {
  std::vector<T> sum(dominating.count(), 0);
  IdomSlots idom_slot(dominating);
  // A dominator precedes what it dominates in top_down: in reverse, a dominator's slot holds
  // what it dominates by the time it is met.
  for (size_t i = dom.top_down.size(); i-- > 0;) {
    const uint32_t v = dom.top_down[i];
    if (v == root) continue;
    T mine = own(v);
    if (dominating.has(v)) {
      T& slot = sum[dominating.slot(v)];
      slot += mine;
      mine = slot;
    }
    sum[idom_slot(dom.idom[v])] += mine;
  }
  return sum;
}

// The reached and unreached totals into `out`, and the objects that dominate another.
DominatorSlots count_reached(const Census& census, const Dominators& dom, uint32_t root,
                             Retainers& out) {
  const size_t n = census.objects.size();
  DominatorSlots dominating(n + 1);
  for (uint32_t v : dom.top_down) {
    if (v == root) continue;
    dominating.add(dom.idom[v]);
    ++out.reachable_count;
    out.reachable_bytes += census.objects[v].bytes;
  }
  dominating.number();
  out.unreached_count = n - out.reachable_count;
  out.unreached_bytes = census.object_bytes() - out.reachable_bytes;
  return dominating;
}

// The `top` objects retaining the most bytes (0: all), most first. Retained bytes, then objects,
// summed one after the other (never both arrays at once). Reads only the census and the tree.
std::vector<Pick> pick_retainers(const Census& census, const Dominators& dom, uint32_t root,
                                 const DominatorSlots& dominating, size_t top) {
  std::vector<Pick> picks;
  {
    const std::vector<uint64_t> sums = sum_up_dominators<uint64_t>(
        dom, root, dominating, [&](uint32_t v) { return uint64_t{census.objects[v].bytes}; });
    // With a `top`, a heap of the best so far whose front is the worst of them; each entry
    // carries its retained size, looked up once.
    const auto better = [](const Pick& a, const Pick& b) {
      return a.retained != b.retained ? a.retained > b.retained : a.v < b.v;
    };
    for (uint32_t v : dom.top_down) {
      if (v == root) continue;
      const uint64_t retained =
          dominating.has(v) ? sums[dominating.slot(v)] : uint64_t{census.objects[v].bytes};
      const Pick p{v, retained, 1};
      if (top == 0 || picks.size() < top) {
        picks.push_back(p);
        if (top != 0) std::push_heap(picks.begin(), picks.end(), better);
      } else if (better(p, picks.front())) {
        std::pop_heap(picks.begin(), picks.end(), better);
        picks.back() = p;
        std::push_heap(picks.begin(), picks.end(), better);
      }
    }
    if (top == 0) {
      std::sort(picks.begin(), picks.end(), better);
    } else {
      std::sort_heap(picks.begin(), picks.end(), better);
    }
  }
  // At most the census's objects: under 2^32.
  const std::vector<uint32_t> counts =
      sum_up_dominators<uint32_t>(dom, root, dominating, [](uint32_t) { return uint32_t{1}; });
  for (Pick& p : picks) {
    if (dominating.has(p.v)) p.count = counts[dominating.slot(p.v)];
  }
  return picks;
}

}  // namespace

Retainers find_retainers(const Memory& mem, const Census& census, size_t top,
                         const ThreadNames& thread_names, size_t two_threads_from) {
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
  const DominatorSlots dominating = count_reached(census, dom, root, out);
  // The biggest retainers need the tree and the census only (no reads, no namer): with a second
  // core they are summed while the profile names its stacks, the two longest steps left.
  std::vector<Pick> picks;
  if (census.objects.size() >= two_threads_from && std::thread::hardware_concurrency() >= 2) {
    std::thread worker([&picks, &census, &dom, &dominating, root, top] {
      picks = pick_retainers(census, dom, root, dominating, top);
    });
    out.profile = profile_entries(namer, census, root, dom, dominating);
    worker.join();
  } else {
    picks = pick_retainers(census, dom, root, dominating, top);
    out.profile = profile_entries(namer, census, root, dom, dominating);
  }
  for (const Pick& p : picks) {
    const Object& o = census.objects[p.v];
    out.top.push_back({namer.path(p.v), o.addr(), o.gct, p.retained, o.bytes, p.count});
  }
  return out;
}

}  // namespace ljprof::heap
