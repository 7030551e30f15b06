// record/cost.h: what a recording costs, measured by the recorder itself (`ljprof record
// --stats`, bench/record_overhead): the agent's CPU (CPU-time clocks) and peak memory
// (getrusage), and the kernel program's own time per sample as each sample record carries it
// (lj_rec_sample.walk_ns).
#pragma once

#include <array>
#include <cstdint>

namespace ljprof::record {

// The agent's CPU (user + system) so far, in seconds: the whole process, or the calling thread
// only (the recorder's loop, without the agent's upload threads). Exact (the scheduler's run
// time), not in ticks.
double process_cpu_seconds();
double thread_cpu_seconds();
// The agent's peak resident set (getrusage ru_maxrss), in KiB.
uint64_t max_rss_kib();

// The agent's resident memory now, by who holds it, from the kernel's per-mapping accounting
// (/proc/self/smaps Rss): what `record --stats` prints after the peak, so a reader sees where
// the memory goes. The parts add up to the whole resident set.
struct ResidentParts {
  uint64_t heap_kib = 0;       // malloc: [heap] and anonymous mappings (tables, caches, stacks)
  uint64_t bpf_kib = 0;        // BPF maps mapped into the agent (ring buffers, unwind rows)
  uint64_t ljprof_kib = 0;     // the ljprof executable itself
  uint64_t libraries_kib = 0;  // shared libraries (.so)
  uint64_t files_kib = 0;      // other files mapped: the targets' executables and debug files
  uint64_t other_kib = 0;      // thread stacks, vDSO, anything else
  uint64_t total() const {
    return heap_kib + bpf_kib + ljprof_kib + libraries_kib + files_kib + other_kib;
  }
};
// Zero parts when /proc/self/smaps cannot be read.
ResidentParts resident_parts();
// CLOCK_MONOTONIC in nanoseconds: bpf_ktime_get_ns's clock, to compare sample times with
// publication times.
uint64_t monotonic_ns();

// What the kernel program's walks did (record.bpf.c tally_*, under `record --stats`): the
// per-frame breakdown of its time.
struct WalkWork {
  uint64_t frames = 0;  // of the walks tallied
  uint64_t reads = 0;   // user-memory reads through the walker's reader
  uint64_t read_bytes = 0;
  uint64_t row_lookups = 0;
  uint64_t row_cache_hits = 0;  // lookups the per-CPU row cache answered
  uint64_t row_reads = 0;       // row-map elements the other lookups' binary searches read
  double per_frame(uint64_t n) const { return frames ? static_cast<double>(n) / frames : 0.0; }
};

// The distribution of the kernel program's time per sample: fixed buckets of kBucketNs up to
// kBuckets * kBucketNs (the last bucket holds everything longer), so the memory is bounded
// whatever the run's length.
class WalkTimes {
 public:
  static constexpr uint32_t kBucketNs = 16;
  static constexpr uint32_t kBuckets = 4096;  // up to 65.5 µs exactly; longer ones saturate

  void add(uint32_t walk_ns, uint32_t frames);
  uint64_t count() const { return count_; }
  // The walk time at quantile q (0..1), the upper edge of its bucket; 0 without samples.
  uint64_t quantile_ns(double q) const;
  double mean_frames() const { return count_ ? static_cast<double>(frames_) / count_ : 0.0; }

 private:
  std::array<uint64_t, kBuckets> buckets_{};
  uint64_t count_ = 0;
  uint64_t frames_ = 0;
};

}  // namespace ljprof::record
