// Unwinding throughput of core mode on golden cores: frames per second, native and Lua
// separately. The cores are made at start-up the way tests/walker makes them (the workload
// aborts under gdb, which writes the core), so the numbers come from real stacks.
//   build/release/bench/walker_bench
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "core/core_file.h"
#include "core/core_walk.h"

namespace {

namespace fs = std::filesystem;

struct GoldenCore {
  std::unique_ptr<ljprof::core::CoreFile> core;
  std::unique_ptr<ljprof::core::CoreWalker> walker;
};

// Dumps a core of `exe` running the golden workload `workload` (tests/walker/workloads).
GoldenCore make_core(const std::string& exe, const std::string& workload) {
  char tmpl[] = "/tmp/ljprof-walker-bench-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const fs::path src = fs::path(LJPROF_SOURCE_DIR) / "tests/walker/workloads";
  fs::copy_file(src / "common.lua", fs::path(dir) / "common.lua");
  fs::copy_file(src / workload, fs::path(dir) / workload);
  const std::string cmd = "cd " + dir + " && gdb -nx -batch -ex run -ex 'generate-core-file " +
                          dir + "/core' --args " + exe + " " + workload + " >/dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0 || !fs::exists(dir + "/core")) {
    std::fprintf(stderr, "walker_bench: could not make a core of %s %s\n", exe.c_str(),
                 workload.c_str());
    std::exit(1);
  }
  auto core = ljprof::core::CoreFile::open(dir + "/core");
  if (!core.ok()) {
    std::fprintf(stderr, "walker_bench: %s\n", core.message().c_str());
    std::exit(1);
  }
  GoldenCore g;
  g.core = std::make_unique<ljprof::core::CoreFile>(std::move(*core));
  auto walker = ljprof::core::CoreWalker::create(*g.core);
  if (!walker.ok()) {
    std::fprintf(stderr, "walker_bench: %s\n", walker.message().c_str());
    std::exit(1);
  }
  g.walker = std::move(*walker);
  fs::remove_all(dir);
  return g;
}

void walk_core(benchmark::State& state, const std::string& exe, const std::string& workload) {
  static std::map<std::string, GoldenCore> cores;
  const std::string key = exe + " " + workload;
  if (!cores.count(key)) cores.emplace(key, make_core(exe, workload));
  const GoldenCore& g = cores.at(key);
  const ljprof::core::Thread& thread = g.core->threads().front();
  g.walker->walk(thread);  // builds the unwind tables of the modules on the stack once
  int64_t native = 0, lua = 0;
  for (auto _ : state) {
    ljprof::core::ThreadStack stack = g.walker->walk(thread);
    for (const auto& f : stack.frames) {
      if (f.kind == ljprof::symbolize::FrameKind::Lua ||
          f.kind == ljprof::symbolize::FrameKind::CFunc) {
        ++lua;
      } else {
        ++native;
      }
    }
    benchmark::DoNotOptimize(stack);
  }
  state.counters["native_frames/s"] =
      benchmark::Counter(static_cast<double>(native), benchmark::Counter::kIsRate);
  state.counters["lua_frames/s"] =
      benchmark::Counter(static_cast<double>(lua), benchmark::Counter::kIsRate);
}

BENCHMARK_CAPTURE(walk_core, luajit_deep_recursion, "/usr/bin/luajit", "deep_recursion.lua");
BENCHMARK_CAPTURE(walk_core, luajit_gsub_callback, "/usr/bin/luajit", "gsub_callback.lua");
BENCHMARK_CAPTURE(walk_core, tarantool_gsub_callback, "/usr/bin/tarantool", "gsub_callback.lua");

}  // namespace

BENCHMARK_MAIN();
