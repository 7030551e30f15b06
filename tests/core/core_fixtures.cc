#include "core/core_fixtures.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "support/test_support.h"

extern char** environ;

namespace ljprof::test {

namespace {

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.is_regular_file()) names.push_back(e.path().filename().string());
  }
  return names;
}

int pid_from_output(const std::string& out) {
  std::smatch m;
  static const std::regex re(R"((?:ready|pid) (\d+))");
  if (std::regex_search(out, m, re)) return std::stoi(m[1]);
  return 0;
}

}  // namespace

MadeCore kernel_core(const std::string& dir, const std::vector<std::string>& argv) {
  MadeCore made;
  std::string pattern = read_text("/proc/sys/kernel/core_pattern");
  while (!pattern.empty() && (pattern.back() == '\n' || pattern.back() == ' ')) pattern.pop_back();
  if (pattern.empty() || pattern[0] == '|' || pattern.find('/') != std::string::npos ||
      pattern.find('%') != std::string::npos) {
    made.error = "kernel.core_pattern is '" + pattern +
                 "': these tests need a plain file name (e.g. 'core') to get a kernel core in "
                 "the scratch directory";
    return made;
  }
  std::vector<std::string> cmd = {
      "bash", "-c", "cd \"$1\" && shift && ulimit -c unlimited && exec \"$@\"", "bash", dir};
  cmd.insert(cmd.end(), argv.begin(), argv.end());
  CommandResult r = run(cmd);
  made.output = r.out;
  made.pid = pid_from_output(r.out);
  for (const std::string& name : list_dir(dir)) {
    if (name == pattern || name.rfind(pattern + ".", 0) == 0) made.core = dir + "/" + name;
  }
  if (made.core.empty()) {
    made.error = "no core file '" + pattern + "' in " + dir + " (exit " +
                 std::to_string(r.exit_code) + ", stderr: " + r.err + ")";
  }
  return made;
}

MadeCore gcore_of(const std::string& dir, const std::vector<std::string>& argv) {
  MadeCore made;
  int out_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) {
    made.error = "pipe2 failed";
    return made;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(out_pipe[1]);
  if (rc != 0) {
    close(out_pipe[0]);
    made.error = std::string("spawn failed: ") + std::strerror(rc);
    return made;
  }
  made.pid = pid;
  // Wait (at most 20 s) for the "ready" line: the workload is then in its loop.
  pollfd pfd{out_pipe[0], POLLIN, 0};
  char buf[4096];
  for (int waited = 0; made.output.find('\n') == std::string::npos && waited < 200; ++waited) {
    if (poll(&pfd, 1, 100) > 0) {
      ssize_t n = read(out_pipe[0], buf, sizeof(buf));
      if (n <= 0) break;
      made.output.append(buf, static_cast<size_t>(n));
    }
  }
  if (made.output.rfind("ready", 0) == 0) {
    CommandResult g = run({"gcore", "-o", dir + "/g", std::to_string(pid)});
    std::string core = dir + "/g." + std::to_string(pid);
    if (file_exists(core)) {
      made.core = core;
    } else {
      made.error = "gcore wrote no " + core + ": " + g.out + g.err;
    }
  } else {
    made.error = "workload did not print 'ready': " + made.output;
  }
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  close(out_pipe[0]);
  return made;
}

MadeCore qemu_arm64_core(const std::string& dir, const std::string& lua,
                         const std::vector<std::string>& guest_env) {
  MadeCore made;
  std::filesystem::create_directory(dir + "/core");
  std::vector<std::string> argv = {"bash", "-c",
                                   "cd \"$1\" && shift && ulimit -c unlimited && exec "
                                   "qemu-aarch64-static -L /usr/aarch64-linux-gnu \"$@\"",
                                   "bash", dir};
  for (const std::string& e : guest_env) argv.insert(argv.end(), {"-E", e});
  argv.insert(argv.end(), {fixture("arm64/usr/bin/luajit"), "-e", lua});
  CommandResult r = run(argv);
  made.output = r.out;
  made.pid = pid_from_output(r.out);
  for (const std::string& name : list_dir(dir)) {
    if (name.rfind("qemu_", 0) == 0 && name.size() > 5 &&
        name.compare(name.size() - 5, 5, ".core") == 0) {
      made.core = dir + "/" + name;
    }
  }
  if (made.core.empty()) {
    made.error = "qemu wrote no guest core in " + dir + " (exit " + std::to_string(r.exit_code) +
                 ", stderr: " + r.err + ")";
  }
  return made;
}

std::string gdb_batch(const std::string& exe, const std::string& core,
                      const std::vector<std::string>& commands, bool multiarch,
                      const std::string& sysroot) {
  std::vector<std::string> argv = {multiarch ? "gdb-multiarch" : "gdb",
                                   "-batch",
                                   "-nx",
                                   "-ex",
                                   "set debuginfod enabled off",
                                   "-ex",
                                   "set pagination off",
                                   "-ex",
                                   "set width 0"};
  if (!sysroot.empty()) {
    argv.push_back("-ex");
    argv.push_back("set sysroot " + sysroot);
  }
  for (const std::string& c : commands) {
    argv.push_back("-ex");
    argv.push_back(c);
  }
  argv.push_back(exe);
  argv.push_back(core);
  return run(argv).out;
}

namespace {
const std::regex& thread_header() {
  static const std::regex re(R"(^Thread \d+ .*LWP (\d+))");
  return re;
}
}  // namespace

std::map<uint32_t, std::map<std::string, uint64_t>> parse_gdb_thread_registers(
    const std::string& out) {
  std::map<uint32_t, std::map<std::string, uint64_t>> result;
  static const std::regex reg(R"(^([a-z_][a-z0-9_]*)\s+0x([0-9a-f]+)\s)");
  std::istringstream in(out);
  std::string line;
  std::map<std::string, uint64_t>* current = nullptr;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_search(line, m, thread_header())) {
      current = &result[static_cast<uint32_t>(std::stoul(m[1]))];
    } else if (current != nullptr && std::regex_search(line, m, reg)) {
      (*current)[m[1]] = std::stoull(m[2], nullptr, 16);
    }
  }
  return result;
}

std::map<uint32_t, std::optional<std::vector<uint8_t>>> parse_gdb_thread_bytes(
    const std::string& out) {
  std::map<uint32_t, std::optional<std::vector<uint8_t>>> result;
  std::istringstream in(out);
  std::string line;
  std::optional<std::vector<uint8_t>>* current = nullptr;
  static const std::regex byte(R"(\t0x([0-9a-f]{2}))");
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_search(line, m, thread_header())) {
      current = &result[static_cast<uint32_t>(std::stoul(m[1]))];
      continue;
    }
    if (current == nullptr || line.rfind("0x", 0) != 0) continue;
    if (!current->has_value()) current->emplace();
    for (auto it = std::sregex_iterator(line.begin(), line.end(), byte);
         it != std::sregex_iterator(); ++it) {
      (*current)->push_back(static_cast<uint8_t>(std::stoul((*it)[1], nullptr, 16)));
    }
  }
  return result;
}

std::map<uint64_t, std::vector<uint8_t>> parse_gdb_x_lines(const std::string& out) {
  std::map<uint64_t, std::vector<uint8_t>> lines;
  static const std::regex head(R"(^0x([0-9a-f]+)(?: <[^>]*>)?:)");
  static const std::regex byte(R"(\t0x([0-9a-f]{2}))");
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (!std::regex_search(line, m, head)) continue;
    std::vector<uint8_t>& bytes = lines[std::stoull(m[1], nullptr, 16)];
    for (auto it = std::sregex_iterator(line.begin(), line.end(), byte);
         it != std::sregex_iterator(); ++it) {
      bytes.push_back(static_cast<uint8_t>(std::stoul((*it)[1], nullptr, 16)));
    }
  }
  return lines;
}

std::vector<ProcMapping> parse_gdb_mappings(const std::string& out) {
  std::vector<ProcMapping> rows;
  static const std::regex row(
      R"(^\s*0x([0-9a-f]+)\s+0x([0-9a-f]+)\s+0x[0-9a-f]+\s+0x([0-9a-f]+)\s+(?:([rwxps-]{4})\s+)?(\S.*)$)");
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (!std::regex_search(line, m, row)) continue;
    rows.push_back({std::stoull(m[1], nullptr, 16), std::stoull(m[2], nullptr, 16),
                    std::stoull(m[3], nullptr, 16), m[4], m[5]});
  }
  return rows;
}

std::vector<ProcMapping> parse_proc_maps(const std::string& text) {
  std::vector<ProcMapping> rows;
  static const std::regex row(
      R"(^([0-9a-f]+)-([0-9a-f]+) ([rwxps-]{4}) ([0-9a-f]+) \S+ \d+\s*(.*)$)");
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (!std::regex_search(line, m, row)) continue;
    rows.push_back({std::stoull(m[1], nullptr, 16), std::stoull(m[2], nullptr, 16),
                    std::stoull(m[4], nullptr, 16), m[3], m[5]});
  }
  return rows;
}

std::string readelf_build_id(const std::string& file) {
  CommandResult r = run({"readelf", "-n", "--wide", file});
  std::smatch m;
  static const std::regex re(R"(Build ID: ([0-9a-f]+))");
  if (std::regex_search(r.out, m, re)) return m[1];
  return "";
}

}  // namespace ljprof::test
