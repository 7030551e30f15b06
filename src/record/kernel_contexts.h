// record/kernel_contexts.h: what the kernel program builds contexts from and what it built
// (record.bpf.c): the exec templates it gives an exec'd process its context by, and the contexts
// it built at a fork or exec, read back from its own slots of `procs` to symbolize their samples.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <utility>

#include "record/bpf_session.h"
#include "record/process_context.h"
#include "record/recorder.h"
#include "record/steady_clock.h"

extern "C" {
#include "abi/record_types.h"
}

namespace ljprof::record {

class KernelContexts {
 public:
  KernelContexts(const RecordOptions& o, const BpfSession& session, ObjectCache& cache)
      : opt_(o), session_(session), cache_(cache) {}

  // Gives the kernel the template of pid's executable, once per executable: its next exec gets a
  // context at once (record.bpf.c on_exec).
  void publish_exec_template(uint32_t pid, const ProcessContext& ctx);
  // Gives the kernel the template of each library file `ctx` maps whose rows are in the kernel,
  // once per file: a later mapping of it by a followed process is added to that process's
  // context as it is mapped (record_follow.bpf.h add_library).
  void publish_lib_templates(const ProcessContext& ctx);
  // The context of generation `generation` that the kernel built for pid at a fork or exec
  // (record.bpf.c next_kernel_slot), read back from its slot: the modules the walk used, each
  // file known by its rows. Null once the kernel reused the slot (LJ_REC_EXEC_SLOTS forks and
  // execs later; samples are drained within 100 ms). Its memory reads what the kernel copied of
  // the process (`copies`) first, then the process while it lives: a run of a few milliseconds
  // is often gone when its samples are named.
  const ProcessContext* context(uint32_t pid, uint32_t generation,
                                std::shared_ptr<const proc::CapturedMemory> copies);
  // A file's rows are being given back (UnwindRows::on_retire): what names them lets go.
  void forget_rows(uint32_t row_first, uint32_t row_count);
  // Drops the contexts read more than kKeepS ago.
  void expire();

  // Contexts are kept this long after being read (their files' rows with them): samples are
  // drained within kDrainMs (recorder.cc), and the process's own context replaces the kernel's
  // within milliseconds.
  static constexpr double kKeepS = 2.0;

 private:
  struct Read {
    Clock::time_point read;
    std::unique_ptr<ProcessContext> ctx;
    uint32_t slot = 0;
    uint32_t nmodules = 0;  // lj_rec_proc.nmodules when read: the kernel adds libraries later
  };
  // The context built from kernel slot `rec` for pid, its files found by their rows. Its memory
  // is `mem` when given (the reader of an earlier read of the slot, and what reads came through
  // it), else the process's with `copies` read first.
  std::unique_ptr<ProcessContext> read_back(uint32_t pid, uint32_t generation,
                                            const lj_rec_proc& rec,
                                            std::shared_ptr<const proc::CapturedMemory> copies,
                                            std::unique_ptr<proc::ProcessMemory> mem);
  void for_each_kernel_slot(const std::function<void(uint32_t slot, lj_rec_proc& rec)>& f);

  const RecordOptions& opt_;
  const BpfSession& session_;
  ObjectCache& cache_;
  // Executables whose exec template the kernel has (record_types.h lj_rec_exec_template), by
  // (inode, dev), with the template as uploaded (forget_rows finds the rows it names).
  std::map<std::pair<uint64_t, uint32_t>, lj_rec_exec_template> exec_templates_;
  // Library files whose template the kernel has, by (inode, dev), as uploaded.
  std::map<std::pair<uint64_t, uint32_t>, lj_rec_lib_template> lib_templates_;
  // The contexts the kernel built at a fork or exec, as read back from their slot, by generation
  // (at most LJ_REC_EXEC_SLOTS: the kernel reuses its slots in turn).
  std::map<uint32_t, Read> contexts_;
  // Contexts read again because the kernel added libraries since: kept as long, for the
  // samples symbolized with them.
  std::vector<Read> replaced_;
};

}  // namespace ljprof::record
