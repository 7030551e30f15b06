// record/bpf_session.h: the recorder's kernel program (bpf/record.bpf.c) for one recording —
// loaded with its maps sized, attached to its tracepoints and to a CPU clock on every online CPU
// — and its two ring buffers: sample records, and notifications of processes to look at.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/result.h"
#include "record/recorder.h"

struct record_bpf;
struct ring_buffer;
struct bpf_link;

namespace ljprof::record {

// What the kernel program needs that this kernel lacks, each as "bpf_loop (Linux 5.17)", probed
// with libbpf (a tiny program per helper, so only worth it once loading failed); empty when
// everything is there or the probes themselves cannot run (no privilege).
std::vector<std::string> missing_bpf_features();

class BpfSession {
 public:
  // A ring-buffer record (record_types.h lj_rec_sample or lj_rec_capture), as the kernel wrote it.
  using OnRecord = std::function<void(const void* data, size_t size)>;
  // A process the kernel program says needs a look (an exec, a fork, an executable mmap).
  using OnNotify = std::function<void(uint32_t pid)>;

  BpfSession() = default;
  BpfSession(const BpfSession&) = delete;
  BpfSession& operator=(const BpfSession&) = delete;
  ~BpfSession();

  // Loads the program for `o` (an error carries the kernel verifier's last messages), attaches
  // its fork/exec/mmap tracepoints and sets up both ring buffers. Objects of processes younger
  // than `capture_young_ns` are copied by the kernel when a sample first meets them.
  Status open(const RecordOptions& o, uint64_t capture_young_ns, OnRecord on_record,
              OnNotify on_notify);
  // Starts sampling: a perf_event CPU clock at `frequency_hz` on every online CPU.
  Status start_sampling(uint32_t frequency_hz);
  // Stops sampling; records already in the ring stay to be drained.
  void stop_sampling();
  // Waits up to `timeout_ms` for a ring to wake the agent, handling what woke it.
  void wait(int timeout_ms);
  // Handles every record in the rings now.
  void drain();
  // The kernel's counters (LJ_REC_NCOUNTERS of them) summed over CPUs.
  std::vector<uint64_t> read_counters() const;

  int pids_fd() const;
  int procs_fd() const;
  int exec_templates_fd() const;
  int lib_templates_fd() const;
  int rows_fd() const;
  uint32_t rows_capacity() const;
  // The CPU loading the program took (map creation and the kernel verifier).
  double program_load_cpu_ms() const { return program_load_cpu_ms_; }
  // What the walks did (record.bpf.c tally_*): zero unless RecordOptions::tally_walk_work.
  WalkWork walk_work() const;

 private:
  Status load(const RecordOptions& o, uint64_t capture_young_ns);
  Status attach_switch_in();
  static int on_event(void* ctx, void* data, size_t size);
  static int on_notify(void* ctx, void* data, size_t size);

  record_bpf* skel_ = nullptr;
  ring_buffer* rb_ = nullptr;
  std::vector<bpf_link*> links_;
  bpf_link* switch_in_link_ = nullptr;  // --off-cpu's kprobe on finish_task_switch
  std::string off_cpu_note_;            // why that kprobe is not attached ("": it is)
  std::vector<int> perf_fds_;
  OnRecord on_record_;
  OnNotify on_notify_;
  double program_load_cpu_ms_ = 0;
};

}  // namespace ljprof::record
