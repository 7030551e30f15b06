// record/launched_command.h: the command `ljprof record -- COMMAND ARGS...` runs and follows —
// started only once it is followed, held from its exec until its context is published, so its
// first instructions are sampled like its last — and its exit status.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/result.h"

namespace ljprof::record {

class LaunchedCommand {
 public:
  // Forks `argv`, has `follow` follow the child's pid, then lets the child exec. Where the
  // kernel lets ljprof trace its own child (ptrace), the child is held at two points while
  // `publish` publishes its unwind context: right after its exec (the executable, the program
  // interpreter and the vDSO mapped, nothing run yet), and at its first syscall from outside
  // the program interpreter, when that has mapped every library it links (its memory is never
  // written). Then it runs untraced. Without ptrace it runs at once, and its first
  // milliseconds count as "no unwind context yet". `note` says why it was not held throughout.
  Status launch(const std::vector<std::string>& argv, const std::function<void(uint32_t)>& follow,
                const std::function<void(uint32_t)>& publish);
  // Whether the command ended, asked without waiting; its status is kept from then on.
  bool exited();
  // Its exit status (128+N for signal N), or -1: not launched, or still running when last asked.
  int exit_status() const { return status_; }
  // Why the command was not held until its context was published ("" when it was).
  const std::string& note() const { return note_; }

 private:
  // Held by ptrace from the exec on: publishes at the exec and once the interpreter is done,
  // then detaches.
  void hold_until_published(const std::function<void(uint32_t)>& publish);
  // Waits for the child's next ptrace stop, passing on signals meant for it; false once it
  // exited (its status kept) or cannot be waited for.
  bool next_stop(int& status);
  void keep_status(int status);

  pid_t pid_ = -1;
  int status_ = -1;
  bool exited_ = false;
  std::string note_;
};

}  // namespace ljprof::record
