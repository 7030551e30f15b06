// heap/heap_census.h: every collectable object of one LuaJIT VM in a core file's (or a live
// process's) memory, with its size as LuaJIT's own accounting counts it, so the sum can be held
// against the VM's g->gc.total.
//
// Where objects are (lj_gc.c): the g->gc.root list (through GCHeader.nextgc: every object but
// strings and open upvalues; userdata sit right after the main thread, lj_udata.c), the string
// table's chains (global_State.strhash or .str.tab, the anchors' low bit a flag upstream), the
// userdata queued for finalization (g->gc.mmudata, a circular list), and every thread's open
// upvalues (lua_State.openupval, through nextgc).
//
// Every object is validated before its fields are trusted: readable, its type tag the one its
// list allows, its sizes under LuaJIT's own limits. An object that fails is counted by reason in
// `malformed` and its list is not followed past it (its nextgc cannot be trusted); the census
// then covers less than gc.total, which the report says. The number of objects is bounded by
// what gc.total can hold (and by kMaxObjects).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/result.h"
#include "heap/address_index.h"
#include "heap/heap_memory.h"
#include "heap/heap_object.h"

namespace ljprof::heap {

struct TypeTotal {
  uint64_t count = 0;
  uint64_t bytes = 0;
  bool operator==(const TypeTotal&) const = default;
};

struct CensusLimits {
  static constexpr uint64_t kMaxObjects = uint64_t{1} << 27;
  static constexpr uint64_t kMaxStrTab = uint64_t{1} << 26;  // string table anchors
};

struct Census {
  uint64_t g = 0;            // global_State
  uint64_t main_thread = 0;  // the GG_State's lua_State, proven by its type tag and glref == g
  uint64_t registry = 0;     // the registry table (registrytv), 0 when not proven
  uint64_t vm_total = 0;     // g->gc.total: the VM's own count of its bytes
  uint32_t strnum = 0;       // the string table's count (g->strnum / g->str.num)
  // The string table's anchors ((mask + 1) GCRefs), counted in gc.total but no object.
  uint64_t string_table_bytes = 0;
  std::vector<Object> objects;  // sorted by address, each once
  std::array<TypeTotal, kGctCount> types{};
  std::map<std::string, uint64_t> malformed;  // reason -> objects (or list links) refused
  uint64_t reread_objects = 0;  // live: objects (or list links) refused at first, whole read again
  std::vector<uint64_t> gc_roots;  // g->gcroot[]: metamethod names, base metatables, io

  uint64_t object_bytes() const;
  // The index of the object at `addr` in `objects`, or -1.
  int64_t index_of(uint64_t addr) const;
  // `objects` by address (take_census builds it; index_of searches `objects` without it).
  AddressIndex address_index;
};

// Reads the census of the VM whose global_State is at `g`. Fails (naming the address and the
// rule) when g itself cannot be proven: fields missing from the layout, g->gc.total or the
// string table unreadable or absurd, no main thread at the GG_State place.
// With mem.threads_allowed() and at least `strings_thread_from` strings (g->strnum), the string
// table is walked on a second thread beside gc.root (the census is the same).
inline constexpr size_t kStringsForThread = size_t{1} << 16;
Result<Census> take_census(const Memory& mem, uint64_t g,
                           size_t strings_thread_from = kStringsForThread);

// What sizes depend on beyond the layout: the C type table (g->ctype_state->tab, lj_ctype.h
// CTState: `CType *tab; CTypeID top`) that sizes cdata (tab 0 when the VM has no FFI state: no
// cdata can exist then), and sizeof(lua_State), the distance from the main lua_State to
// global_State in GG_State (96 with GC64, 64 without; OpenResty appends exdata).
struct SizeContext {
  uint64_t tab = 0;
  uint32_t top = 0;
  uint64_t lua_state_size = 0;
};

// The size of the object at `addr` of type `gct` as LuaJIT accounts it, or the reason it is
// refused ("table hash part over 2^26 nodes"). `main_thread`: its lua_State is part of
// GG_State, so only its stack counts.
Result<uint64_t> object_bytes(const Memory& mem, const SizeContext& ctypes, uint64_t addr,
                              uint8_t gct, bool main_thread);

}  // namespace ljprof::heap
