// A luajit core of a heap workload (tests/walker/workloads) opened for the heap stage's own
// functions: the core, its LuaJIT layout and its global_State (as `ljprof heap --json` finds it).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/core_file.h"
#include "core/core_walk.h"

extern "C" {
#include "abi/luajit_info.h"
}

namespace ljprof::test {

struct HeapCoreSetup {
  std::optional<core::CoreFile> core;
  std::unique_ptr<core::CoreWalker> walker;
  lj_luajit_info info{};
  uint64_t g = 0;
};

// Runs `workload` under Debian's luajit to a core and opens it; fails the test (gtest
// assertions: call it inside ASSERT_NO_FATAL_FAILURE) when any step does.
void open_heap_core(const std::string& workload, HeapCoreSetup& out);

}  // namespace ljprof::test
