// record/launched_command.h: the command `ljprof record -- COMMAND ARGS...` runs and follows —
// started only once it is followed, so the kernel program sees its exec — and its exit status.
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
  // Forks `argv`, has `follow` follow the child's pid, then lets the child exec.
  Status launch(const std::vector<std::string>& argv, const std::function<void(uint32_t)>& follow);
  // Whether the command ended, asked without waiting; its status is kept from then on.
  bool exited();
  // Its exit status (128+N for signal N), or -1: not launched, or still running when last asked.
  int exit_status() const { return status_; }

 private:
  pid_t pid_ = -1;
  int status_ = -1;
  bool exited_ = false;
};

}  // namespace ljprof::record
