// Helpers shared by the tests: running outside oracles (readelf, gdb, the targets themselves)
// and locating the real binaries the tests run against. A missing real target is a test
// failure, never a skip: `make test` installs everything through scripts/bootstrap.
#pragma once

#include <cstdint>
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

// `build/fixtures` (or the configured fixture dir) joined with `rel`.
std::string fixture(const std::string& rel);

// The real binaries of the foundation matrix (absolute paths).
struct RealBinary {
  std::string path;
  std::string label;
};
std::vector<RealBinary> real_binaries();

std::vector<uint8_t> read_file(const std::string& path);
bool file_exists(const std::string& path);

}  // namespace ljprof::test
