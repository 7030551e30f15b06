// Core-file memory reads, the walker's inner loop in core mode: a word from the core's own bytes
// (the stack), 16 bytes from a mapped file (text the core does not hold), and the C callback.
//   core_read_bench [CORE]   (without CORE: a kernel core of a luajit that aborts itself is made
//                             in a scratch directory; needs core_pattern = a plain file name)
#include <benchmark/benchmark.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "core/core_file.h"

namespace {

std::string g_core_path;

const ljprof::core::CoreFile& core() {
  static auto opened = ljprof::core::CoreFile::open(g_core_path);
  if (!opened.ok()) {
    std::fprintf(stderr, "core_read_bench: %s\n", opened.message().c_str());
    std::exit(1);
  }
  return *opened;
}

void BM_ReadU64FromCore(benchmark::State& state) {
  const auto& c = core();
  const uint64_t sp = c.threads()[0].sp;
  uint64_t i = 0;
  for (auto _ : state) {
    auto v = c.read_u64(sp + 8 * (i++ & 63));
    benchmark::DoNotOptimize(v);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ReadU64FromCore);

void BM_Read16FromMappedFile(benchmark::State& state) {
  const auto& c = core();
  const uint64_t pc = c.threads()[0].pc;
  uint8_t buf[16];
  for (auto _ : state) {
    auto n = c.read(pc, buf, sizeof(buf));
    benchmark::DoNotOptimize(n);
    benchmark::DoNotOptimize(buf);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Read16FromMappedFile);

void BM_CReaderCallback(benchmark::State& state) {
  const ljprof_mem_reader reader = core().mem_reader();
  const uint64_t sp = core().threads()[0].sp;
  uint64_t word = 0;
  for (auto _ : state) {
    int rc = reader.read_mem(reader.ctx, sp, &word, sizeof(word));
    benchmark::DoNotOptimize(rc);
    benchmark::DoNotOptimize(word);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_CReaderCallback);

std::string make_core(const std::string& dir) {
  const std::string cmd = "cd '" + dir +
                          "' && ulimit -c unlimited && /usr/bin/luajit -e \"local ffi=require'ffi' "
                          "ffi.cdef'void abort(void);' ffi.C.abort()\" 2>/dev/null";
  if (std::system(cmd.c_str()) == -1) return "";
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().filename().string().rfind("core", 0) == 0) return e.path().string();
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  std::string scratch;
  if (argc > 1) {
    g_core_path = argv[1];
  } else {
    char tmpl[] = "/tmp/ljprof-core-bench-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return 1;
    scratch = tmpl;
    g_core_path = make_core(scratch);
    if (g_core_path.empty()) {
      std::fprintf(stderr, "core_read_bench: could not make a core in %s (core_pattern?)\n",
                   scratch.c_str());
      return 1;
    }
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  if (!scratch.empty()) std::filesystem::remove_all(scratch);
  return 0;
}
