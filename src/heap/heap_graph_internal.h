// What the heap graph's files share (internal to src/heap): the reference graph in compressed
// rows, and the steps of find_retainers.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
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
};

// 12 bytes: a heap has a few references per object. Every aux fits 32 bits: an array index
// (asize is 32-bit), a hash node index (hmask is), a stack slot, an upvalue or constant index.
struct Edge {
  uint32_t to = 0;  // object index; the root is census.objects.size()
  uint32_t aux = 0;
  EdgeKind kind{};
};
static_assert(sizeof(Edge) == 12);

// The graph's edges, appended in blocks of 2^16: a vector grown to millions of edges copied them
// at every doubling, held up to twice their bytes while it did and kept the slack after.
class EdgeList {
 public:
  void push_back(const Edge& e) {
    if ((size_ & kMask) == 0) blocks_.push_back(std::make_unique_for_overwrite<Edge[]>(kMask + 1));
    blocks_.back()[size_ & kMask] = e;
    ++size_;
  }
  const Edge& operator[](size_t i) const { return blocks_[i >> kBits][i & kMask]; }
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
  std::vector<std::unique_ptr<Edge[]>> blocks_;
  size_t size_ = 0;
};

struct Graph {
  uint32_t root = 0;            // the virtual root's node index
  std::vector<uint32_t> first;  // node -> index of its first edge in `edges` (size nodes + 1)
  EdgeList edges;
  uint64_t unreadable_refs = 0;
  uint64_t dropped_edges = 0;  // over the budget the objects' own bytes justify
};

// With mem.threads_allowed() and at least `two_threads_from` objects, the upper half of the
// objects is followed on a second thread (the graph is the same).
inline constexpr size_t kObjectsForTwoThreads = size_t{1} << 16;
Graph build_graph(const Memory& mem, const Census& census,
                  size_t two_threads_from = kObjectsForTwoThreads);

// Immediate dominators over `graph` from its root (Semi-NCA); nodes the root does not
// reach get kUnreached. Also the DFS preorder of the reached nodes (root first).
inline constexpr uint32_t kUnreached = 0xffffffffu;
struct Dominators {
  std::vector<uint32_t> idom;
  std::vector<uint32_t> preorder;
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

// Names the path of the shortest references from the root to each node (BFS over `graph`).
class PathNamer {
 public:
  PathNamer(const Memory& mem, const Census& census, const Graph& graph,
            const ThreadNames& thread_names);
  // The full path text of node `v` ("_G.cache[3]").
  std::string path(uint32_t v) const;
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
  const Graph& graph_;
  const ThreadNames& thread_names_;
  std::vector<uint32_t> parent_;  // BFS tree; kUnreached when not reached
  std::vector<uint32_t> via_;     // the index in graph_.edges of the edge from parent_
  const Edge& via(uint32_t v) const { return graph_.edges[via_[v]]; }
};

}  // namespace ljprof::heap
