// record/launched_command.cc: starting the followed command behind a gate, holding it until its
// context is published, and reaping it.
#include "record/launched_command.h"

#include <elf.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "proc/proc_maps.h"
#include "record/exec_template.h"

namespace ljprof::record {
namespace {

// The program counter of the stopped tracee `pid`, 0 if unreadable (x86-64 user_regs_struct.rip,
// arm64 user_regs_struct.pc through NT_PRSTATUS).
uint64_t tracee_pc(pid_t pid) {
#if defined(__x86_64__)
  user_regs_struct regs{};
  if (::ptrace(PTRACE_GETREGS, pid, 0, &regs) != 0) return 0;
  return regs.rip;
#elif defined(__aarch64__)
  user_regs_struct regs{};
  iovec io{&regs, sizeof(regs)};
  if (::ptrace(PTRACE_GETREGSET, pid, NT_PRSTATUS, &io) != 0) return 0;
  return regs.pc;
#else
  (void)pid;
  return 0;
#endif
}

// The addresses of the program interpreter's mappings in `pid` (the file mapped at AT_BASE, the
// first to the last of its mappings); {0, 0} when it has none (a static executable).
std::pair<uint64_t, uint64_t> interpreter_range(uint32_t pid) {
  auto auxv = read_auxv(pid);
  auto maps = proc::read_proc_maps(pid);
  const uint64_t base = auxv.ok() ? auxv_value(*auxv, LJ_REC_ANCHOR_BASE) : 0;
  if (base == 0 || !maps.ok()) return {0, 0};
  std::string path;
  for (const proc::MapEntry& m : *maps) {
    if (m.start == base) path = m.path;
  }
  uint64_t lo = 0, hi = 0;
  for (const proc::MapEntry& m : *maps) {
    if (path.empty() || m.path != path) continue;
    if (lo == 0 || m.start < lo) lo = m.start;
    hi = std::max(hi, m.end);
  }
  return {lo, hi};
}

bool is_exec_stop(int status) {
  return WIFSTOPPED(status) && (status >> 8) == (SIGTRAP | (PTRACE_EVENT_EXEC << 8));
}

// A syscall stop under PTRACE_O_TRACESYSGOOD (ptrace(2)).
bool is_syscall_stop(int status) {
  return WIFSTOPPED(status) && WSTOPSIG(status) == (SIGTRAP | 0x80);
}

}  // namespace

Status LaunchedCommand::launch(const std::vector<std::string>& argv,
                               const std::function<void(uint32_t)>& follow,
                               const std::function<void(uint32_t)>& publish) {
  // `gate`: the child waits on it until it is followed. `report`: closed by a successful exec
  // (O_CLOEXEC), or carrying execvp's errno.
  int gate[2], report[2];
  if (::pipe2(gate, O_CLOEXEC) != 0) return make_error("pipe: {}", std::strerror(errno));
  if (::pipe2(report, O_CLOEXEC) != 0) {
    ::close(gate[0]);
    ::close(gate[1]);
    return make_error("pipe: {}", std::strerror(errno));
  }
  pid_ = ::fork();
  if (pid_ < 0) return make_error("fork: {}", std::strerror(errno));
  if (pid_ == 0) {
    ::close(gate[1]);
    ::close(report[0]);
    char b;
    if (::read(gate[0], &b, 1) != 1) ::_exit(127);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    const int err = errno;
    (void)!::write(report[1], &err, sizeof(err));
    ::_exit(127);
  }
  ::close(gate[0]);
  ::close(report[1]);
  follow(static_cast<uint32_t>(pid_));
  // Traced from before the exec (PTRACE_SEIZE: no stop now), stopped right after it; killed
  // should ljprof die while it is held (PTRACE_O_EXITKILL).
  const bool traced = ::ptrace(PTRACE_SEIZE, pid_, 0,
                               PTRACE_O_TRACEEXEC | PTRACE_O_TRACESYSGOOD | PTRACE_O_EXITKILL) == 0;
  if (!traced) {
    note_ = fmt::format("not held until its unwind context was published (ptrace: {})",
                        std::strerror(errno));
  }
  const char go = 1;
  const bool ok = ::write(gate[1], &go, 1) == 1;
  ::close(gate[1]);
  int exec_errno = 0;
  ssize_t got;
  while ((got = ::read(report[0], &exec_errno, sizeof(exec_errno))) < 0 && errno == EINTR) {
  }
  ::close(report[0]);
  if (!ok || got == sizeof(exec_errno)) {
    int status = 0;
    while (::waitpid(pid_, &status, __WALL) == pid_ && WIFSTOPPED(status)) {
      ::ptrace(PTRACE_CONT, pid_, 0, 0);
    }
    keep_status(status);
    return make_error("cannot run {}: {}", argv[0], std::strerror(ok ? exec_errno : errno));
  }
  if (traced) hold_until_published(publish);
  return Ok{};
}

void LaunchedCommand::hold_until_published(const std::function<void(uint32_t)>& publish) {
  const uint32_t pid = static_cast<uint32_t>(pid_);
  int status = 0;
  bool stopped;
  while ((stopped = next_stop(status)) && !is_exec_stop(status)) {
    ::ptrace(PTRACE_CONT, pid_, 0, 0);  // a stop that is not a signal for it (group stop)
  }
  if (!stopped) return;
  publish(pid);
  // On through the program interpreter, stopping at its syscalls: ld.so makes its own (it links
  // no libc), so the first syscall made from outside it comes from the program's code, after
  // every library it links was mapped and relocated. Hardware breakpoints at the entry point
  // would stop it there too, but hypervisors do not all run the guest's debug registers.
  const auto [lo, hi] = interpreter_range(pid);
  if (lo != 0) {
    constexpr int kMaxLoaderSyscalls = 4096;
    int n = 0;
    for (; n < kMaxLoaderSyscalls; ++n) {
      if (::ptrace(PTRACE_SYSCALL, pid_, 0, 0) != 0) break;
      while ((stopped = next_stop(status)) && !is_syscall_stop(status)) {
        ::ptrace(PTRACE_SYSCALL, pid_, 0, 0);
      }
      if (!stopped) return;
      const uint64_t pc = tracee_pc(pid_);
      if (pc == 0 || pc < lo || pc >= hi) break;
    }
    if (n == kMaxLoaderSyscalls) {
      note_ = fmt::format(
          "held at its exec only: the program interpreter made more than {} "
          "syscalls",
          kMaxLoaderSyscalls);
    }
    publish(pid);
  }
  ::ptrace(PTRACE_DETACH, pid_, 0, 0);
}

bool LaunchedCommand::next_stop(int& status) {
  for (;;) {
    if (::waitpid(pid_, &status, __WALL) != pid_) {
      if (errno == EINTR) continue;
      return false;
    }
    if (!WIFSTOPPED(status)) {
      keep_status(status);
      return false;
    }
    const int sig = WSTOPSIG(status);
    // A signal sent to it while held (not ptrace's own stops): delivered as it would have been.
    if ((status >> 16) == 0 && sig != SIGTRAP && !is_syscall_stop(status)) {
      ::ptrace(PTRACE_CONT, pid_, 0, sig);
      continue;
    }
    return true;
  }
}

void LaunchedCommand::keep_status(int status) {
  exited_ = true;
  status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

bool LaunchedCommand::exited() {
  if (pid_ > 0 && !exited_) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) keep_status(status);
  }
  return exited_;
}

}  // namespace ljprof::record
