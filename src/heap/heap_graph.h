// heap/heap_graph.h: what retains the heap. The references between the census's objects, as
// LuaJIT's collector follows them (lj_gc.c gc_traverse_tab/func/proto/thread, gc_mark_start),
// from the roots the collector marks (the globals table, the registry, the main thread, every
// g->gcroot[], JIT traces, userdata queued for finalization); the dominator tree of that graph
// (Semi-NCA); each object's retained size (what collecting it would free: itself and
// every object only it leads to); and each object's shortest path from a root, named the way
// a Lua programmer writes it: `_G.cache`, `package.loaded["app.users"].index`,
// `upvalue 'sessions' of function <app.lua:12>`, `local 't' of thread 0x… at app.lua:40` (a
// fiber's by its id and name), `local #3 of thread 0x…` (a slot whose local has no name), `[key
// "abc"]`, `[metatable]`.
//
// Weak references do not retain: the values of a table whose last traversal marked it
// LJ_GC_WEAKVAL, the keys of one marked LJ_GC_WEAKKEY (lj_gc.c gc_traverse_tab sets them from
// __mode and they stay until the next traversal).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "heap/heap_census.h"
#include "heap/heap_memory.h"

namespace ljprof::heap {

struct Retainer {
  std::string path;  // printable text
  uint64_t addr = 0;
  uint8_t gct = 0;
  uint64_t retained_bytes = 0;
  uint64_t own_bytes = 0;
  uint64_t count = 0;  // objects retained, itself included
};

// Reachable objects with one place in a memory profile: their dominator chain (root first)
// named frame by frame, and their own sizes summed.
struct ProfileEntry {
  std::vector<std::string> frames;  // root first
  uint64_t bytes = 0;
  uint64_t count = 0;  // objects
};

struct Retainers {
  std::vector<Retainer> top;  // every object, biggest retained size first (callers cut it)
  uint64_t reachable_count = 0;
  uint64_t reachable_bytes = 0;
  uint64_t unreached_count = 0;  // not reached from the roots: garbage not yet swept
  uint64_t unreached_bytes = 0;
  uint64_t edges = 0;
  uint64_t unreadable_refs = 0;  // references whose memory could not be read
  uint64_t dropped_edges = 0;    // references over what the objects' bytes can hold (malformed)
  std::vector<ProfileEntry> profile;
};

// How paths name some threads instead of "thread 0x…", by lua_State: a Tarantool fiber's
// `fiber 104 "worker"`.
using ThreadNames = std::map<uint64_t, std::string>;

// Heaps of fewer objects take one thread throughout (a second one would not pay for itself).
inline constexpr size_t kObjectsForTwoThreads = size_t{1} << 16;

// `top`: how many retainers to keep (the biggest by retained size; 0: all). With at least
// `two_threads_from` objects (and two cores) the retained sizes are summed on a second thread
// while the memory profile is built (the result is the same).
Retainers find_retainers(const Memory& mem, const Census& census, size_t top = 200,
                         const ThreadNames& thread_names = {},
                         size_t two_threads_from = kObjectsForTwoThreads);

}  // namespace ljprof::heap
