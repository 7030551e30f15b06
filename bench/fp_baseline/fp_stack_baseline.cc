// fp_stack_baseline: the kernel's frame-pointer unwinder's time per sample on one process
// (fp_stack.bpf.c), sampled like `ljprof record` samples (cpu-clock perf events on every CPU at
// HZ): prints its median and p90 and the frames it returned. bench/record_overhead's baseline
// for the walker's time per sample (`ljprof record --stats`). Needs root.
//   fp_stack_baseline PID SECONDS HZ
#include <linux/perf_event.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "fp_sample.h"
#include "fp_stack.skel.h"

namespace {

struct Collected {
  std::vector<uint32_t> ns;
  uint64_t frames = 0;
};

int on_sample(void* ctx, void* data, size_t size) {
  if (size < sizeof(fp_sample)) return 0;
  fp_sample s{};
  std::memcpy(&s, data, sizeof(s));
  auto* c = static_cast<Collected*>(ctx);
  c->ns.push_back(s.ns);
  c->frames += s.frames;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: fp_stack_baseline PID SECONDS HZ\n");
    return 2;
  }
  const int pid = std::atoi(argv[1]);
  const double seconds = std::atof(argv[2]);
  const int hz = std::atoi(argv[3]);
  fp_stack_bpf* skel = fp_stack_bpf__open();
  if (skel == nullptr) return std::perror("fp_stack_bpf__open"), 1;
  skel->rodata->target_tgid = static_cast<uint32_t>(pid);
  if (fp_stack_bpf__load(skel) != 0) return std::perror("fp_stack_bpf__load (root?)"), 1;
  std::vector<bpf_link*> links;
  const long ncpu = ::sysconf(_SC_NPROCESSORS_ONLN);
  for (int cpu = 0; cpu < ncpu; ++cpu) {
    perf_event_attr attr{};
    attr.type = PERF_TYPE_SOFTWARE;
    attr.size = sizeof(attr);
    attr.config = PERF_COUNT_SW_CPU_CLOCK;
    attr.freq = 1;
    attr.sample_freq = static_cast<uint64_t>(hz);
    const int fd =
        static_cast<int>(::syscall(__NR_perf_event_open, &attr, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC));
    if (fd < 0) return std::perror("perf_event_open"), 1;
    bpf_link* link = bpf_program__attach_perf_event(skel->progs.fp_sample, fd);
    if (link == nullptr) return std::perror("attach"), 1;
    links.push_back(link);
  }
  Collected c;
  ring_buffer* rb = ring_buffer__new(bpf_map__fd(skel->maps.samples), on_sample, &c, nullptr);
  if (rb == nullptr) return std::perror("ring_buffer__new"), 1;
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) ring_buffer__poll(rb, 50);
  for (bpf_link* l : links) bpf_link__destroy(l);
  ring_buffer__consume(rb);
  ring_buffer__free(rb);
  fp_stack_bpf__destroy(skel);
  if (c.ns.empty()) {
    std::printf("fp baseline: no samples of pid %d\n", pid);
    return 1;
  }
  std::sort(c.ns.begin(), c.ns.end());
  const auto at = [&](double q) {
    return c.ns[std::min(c.ns.size() - 1, size_t(q * c.ns.size()))];
  };
  std::printf("fp baseline: median %.2f us, p90 %.2f us, %.1f frames on average (%zu samples)\n",
              at(0.5) / 1e3, at(0.9) / 1e3, double(c.frames) / c.ns.size(), c.ns.size());
  return 0;
}
