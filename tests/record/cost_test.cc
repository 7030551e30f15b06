// record/cost.h: the kernel program's time per sample as the recorder summarizes it, against
// the exact quantiles of the same values (std::nth_element), and the agent's own CPU clocks.
#include "record/cost.h"

#include <bpf/bpf.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace ljprof::record {
namespace {

// The bucket upper edge WalkTimes reports for an exact value.
uint64_t bucket_edge(uint32_t ns) {
  const uint64_t b = std::min<uint64_t>(ns / WalkTimes::kBucketNs, WalkTimes::kBuckets - 1);
  return (b + 1) * WalkTimes::kBucketNs;
}

TEST(WalkTimes, QuantilesAreTheExactOnesToTheBucket) {
  std::mt19937 rng(7);
  std::lognormal_distribution<double> dist(std::log(9000.0), 0.5);  // ~9 µs, long tail
  std::vector<uint32_t> values;
  WalkTimes times;
  uint64_t frames = 0;
  for (int i = 0; i < 20001; ++i) {
    const auto ns = static_cast<uint32_t>(std::min(dist(rng), 4e9));
    values.push_back(ns);
    times.add(ns, static_cast<uint32_t>(i % 40));
    frames += static_cast<uint64_t>(i % 40);
  }
  for (double q : {0.5, 0.9, 0.99}) {
    std::vector<uint32_t> v = values;
    const size_t rank = static_cast<size_t>(std::ceil(q * v.size())) - 1;
    std::nth_element(v.begin(), v.begin() + static_cast<long>(rank), v.end());
    EXPECT_EQ(times.quantile_ns(q), bucket_edge(v[rank])) << "q " << q;
  }
  EXPECT_EQ(times.count(), values.size());
  EXPECT_DOUBLE_EQ(times.mean_frames(), static_cast<double>(frames) / values.size());
}

TEST(WalkTimes, LongWalksSaturateTheLastBucketAndAnEmptyOneSaysZero) {
  WalkTimes times;
  EXPECT_EQ(times.quantile_ns(0.5), 0u);
  times.add(UINT32_MAX, 10);
  EXPECT_EQ(times.quantile_ns(0.5), uint64_t{WalkTimes::kBuckets} * WalkTimes::kBucketNs);
}

// The per-frame figures divide by the frames of the walks tallied; none tallied says zero.
TEST(WalkWork, PerFrameDividesByTheFramesTallied) {
  WalkWork w;
  w.frames = 30;
  w.reads = 60;
  w.row_reads = 114;
  EXPECT_DOUBLE_EQ(w.per_frame(w.reads), 2.0);
  EXPECT_DOUBLE_EQ(w.per_frame(w.row_reads), 3.8);
  EXPECT_DOUBLE_EQ(WalkWork{}.per_frame(7), 0.0);
}

// The CPU clocks move with work done on this thread, and by no more than the wall time.
TEST(AgentCpu, ThreadAndProcessClocksCountThisThreadsWork) {
  const double p0 = process_cpu_seconds(), t0 = thread_cpu_seconds();
  const auto wall0 = std::chrono::steady_clock::now();
  volatile uint64_t x = 0;
  while (std::chrono::steady_clock::now() - wall0 < std::chrono::milliseconds(50)) x = x + 1;
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  const double t = thread_cpu_seconds() - t0, p = process_cpu_seconds() - p0;
  EXPECT_GT(t, 0.0);
  EXPECT_LE(t, wall + 0.005);
  EXPECT_GE(p, t - 0.001);
  EXPECT_GT(max_rss_kib(), 0u);
}

}  // namespace
}  // namespace ljprof::record

namespace ljprof::record {
namespace {

uint64_t rollup_rss_kib() {
  std::ifstream rollup("/proc/self/smaps_rollup");
  for (std::string line; std::getline(rollup, line);) {
    if (line.rfind("Rss:", 0) == 0) return std::strtoull(line.c_str() + 4, nullptr, 10);
  }
  return 0;
}

// The parts add up to the kernel's own total (smaps_rollup), and memory this test makes resident
// lands in its owner's part: 4 MiB of a BPF array map it mapped and touched, 1 MiB of a file it
// mapped and read.
TEST(ResidentParts, AddUpToTheKernelsTotalAndNameTheirOwners) {
  ASSERT_EQ(geteuid(), 0u) << "creating a BPF map needs root";
  const ResidentParts before = resident_parts();
  const uint64_t kernel_total = rollup_rss_kib();
  ASSERT_GT(kernel_total, 0u);
  EXPECT_NEAR(static_cast<double>(before.total()), static_cast<double>(kernel_total),
              0.02 * static_cast<double>(kernel_total) + 256);
  EXPECT_GT(before.ljprof_kib, 0u) << "this test executable is /proc/self/exe";
  EXPECT_GT(before.libraries_kib, 0u);

  constexpr uint32_t kMapBytes = 4 << 20, kFileBytes = 1 << 20;
  LIBBPF_OPTS(bpf_map_create_opts, opts, .map_flags = BPF_F_MMAPABLE);
  const int map =
      bpf_map_create(BPF_MAP_TYPE_ARRAY, "ljprof_rss", 4, 4096, kMapBytes / 4096, &opts);
  ASSERT_GE(map, 0) << std::strerror(errno);
  void* mapped = mmap(nullptr, kMapBytes, PROT_READ | PROT_WRITE, MAP_SHARED, map, 0);
  ASSERT_NE(mapped, MAP_FAILED) << std::strerror(errno);
  std::memset(mapped, 1, kMapBytes);

  char path[] = "/tmp/ljprof-rss-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, kFileBytes), 0);
  auto* file =
      static_cast<volatile uint8_t*>(mmap(nullptr, kFileBytes, PROT_READ, MAP_SHARED, fd, 0));
  ASSERT_NE(file, MAP_FAILED);
  uint64_t sum = 0;
  for (uint32_t at = 0; at < kFileBytes; at += 4096) sum += file[at];
  EXPECT_EQ(sum, 0u);

  const ResidentParts after = resident_parts();
  EXPECT_GE(after.bpf_kib - before.bpf_kib, kMapBytes / 1024);
  EXPECT_GE(after.files_kib - before.files_kib, kFileBytes / 1024);
  munmap(const_cast<uint8_t*>(file), kFileBytes);
  munmap(mapped, kMapBytes);
  close(fd);
  close(map);
  unlink(path);
}

}  // namespace
}  // namespace ljprof::record
