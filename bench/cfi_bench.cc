// Building the walker table of real binaries, with the overlays luajit/ computes for them (the
// LuaJIT VM's sub-ranges in tarantool): ms per binary and rows/s.
#include <benchmark/benchmark.h>

#include "cfi/cfi.h"
#include "elf/elf_file.h"
#include "luajit/vm_cfi.h"

namespace {

void BuildTable(benchmark::State& state, const char* path) {
  auto file = ljprof::elf::ElfFile::open(path);
  if (!file.ok()) {
    state.SkipWithError(file.message().c_str());
    return;
  }
  size_t rows = 0;
  for (auto _ : state) {
    auto table =
        ljprof::cfi::build_unwind_table(**file, ljprof::luajit::unwind_overlays(**file).overlays);
    if (!table.ok()) {
      state.SkipWithError(table.message().c_str());
      return;
    }
    rows = table->rows().size();
    benchmark::DoNotOptimize(table->rows().data());
  }
  state.counters["rows"] = static_cast<double>(rows);
  state.counters["rows_per_s"] =
      benchmark::Counter(static_cast<double>(rows), benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK_CAPTURE(BuildTable, tarantool, "/usr/bin/tarantool")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BuildTable, libc, "/usr/lib/x86_64-linux-gnu/libc.so.6")
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
