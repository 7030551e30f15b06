// libFuzzer target for the heap walker (src/heap) on corrupted memory: the first byte picks GC64
// or not and the string interning generation, the rest is the memory of a VM at kBase: the main
// lua_State first, its global_State right after it (GG_State order), the rest anywhere. The
// census, the graph, the dominators and the profile must fail closed or give sizes the VM's
// own gc.total bounds, whatever the bytes; nothing may crash or allocate without bound.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "heap/heap_census.h"
#include "heap/heap_graph.h"
#include "heap/heap_profile.h"
#include "luajit/layout.h"
#include "memory_image.h"

namespace {

using namespace ljprof;

using fuzz::Image;
using fuzz::kBase;
using fuzz::read_image;
using fuzz::require;

// Every layout rule of the mode, and global_State fields at fixed places (the walker takes
// them from the layout record, whatever they are): strhash 0, strmask 8, gc.total 16,
// gc.root 40, gc.mmudata 80, ctype_state 120.
lj_luajit_info layout(bool gc64, bool upstream_strings) {
  lj_luajit_info in{};
  in.ref_size = gc64 ? 8 : 4;
  for (const luajit::FieldSpec& spec : luajit::kFieldSpecs) {
    if (spec.has_rule()) in.*spec.member = spec.rule(gc64);
  }
  in.str_len = upstream_strings ? (gc64 ? 20 : 16) : (gc64 ? 16 : 12);
  in.str_data = upstream_strings ? (gc64 ? 24 : 20) : (gc64 ? 24 : 16);
  in.L_glref = gc64 ? 16 : 8;
  in.L_base = gc64 ? 32 : 16;
  in.L_top = gc64 ? 40 : 24;
  in.g_strhash = 0;
  in.g_strmask = 8;
  in.g_gc_total = 16;
  in.g_gc_root = 40;
  in.g_gc_mmudata = 80;
  in.g_ctype_state = 120;
  return in;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const lj_luajit_info info = layout(data[0] & 1, data[0] & 2);
  Image image{data + 1, size - 1};
  const heap::Memory mem({read_image, &image}, info);
  // GG_State: global_State right after the main lua_State (96 bytes with GC64, 64 without).
  auto census = heap::take_census(mem, kBase + (info.ref_size == 8 ? 96 : 64));
  if (!census.ok()) return 0;
  require(census->objects.size() <= heap::CensusLimits::kMaxObjects);
  for (const heap::Object& o : census->objects) require(o.bytes <= census->vm_total);
  const heap::Retainers r = heap::find_retainers(mem, *census, 16);
  require(r.reachable_count + r.unreached_count == census->objects.size());
  uint64_t profiled = 0;
  for (const heap::ProfileEntry& e : r.profile) profiled += e.bytes;
  require(profiled == r.reachable_bytes);
  for (const heap::Retainer& x : r.top) {
    require(x.retained_bytes <= r.reachable_bytes && x.own_bytes <= x.retained_bytes);
  }
  const profile::Profile p = heap::heap_profile(r);
  require(p.samples.size() == r.profile.size());
  return 0;
}
