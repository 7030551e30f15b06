// record/launched_command.cc: starting the followed command behind a gate, and reaping it.
#include "record/launched_command.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace ljprof::record {

Status LaunchedCommand::launch(const std::vector<std::string>& argv,
                               const std::function<void(uint32_t)>& follow) {
  int gate[2];
  if (::pipe2(gate, O_CLOEXEC) != 0) return make_error("pipe: {}", std::strerror(errno));
  pid_ = ::fork();
  if (pid_ < 0) return make_error("fork: {}", std::strerror(errno));
  if (pid_ == 0) {
    // Wait until the parent follows this pid, so the exec is seen by the kernel program.
    ::close(gate[1]);
    char b;
    if (::read(gate[0], &b, 1) != 1) ::_exit(127);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    std::fprintf(stderr, "ljprof record: cannot run %s: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  ::close(gate[0]);
  follow(static_cast<uint32_t>(pid_));
  const char go = 1;
  const bool ok = ::write(gate[1], &go, 1) == 1;
  ::close(gate[1]);
  if (!ok) return make_error("cannot start {}: {}", argv[0], std::strerror(errno));
  return Ok{};
}

bool LaunchedCommand::exited() {
  if (pid_ > 0 && !exited_) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
  }
  return exited_;
}

}  // namespace ljprof::record
