// Real cores for the core-reader tests, made at test time in a scratch directory, and the
// outside oracles they are checked against (gdb / gdb-multiarch on the same core, the
// workload's own view of its memory map, readelf on the mapped files).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ljprof::test {

struct MadeCore {
  std::string core;    // path of the core file ("" when none was written)
  std::string output;  // the workload's stdout
  std::string error;   // what went wrong, for the test message
  int pid = 0;
};

// Runs `argv` in `dir` with RLIMIT_CORE unlimited so that it dumps core through the kernel
// (`/proc/sys/kernel/core_pattern` must name a plain file; it is checked and reported).
MadeCore kernel_core(const std::string& dir, const std::vector<std::string>& argv);
// Starts `argv`, waits until it prints a line starting with "ready", runs `gcore` on it and
// kills it.
MadeCore gcore_of(const std::string& dir, const std::vector<std::string>& argv);
// Runs the arm64 fixture luajit under qemu-aarch64-static with `lua` (and `guest_env`, VAR=VALUE
// entries for the guest's environment); qemu writes the guest core
// (qemu_<prog>_<time>_<pid>.core). A directory named `core` keeps the kernel from also writing
// the host qemu's core.
MadeCore qemu_arm64_core(const std::string& dir, const std::string& lua,
                         const std::vector<std::string>& guest_env = {});

// gdb -batch on `exe` + `core` with `commands` (each one -ex). `multiarch` selects
// gdb-multiarch with the AArch64 sysroot.
std::string gdb_batch(const std::string& exe, const std::string& core,
                      const std::vector<std::string>& commands, bool multiarch = false,
                      const std::string& sysroot = "");

// `thread apply all info registers` output -> LWP -> register name -> value.
std::map<uint32_t, std::map<std::string, uint64_t>> parse_gdb_thread_registers(
    const std::string& out);
// `thread apply all x/Nxb EXPR` output -> LWP -> bytes (nullopt: gdb could not read).
std::map<uint32_t, std::optional<std::vector<uint8_t>>> parse_gdb_thread_bytes(
    const std::string& out);

// `x/Nxb ADDR` output lines -> line address -> the bytes on that line.
std::map<uint64_t, std::vector<uint8_t>> parse_gdb_x_lines(const std::string& out);

struct ProcMapping {
  uint64_t start = 0, end = 0, offset = 0;
  std::string perms, path;
};
// gdb `info proc mappings` rows (Start End Size Offset objfile) or /proc/PID/maps lines.
std::vector<ProcMapping> parse_gdb_mappings(const std::string& out);
std::vector<ProcMapping> parse_proc_maps(const std::string& text);

// `readelf -n FILE`'s Build ID, or "" if none.
std::string readelf_build_id(const std::string& file);

}  // namespace ljprof::test
