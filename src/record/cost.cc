#include "record/cost.h"

#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "proc/proc_maps.h"

namespace ljprof::record {

namespace {

// CLOCK_*_CPUTIME_ID: the scheduler's exact run time, where getrusage's thread times move in
// whole ticks (4 ms at HZ=250), too coarse for a 1 ms attach.
double cpu_seconds(clockid_t clock) {
  timespec ts{};
  if (::clock_gettime(clock, &ts) != 0) return 0;
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

}  // namespace

double process_cpu_seconds() {
  return cpu_seconds(CLOCK_PROCESS_CPUTIME_ID);
}

double thread_cpu_seconds() {
  return cpu_seconds(CLOCK_THREAD_CPUTIME_ID);
}

uint64_t monotonic_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

uint64_t max_rss_kib() {
  rusage u{};
  if (::getrusage(RUSAGE_SELF, &u) != 0) return 0;
  return static_cast<uint64_t>(std::max<long>(0, u.ru_maxrss));
}

ResidentParts resident_parts() {
  ResidentParts parts;
  std::ifstream smaps("/proc/self/smaps");
  std::error_code ec;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  uint64_t* part = &parts.other_kib;
  for (std::string line; std::getline(smaps, line);) {
    // A mapping's first line is a proc(5) maps line; its fields follow as "Name:   N kB".
    if (!line.empty() && std::isxdigit(static_cast<unsigned char>(line[0])) &&
        line.find('-') < line.find(' ')) {
      auto mapping = proc::parse_proc_maps(line, "/proc/self/smaps");
      const std::string path = mapping.ok() && !mapping->empty() ? mapping->front().path : "";
      if (!mapping.ok()) {
        part = &parts.other_kib;
      } else if (path.empty() || path == "[heap]") {
        part = &parts.heap_kib;
      } else if (path.find("bpf") != std::string::npos && path.rfind("anon_inode:", 0) == 0) {
        part = &parts.bpf_kib;
      } else if (path == self) {
        part = &parts.ljprof_kib;
      } else if (path.front() == '/' && path.find(".so") != std::string::npos) {
        part = &parts.libraries_kib;
      } else if (path.front() == '/') {
        part = &parts.files_kib;
      } else {
        part = &parts.other_kib;
      }
      continue;
    }
    if (line.rfind("Rss:", 0) == 0) {
      *part += std::strtoull(line.c_str() + 4, nullptr, 10);
    }
  }
  return parts;
}

void WalkTimes::add(uint32_t walk_ns, uint32_t frames) {
  buckets_[std::min<uint32_t>(walk_ns / kBucketNs, kBuckets - 1)] += 1;
  ++count_;
  frames_ += frames;
}

uint64_t WalkTimes::quantile_ns(double q) const {
  if (count_ == 0) return 0;
  const uint64_t rank =
      std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(std::clamp(q, 0.0, 1.0) * count_)));
  uint64_t seen = 0;
  for (uint32_t b = 0; b < kBuckets; ++b) {
    seen += buckets_[b];
    if (seen >= rank) return static_cast<uint64_t>(b + 1) * kBucketNs;
  }
  return static_cast<uint64_t>(kBuckets) * kBucketNs;
}

}  // namespace ljprof::record
