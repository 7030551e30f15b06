// record/cost.h: the kernel program's time per sample as the recorder summarizes it, against
// the exact quantiles of the same values (std::nth_element), and the agent's own CPU clocks.
#include "record/cost.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
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
