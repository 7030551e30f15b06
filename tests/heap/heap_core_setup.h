// A luajit core of a heap workload (tests/walker/workloads) opened for the heap stage's own
// functions: the core, its LuaJIT layout, its global_State (as `ljprof heap --json` finds it)
// and its census read straight from the core: what a test that alters memory compares with.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/core_file.h"
#include "core/core_walk.h"
#include "heap/heap_census.h"

extern "C" {
#include "abi/luajit_info.h"
}

namespace ljprof::test {

struct HeapCoreSetup {
  std::optional<core::CoreFile> core;
  std::unique_ptr<core::CoreWalker> walker;
  lj_luajit_info info{};
  uint64_t g = 0;
  heap::Census census;  // of the core as it is, every object whole (nothing malformed)
};

// Runs `workload` under Debian's luajit to a core and opens it; fails the test (gtest
// assertions: call it inside ASSERT_NO_FATAL_FAILURE) when any step does.
void open_heap_core(const std::string& workload, HeapCoreSetup& out);

// A reader of a core's memory that shows other bytes at some addresses while `on`: a program
// caught writing, or a list rewritten under a live read, on a real core.
struct PatchedMemory {
  struct Patch {
    uint64_t addr = 0;
    uint64_t value = 0;  // little-endian, `len` bytes of it
    uint32_t len = 0;
  };
  ljprof_mem_reader inner;
  std::vector<Patch> patches;
  bool on = true;
  ljprof_mem_reader reader() { return {&PatchedMemory::read, this}; }
  static int read(void* ctx, uint64_t addr, void* out, uint32_t len);
};

}  // namespace ljprof::test
