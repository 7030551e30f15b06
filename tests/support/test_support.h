// Helpers shared by the tests: running outside oracles (readelf, gdb, the targets themselves)
// and locating the real binaries the tests run against. A missing real target is a test
// failure, never a skip: `make test` installs everything through scripts/bootstrap.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <map>
#include <string>
#include <vector>

namespace ljprof::test {

struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs `argv` (no shell) and captures stdout/stderr.
CommandResult run(const std::vector<std::string>& argv);

// Where this build's files are. Defined in a file CMake generates (test_paths.cc) so that only
// that file names the clone's location: every other test source compiles the same in every
// clone and hits the compiler cache.
std::string ljprof_bin();            // the ljprof executable of this build
std::string source_dir();            // the repository
std::string fixtures_dir();          // what scripts/bootstrap extracted (build/fixtures)
std::string record_workloads_dir();  // tests/record/workloads
std::string portable_ljprof_bin();   // packaging/portable's executable; empty when not built
std::string arm64_ljprof_bin();      // ljprof of the arm64 cross-build (make arm64)

// `fixtures_dir()` joined with `rel`.
std::string fixture(const std::string& rel);

// The real binaries of the foundation matrix (absolute paths).
struct RealBinary {
  std::string path;
  std::string label;
};
std::vector<RealBinary> real_binaries();

// One LuaJIT build of the matrix (tests/matrix/variants.txt), built from Debian's source
// packages by scripts/luajit-matrix into fixtures_dir()/matrix/NAME/luajit.
struct MatrixVariant {
  std::string name;  // "luajit-arm64-clang-O2"
  std::string exe;   // the luajit executable (with DWARF)
  bool arm64 = false;
};
// The variants `make test` checks (suite `test`), or all of them when LJPROF_MATRIX=all is set
// (`make matrix`). A listed variant that was not built is the test's failure, never a skip.
std::vector<MatrixVariant> matrix_variants();
// gtest prints a parameter in test names and failures: show the variant, not its bytes.
void PrintTo(const MatrixVariant& v, std::ostream* os);
// `name` with every character gtest does not allow in a test name replaced by '_'.
std::string gtest_name(std::string name);

std::vector<uint8_t> read_file(const std::string& path);
// A file's bytes as a string (a log, a report a workload wrote); "" if it cannot be read.
std::string read_text(const std::string& path);

// A fresh directory under /tmp (ljprof-test-XXXXXX), removed with everything in it when the
// guard goes away.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};
bool file_exists(const std::string& path);

// A background process (no shell), killed (SIGKILL) and reaped when the guard goes away unless
// wait() has already reaped it. Its stdout and stderr go to `log` (truncated) or /dev/null.
class Background {
 public:
  explicit Background(const std::vector<std::string>& argv, const std::string& log = "/dev/null");
  ~Background();
  Background(const Background&) = delete;
  Background& operator=(const Background&) = delete;
  pid_t pid() const { return pid_; }
  // Not exited yet (an exited process is reaped here and its status kept for wait()).
  bool running();
  // Waits up to `timeout_ms` for the exit: the status as run() reports it (128+N for signal N),
  // or -1 if it is still running.
  int wait(int timeout_ms);

 private:
  pid_t pid_ = 0;
  bool reaped_ = false;
  int status_ = -1;
};

// The state letter of /proc/PID/stat ('R', 'S', 'T' stopped, 't' tracing stop, ...), or 0
// when the process is gone.
char process_state(pid_t pid);

// Waits, polling every 20 ms, until `done` holds (true) or `timeout_s` passes (false). The tests
// wait for the state they need this way rather than sleeping a fixed time: machines differ 2.5x
// in speed either way, so a timeout is a generous bound on a failure, never the expected wait.
bool wait_until(const std::function<bool()>& done, double timeout_s);
// Waits until the file at `path` contains `text` (a workload's "ready" line, a log's line).
bool wait_for_text(const std::string& path, const std::string& text, double timeout_s);
// Waits until the `ljprof record` or `ljprof agent` process `pid` samples: it holds a perf event
// on every online CPU (record/bpf_session.cc start_sampling, which comes after its kernel program
// is loaded, its -p targets set up and, with -a, its first /proc scan). False if it exited first.
// `ljprof record -q` prints nothing before it ends, so this is the only sign from outside.
bool wait_until_sampling(pid_t pid, double timeout_s);

// CLOCK_MONOTONIC in nanoseconds: the clock the workloads stamp their rate logs with.
uint64_t monotonic_ns();

// Something accepts TCP connections on 127.0.0.1:`port`.
bool port_open(int port);
// A port on 127.0.0.1 that was free a moment ago (bound to port 0 and released), for a server
// the test configures; only the loopback interface is ever used.
int free_loopback_port();

struct HttpResponse {
  int status = 0;  // 0: no connection or no complete status line
  std::string body;
};
// One HTTP/1.0 GET to 127.0.0.1:`port` (the server closes the connection after the response);
// send and receive each time out after `timeout_ms`.
HttpResponse http_get(int port, const std::string& path, int timeout_ms);

// `go tool pprof ARGS...` with a private HOME/GOCACHE/GOPATH/PPROF_TMPDIR under `scratch_dir`:
// the tests must not depend on, or write to, the user's Go state.
CommandResult go_tool_pprof(const std::string& scratch_dir, const std::vector<std::string>& args);

// The table of `go tool pprof -top` output: function name -> its flat and cum columns as
// printed ("70ms", "7", ...).
struct PprofTopRow {
  std::string flat;
  std::string cum;
};
std::map<std::string, PprofTopRow> parse_pprof_top(const std::string& out);

// The samples of `go tool pprof -raw` output: each one's first value (COUNT of its
// "COUNT VALUE...: LOCATIONS" line) and its labels, the "key:[value]" pairs on the lines under
// it (string and numeric labels print on lines of their own).
struct PprofRawSample {
  int64_t count = 0;
  std::map<std::string, std::string> labels;
};
std::vector<PprofRawSample> parse_pprof_raw_samples(const std::string& out);

}  // namespace ljprof::test
