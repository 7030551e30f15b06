// The oracle of the `ljprof record` split tests, shared by the x86-64 tests (record_test.cc)
// and the arm64 VM tests (record_arm64_vm_test.cc): the workload's own per-part CPU clock
// (workloads/split.lua's report) against a recording's folded stacks.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace ljprof::record_oracle {

std::vector<std::string> split(const std::string& s, char sep);

// The parts of split.lua whose shares are compared.
extern const char* const kParts[4];

// The VM's own measurement, split.lua's report: "name linedefined seconds" per part (and for
// the comparator, with 0 seconds), and the throughput log "rate <start ns> <end ns> <rounds>
// <on-cpu ns> <run-queue ns>" (CLOCK_MONOTONIC, and the kernel's schedstat of the process).
struct VmReport {
  std::map<std::string, std::pair<int, double>> parts;
  struct Rate {
    double start_ns, end_ns, rounds, cpu_ns, wait_ns;
  };
  std::vector<Rate> rates;

  static VmReport parse(const std::string& text);
  // What the profile calls the part's Lua function: the name its caller used, as
  // debug.traceback() does; the comparator, called by table.sort (C), has none and is
  // "function <split.lua:LINEDEFINED>".
  std::string function(const std::string& name) const;
  // The start of its folded-stack label: "NAME (split.lua" (":LINE)" follows, or ")" where
  // the current line is unknown).
  std::string label(const std::string& name) const { return function(name) + " (split.lua"; }
  // The CPU seconds each part spent between `before` and this report (the same process).
  VmReport since(const VmReport& before) const;
  // The CPU seconds of the four parts together.
  double part_seconds() const;
};

// One line of ljprof's --folded output: the frames from the root, and its sample count.
struct FoldedStack {
  std::vector<std::string> frames;
  double count = 0;
  std::string line;
  bool rooted() const {
    return !frames.empty() && frames.front().find("[root]") != std::string::npos;
  }
  // Not a walk that stopped in code whose rows were published after the sample was taken.
  bool had_context() const { return line.find("published after the sample") == std::string::npos; }
};

std::vector<FoldedStack> read_folded(const std::string& path);

// Sample counts of a recording: all of them, those that had an unwind context, those whose walk
// reached a proven root.
struct RootTally {
  double total = 0, with_context = 0, rooted = 0;
  void add(const FoldedStack& stack) {
    total += stack.count;
    if (stack.had_context()) with_context += stack.count;
    if (stack.rooted()) rooted += stack.count;
  }
};

// The share (0-100) of the followed processes' CPU time the recording could not sample, from
// ljprof's summary or a pprof -top listing of its counters: sampling periods that passed on a
// CPU running a followed process without its timer firing (a virtual CPU the host did not run:
// the guest charges that time to the task on the CPU, so the VM's clock counts it while the
// profile has no sample of it). A share can be off by at most this much for that reason.
double unsampled_share(const std::string& summary);

// The points a share may differ from the VM's clock: `points`, plus the unsampled share.
double share_tolerance(double points, const std::string& summary);

// A recording's folded stacks against the VM's per-part CPU time: more than `min_samples`
// samples, shares within 5 points (plus the unsampled share), at least `min_root_share` of the
// samples that had an unwind context end at a proven root, and the comparator nests under
// table.sort in more than `min_nested_share` of in_c's samples. `what` (ljprof's summary) goes with
// every failure (gtest assertions).
void expect_profile_matches_vm(const std::string& folded, const VmReport& vm, double min_root_share,
                               const std::string& what, double min_samples = 1000,
                               double min_nested_share = 0.1);

}  // namespace ljprof::record_oracle
