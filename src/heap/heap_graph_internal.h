// What the heap graph's files share (internal to src/heap): the reference graph in compressed
// rows, and the steps of find_retainers.
#pragma once

#include <algorithm>
#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "heap/heap_census.h"
#include "heap/heap_graph.h"
#include "heap/heap_memory.h"

namespace ljprof::heap {

// How a reference is held, for naming the path through it.
enum class EdgeKind : uint8_t {
  RootGlobals,     // the main thread's env: _G
  RootRegistry,    // g->registrytv
  RootMainThread,  // g->mainthref
  RootGcRoot,      // g->gcroot[aux]
  RootTrace,       // a JIT trace (G->J->trace keeps them)
  RootFinalizing,  // g->gc.mmudata
  ArraySlot,       // table array part, index aux
  HashValue,       // table hash value, node index aux (its key is read when a path is named)
  HashKey,         // table hash key object, node index aux
  Metatable,
  Env,
  Upvalue,       // Lua function -> upvalue object, index aux
  UpvalueValue,  // closed upvalue -> its value
  CUpvalue,      // C function upvalue TValue, index aux
  Prototype,     // Lua function -> its prototype
  Constant,      // prototype -> GC constant, index aux
  ChunkName,     // prototype -> chunk name
  StackSlot,     // thread -> stack slot aux
  OpenUpvalue,   // thread -> its open upvalue
  TraceProto,    // trace -> its start prototype
  Changed,       // a live object no longer holds the reference the graph found (named "[?]")
};

// One reference with how it is held. Every aux fits 32 bits: an array index (asize is 32-bit), a
// hash node index (hmask is), a stack slot, an upvalue or constant index.
struct Edge {
  uint32_t to = 0;  // object index; the root is census.objects.size()
  uint32_t aux = 0;
  EdgeKind kind{};
};

// The graph's edges, their targets only (4 bytes each where an Edge is 12: the dominators and the
// paths' search need only where a reference leads; how it is held is read again, from the
// object, for the few edges a path names: labelled_edges). Appended in blocks of 2^16: a vector
// grown to millions of edges copied them at every doubling, held up to twice their bytes while it
// did and kept the slack after.
class EdgeList {
 public:
  void push_back(uint32_t to) {
    if ((size_ & kMask) == 0) {
      blocks_.push_back(std::make_unique_for_overwrite<uint32_t[]>(kMask + 1));
    }
    blocks_.back()[size_ & kMask] = to;
    ++size_;
  }
  uint32_t operator[](size_t i) const { return blocks_[i >> kBits][i & kMask]; }
  size_t size() const { return size_; }
  // Appends `other`'s edges, freeing each of its blocks once copied (two parts of a graph built
  // side by side are joined without holding the second twice).
  void append(EdgeList&& other) {
    for (size_t b = 0; b < other.blocks_.size(); ++b) {
      const size_t n = std::min(kMask + 1, other.size_ - (b << kBits));
      for (size_t i = 0; i < n; ++i) push_back(other.blocks_[b][i]);
      other.blocks_[b].reset();
    }
    other.blocks_.clear();
    other.size_ = 0;
  }

 private:
  static constexpr unsigned kBits = 16;
  static constexpr size_t kMask = (size_t{1} << kBits) - 1;
  std::vector<std::unique_ptr<uint32_t[]>> blocks_;
  size_t size_ = 0;
};

struct Graph {
  uint32_t root = 0;            // the virtual root's node index
  std::vector<uint32_t> first;  // node -> index of its first edge in `edges` (size nodes + 1)
  EdgeList edges;
  uint64_t unreadable_refs = 0;
  uint64_t dropped_edges = 0;  // over the budget the objects' own bytes justify
  // No references from `v` (a string, an empty table): it lies on no path to anything else.
  bool is_leaf(uint32_t v) const { return first[v] == first[v + 1]; }
};

// With mem.threads_allowed() and at least `two_threads_from` objects, the upper half of the
// objects is followed on a second thread (the graph is the same).
Graph build_graph(const Memory& mem, const Census& census,
                  size_t two_threads_from = kObjectsForTwoThreads);

// The references of node `v` (a census object, or the root) with how each is held, read from
// memory again in the order build_graph stores them: the same edges for a core; a live object
// may have changed since (callers check the target they expect).
std::vector<Edge> labelled_edges(const Memory& mem, const Census& census, uint32_t v);

// Immediate dominators over `graph` from its root (Semi-NCA); nodes the root does not
// reach get kUnreached. Also the reached nodes in an order where each follows its immediate
// dominator (root first): the DFS preorder of those with references, then the leaves.
inline constexpr uint32_t kUnreached = 0xffffffffu;
struct Dominators {
  std::vector<uint32_t> idom;
  std::vector<uint32_t> top_down;
};
Dominators dominators(const Graph& graph);

// The Lua frame of a thread that holds one of its stack slots: the function, the slot's
// register in it, and, when the frame's pc is known (every frame below the innermost), the
// local's name there (empty: a temporary) and the line.
struct SlotName {
  uint64_t fn = 0;
  uint32_t reg = 0;
  std::string name;
  uint32_t line = 0;  // 0: the frame's pc is not known
};
// `slot` counts from lua_State.stack; nullopt when no Lua frame of `L` holds it (a C frame's
// slot) or the chain is unreadable.
std::optional<SlotName> name_stack_slot(const Memory& mem, uint64_t L, uint64_t slot);

// The labelled edges of the nodes asked for last, up to kMaxEdges of them in all: a memory
// profile names the slots of one big table one after another, and each would read it whole.
class EdgeLabelCache {
 public:
  EdgeLabelCache(const Memory& mem, const Census& census) : mem_(mem), census_(census) {}
  // The first of `parent`'s edges (labelled_edges) that leads to `child`: the one a BFS over the
  // graph took. nullptr when there is none (a live parent changed since the graph was read).
  const Edge* first_to(uint32_t parent, uint32_t child);

 private:
  static constexpr size_t kMaxEdges = size_t{1} << 20;  // 12 MiB, 16 with rows' indexes
  // Rows this long are found in through the next-slot hint and their first-edge marks, or an
  // index by target (a big table's slots, each named in turn), not a scan from the start.
  static constexpr size_t kIndexFrom = 32;
  struct Entry {
    uint32_t node = 0;
    std::vector<Edge> edges;
    std::vector<bool> first_of_target;  // by position: no edge before it has its target
    // Positions in `edges` by target, then position: made when a name is asked out of the
    // row's order (a profile names a table's slots in order: the sort is seldom needed).
    std::vector<uint32_t> by_target;
    // The position after the last one found: a profile names a table's slots in order, and
    // this is the next one's, no search needed.
    size_t next = 0;
  };
  Entry& of(uint32_t v);
  const Memory& mem_;
  const Census& census_;
  std::list<Entry> recent_;  // most recent first
  std::unordered_map<uint32_t, std::list<Entry>::iterator> where_;
  std::vector<uint64_t> seen_;  // a bit per node, all clear between rows
  size_t edges_ = 0;
  static constexpr size_t kEdgesPerRelease = size_t{1} << 16;  // then Memory::release()
  size_t read_since_release_ = 0;
};

// Names the path of the shortest references from the root to each node (BFS over `graph`, which
// it does not keep: how an edge is held is read from memory again, labelled_edges).
class PathNamer {
 public:
  PathNamer(const Memory& mem, const Census& census, const Graph& graph,
            const ThreadNames& thread_names);
  // The full path text of node `v` ("_G.cache[3]").
  std::string path(uint32_t v) const;
  // `v`'s parent in the paths' tree (the root's: itself; kUnreached when not reached).
  uint32_t parent(uint32_t v) const { return parent_[v]; }
  // One frame's text for node `v` in a memory profile: what its parent edge adds (".cache",
  // "upvalue 'x' of function <a.lua:3>").
  std::string step(uint32_t v) const;
  // The frame of node `v` in a memory profile: step(v), but a slot of an array or of a big
  // map (1024 hash slots or more) is "[*]", so a million entries of one table are one frame.
  std::string frame(uint32_t v) const;

 private:
  std::string edge_text(uint32_t parent, const Edge& e, const std::string& before) const;
  std::string key_text(uint64_t raw_key, bool as_key) const;
  // The raw key TValue of hash edge `e` from table node `parent`, read from the node the edge
  // was found in; nullopt when that node no longer holds the edge's object (as value, or as key
  // for a key edge: a live table rehashed since) or is unreadable.
  std::optional<uint64_t> hash_key(uint32_t parent, const Edge& e) const;
  std::string function_name(uint64_t fn) const;
  std::string proto_name(uint64_t pt) const;
  std::string upvalue_name(uint64_t fn, uint64_t index) const;
  std::string thread_name(uint64_t L) const;
  std::string slot_name(uint64_t L, uint64_t slot) const;
  std::string string_at(uint64_t s, size_t max) const;

  const Memory& mem_;
  const Census& census_;
  const ThreadNames& thread_names_;
  uint32_t root_;
  std::vector<uint32_t> parent_;  // BFS tree; kUnreached when not reached
  mutable EdgeLabelCache labels_;
  // The edge from parent_[v] to reached node `v` with how it is held; kind Changed when the
  // parent (a live object) no longer holds it.
  Edge via(uint32_t v) const;
};

}  // namespace ljprof::heap
