// proc/proc_maps.h: a live process's mappings (/proc/PID/maps) and memory (/proc/PID/mem).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "abi/read_mem.h"
#include "common/result.h"
#include "proc/captured_memory.h"

namespace ljprof::proc {

struct MapEntry {
  uint64_t start = 0;
  uint64_t end = 0;
  uint64_t offset = 0;  // file offset of `start`
  bool readable = false;
  bool executable = false;
  bool writable = false;
  bool shared = false;  // MAP_SHARED ("s"), else private ("p")
  uint64_t inode = 0;
  std::string dev;   // "fd:01"
  std::string path;  // "" for anonymous memory; "[vdso]", "/usr/lib/...", "... (deleted)"
  bool file_backed() const { return inode != 0 && !path.empty() && path[0] == '/'; }
  // `dev` in the kernel's own encoding (MAJOR << 20 | MINOR, include/linux/kdev_t.h: what
  // /proc/PID/maps prints as "%02x:%02x" of the file's inode->i_sb->s_dev), 0 if malformed.
  uint32_t kernel_dev() const;
};

// At most this many lines are read from one maps file: a process with more is refused rather
// than half-described.
inline constexpr size_t kMaxMapLines = 1u << 16;

// Parses the text of /proc/PID/maps (proc(5)); `what` names the source in errors.
Result<std::vector<MapEntry>> parse_proc_maps(std::string_view text, const std::string& what);
Result<std::vector<MapEntry>> read_proc_maps(uint32_t pid);

// A mapping's file as the process sees it (/proc/PID/map_files/START-END): in another mount
// namespace, or deleted since it was mapped, this is still the right file.
std::string map_files_path(uint32_t pid, const MapEntry& map);

// Reads another process's memory through /proc/PID/mem with pread: the contract of
// abi/read_mem.h (all or nothing, dst zeroed on failure). The file stays open until the object
// dies, so reads keep working while the process lives, and fail (never block) once it exited.
// One range of another process's memory to read in a batch (ProcessMemory::read_ranges).
struct MemoryRange {
  uint64_t addr = 0;
  uint32_t len = 0;
};

class ProcessMemory {
 public:
  static Result<std::unique_ptr<ProcessMemory>> open(uint32_t pid);
  // A process that exited before its memory was opened: every read fails but those of what was
  // captured of it (use_captured), the kernel's copies from sample time.
  static std::unique_ptr<ProcessMemory> gone(uint32_t pid);
  ~ProcessMemory();
  ProcessMemory(const ProcessMemory&) = delete;
  ProcessMemory& operator=(const ProcessMemory&) = delete;

  ljprof_mem_reader reader() const;
  uint32_t pid() const { return pid_; }
  int read(uint64_t addr, void* dst, uint32_t len) const;
  // Many ranges in a few system calls (process_vm_readv, up to 1024 ranges a call), where one
  // pread of /proc/PID/mem each would cost a system call and a kernel page allocation apiece:
  // `bytes` gets the ranges back to back, and the result says for each range whether it was
  // read. process_vm_readv names the process by pid, which a new process could have taken after
  // this one exited; so the batch is kept only when a read through the /proc/PID/mem file opened
  // at open() (which fails once its process exited) succeeds after it — else nothing was read.
  std::vector<bool> read_ranges(std::span<const MemoryRange> ranges,
                                std::vector<uint8_t>& bytes) const;
  // Bytes the kernel copied from this process at sample time, read before its memory (null:
  // none). Shared with the recorder, which adds to it as copies arrive.
  void use_captured(std::shared_ptr<const CapturedMemory> captured) {
    captured_ = std::move(captured);
  }

 private:
  ProcessMemory(int fd, uint32_t pid) : fd_(fd), pid_(pid) {}
  int fd_ = -1;
  uint32_t pid_ = 0;
  std::shared_ptr<const CapturedMemory> captured_;
};

}  // namespace ljprof::proc
