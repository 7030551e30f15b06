#include "support/test_support.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace ljprof::test {

CommandResult run(const std::vector<std::string>& argv) {
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) {
    throw std::runtime_error("pipe2 failed");
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], 2);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid;
  int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(out_pipe[1]);
  close(err_pipe[1]);
  CommandResult result;
  if (rc != 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    result.err = std::string("spawn failed: ") + std::strerror(rc);
    return result;
  }
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  int open_fds = 2;
  char buf[65536];
  while (open_fds > 0) {
    if (poll(fds, 2, -1) < 0) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = read(fds[i].fd, buf, sizeof(buf));
      if (n > 0) {
        sinks[i]->append(buf, static_cast<size_t>(n));
      } else {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  int status = 0;
  waitpid(pid, &status, 0);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

std::vector<MatrixVariant> matrix_variants() {
  const char* env = std::getenv("LJPROF_MATRIX");
  const bool all = env != nullptr && std::string(env) == "all";
  std::ifstream in(source_dir() + "/tests/matrix/variants.txt");
  if (!in) throw std::runtime_error("cannot read tests/matrix/variants.txt");
  std::vector<MatrixVariant> out;
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string name, source, arch, cc, opt, cflags, suite;
    if (!(fields >> name >> source >> arch >> cc >> opt >> cflags >> suite) || name[0] == '#') {
      continue;
    }
    if (!all && suite != "test") continue;
    MatrixVariant v;
    v.name = name;
    v.exe = fixture("matrix/" + name + "/luajit");
    v.arm64 = arch == "arm64";
    out.push_back(v);
  }
  return out;
}

void PrintTo(const MatrixVariant& v, std::ostream* os) {
  *os << v.name;
}

std::string gtest_name(std::string name) {
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

TempDir::TempDir() {
  char tmpl[] = "/tmp/ljprof-test-XXXXXX";
  const char* made = mkdtemp(tmpl);
  if (made == nullptr) throw std::runtime_error("mkdtemp /tmp/ljprof-test-XXXXXX failed");
  path_ = made;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string fixture(const std::string& rel) {
  return fixtures_dir() + "/" + rel;
}

std::vector<RealBinary> real_binaries() {
  return {
      {"/usr/bin/tarantool", "tarantool-amd64"},
      {"/usr/bin/luajit", "luajit-amd64"},
      {"/usr/lib/x86_64-linux-gnu/libluajit-5.1.so.2", "libluajit-amd64"},
      {fixture("arm64/usr/bin/luajit"), "luajit-arm64"},
      {fixture("arm64/usr/lib/aarch64-linux-gnu/libluajit-5.1.so.2"), "libluajit-arm64"},
      {"/usr/sbin/nginx", "nginx-amd64"},
      {fixture("nginx-lua/usr/lib/nginx/modules/ngx_http_lua_module.so"), "ngx-http-lua-module"},
      {fixture("nginx-lua/usr/lib/x86_64-linux-gnu/libluajit-5.1.so.2"), "libluajit2-openresty"},
  };
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

bool file_exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

namespace {

int exit_status(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

sockaddr_in loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

}  // namespace

Background::Background(const std::vector<std::string>& argv, const std::string& log) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  if (posix_spawnp(&pid_, args[0], &fa, nullptr, args.data(), environ) != 0) pid_ = 0;
  posix_spawn_file_actions_destroy(&fa);
}

Background::~Background() {
  if (pid_ > 0 && !reaped_) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

bool Background::running() {
  return wait(0) == -1 && pid_ > 0;
}

int Background::wait(int timeout_ms) {
  if (pid_ <= 0 || reaped_) return status_;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      reaped_ = true;
      status_ = exit_status(status);
      return status_;
    }
    if (std::chrono::steady_clock::now() >= deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

char process_state(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // "PID (comm) S ...": comm may hold spaces and parentheses, the state follows the last ')'.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size()) return 0;
  return stat[close + 2];
}

bool wait_until(const std::function<bool()>& done, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(timeout_s));
  for (;;) {
    if (done()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

bool wait_for_text(const std::string& path, const std::string& text, double timeout_s) {
  return wait_until([&] { return read_text(path).find(text) != std::string::npos; }, timeout_s);
}

bool wait_until_sampling(pid_t pid, double timeout_s) {
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  const std::string fd_dir = "/proc/" + std::to_string(pid) + "/fd";
  bool exited = false;
  const bool sampling = wait_until(
      [&] {
        std::error_code ec;
        std::filesystem::directory_iterator it(fd_dir, ec);
        const char state = process_state(pid);
        if (ec || state == 0 || state == 'Z') {  // gone, or a zombie its parent has not reaped
          exited = true;
          return true;
        }
        long perf_events = 0;
        for (const auto& fd : it) {
          const auto target = std::filesystem::read_symlink(fd.path(), ec);
          if (!ec && target == "anon_inode:[perf_event]") ++perf_events;
        }
        return perf_events >= cpus;
      },
      timeout_s);
  return sampling && !exited;
}

uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

bool port_open(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in a = loopback(port);
  bool ok = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  close(fd);
  return ok;
}

int free_loopback_port() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error("socket failed");
  sockaddr_in a = loopback(0);
  socklen_t len = sizeof(a);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    close(fd);
    throw std::runtime_error("cannot bind 127.0.0.1:0");
  }
  close(fd);
  return ntohs(a.sin_port);
}

HttpResponse http_get(int port, const std::string& path, int timeout_ms) {
  HttpResponse r;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return r;
  timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in a = loopback(port);
  std::string raw;
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
    const std::string req = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size())) {
      char buf[16384];
      ssize_t n;
      while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) raw.append(buf, static_cast<size_t>(n));
    }
  }
  close(fd);
  const size_t head_end = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.", 0) != 0 || head_end == std::string::npos) return r;
  r.status = std::atoi(raw.c_str() + raw.find(' ') + 1);
  r.body = raw.substr(head_end + 4);
  return r;
}

CommandResult go_tool_pprof(const std::string& scratch_dir, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"/usr/bin/env",
                                   "HOME=" + scratch_dir,
                                   "GOCACHE=" + scratch_dir + "/gocache",
                                   "GOPATH=" + scratch_dir + "/gopath",
                                   "PPROF_TMPDIR=" + scratch_dir,
                                   "/usr/bin/go",
                                   "tool",
                                   "pprof"};
  argv.insert(argv.end(), args.begin(), args.end());
  return run(argv);
}

std::map<std::string, PprofTopRow> parse_pprof_top(const std::string& out) {
  std::map<std::string, PprofTopRow> rows;
  std::istringstream in(out);
  std::string line;
  bool table = false;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string flat, flat_pct, sum_pct, cum, cum_pct, name;
    if (!(fields >> flat >> flat_pct >> sum_pct >> cum >> cum_pct)) continue;
    if (flat == "flat") {
      table = true;
      continue;
    }
    if (!table) continue;
    std::getline(fields >> std::ws, name);
    rows[name] = {flat, cum};
  }
  return rows;
}

std::vector<PprofRawSample> parse_pprof_raw_samples(const std::string& out) {
  std::vector<PprofRawSample> samples;
  static const std::regex sample(R"(^\s+(\d+)(?:\s+\d+)+:)"), label(R"((\w+):\[([^\]]*)\])");
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Locations", 0) == 0) break;  // the samples' section is over
    std::smatch m;
    if (std::regex_search(line, m, sample)) {
      samples.push_back({std::stoll(m[1]), {}});
      continue;
    }
    if (samples.empty()) continue;
    for (std::sregex_iterator it(line.begin(), line.end(), label), end; it != end; ++it) {
      samples.back().labels[(*it)[1]] = (*it)[2];
    }
  }
  return samples;
}

}  // namespace ljprof::test
