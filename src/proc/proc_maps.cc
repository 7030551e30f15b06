#include "proc/proc_maps.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

namespace ljprof::proc {

namespace {

bool parse_hex(std::string_view s, uint64_t* out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out, 16);
  return ec == std::errc() && p == s.data() + s.size();
}

// Splits off the next space-separated field.
std::string_view next_field(std::string_view* line) {
  size_t i = 0;
  while (i < line->size() && (*line)[i] == ' ') ++i;
  size_t j = i;
  while (j < line->size() && (*line)[j] != ' ') ++j;
  std::string_view field = line->substr(i, j - i);
  *line = line->substr(j);
  return field;
}

}  // namespace

uint32_t MapEntry::kernel_dev() const {
  const size_t colon = dev.find(':');
  uint64_t major = 0, minor = 0;
  if (colon == std::string::npos || !parse_hex(std::string_view(dev).substr(0, colon), &major) ||
      !parse_hex(std::string_view(dev).substr(colon + 1), &minor) || major >= (1u << 12) ||
      minor >= (1u << 20)) {
    return 0;
  }
  return static_cast<uint32_t>(major << 20 | minor);
}

Result<std::vector<MapEntry>> parse_proc_maps(std::string_view text, const std::string& what) {
  std::vector<MapEntry> out;
  size_t line_no = 0;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++line_no;
    if (line.empty()) continue;
    if (out.size() >= kMaxMapLines) {
      return make_error("{}: more than {} mappings; refusing a partial view", what, kMaxMapLines);
    }
    // start-end perms offset dev inode [path]
    MapEntry e;
    std::string_view range = next_field(&line);
    std::string_view perms = next_field(&line);
    std::string_view offset = next_field(&line);
    std::string_view dev = next_field(&line);
    std::string_view inode = next_field(&line);
    const size_t dash = range.find('-');
    uint64_t ino = 0;
    if (dash == std::string_view::npos || !parse_hex(range.substr(0, dash), &e.start) ||
        !parse_hex(range.substr(dash + 1), &e.end) || e.end <= e.start || perms.size() != 4 ||
        !parse_hex(offset, &e.offset) || dev.empty() ||
        std::from_chars(inode.data(), inode.data() + inode.size(), ino).ec != std::errc()) {
      return make_error("{}:{}: not a proc(5) maps line", what, line_no);
    }
    e.readable = perms[0] == 'r';
    e.executable = perms[2] == 'x';
    e.writable = perms[1] == 'w';
    e.shared = perms[3] == 's';
    e.inode = ino;
    e.dev = std::string(dev);
    size_t i = 0;
    while (i < line.size() && line[i] == ' ') ++i;
    e.path = std::string(line.substr(i));
    out.push_back(std::move(e));
  }
  return out;
}

Result<std::vector<MapEntry>> read_proc_maps(uint32_t pid) {
  const std::string path = fmt::format("/proc/{}/maps", pid);
  std::ifstream in(path);
  if (!in) return make_error("{}: cannot open: {}", path, std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return make_error("{}: read failed", path);
  return parse_proc_maps(text.str(), path);
}

std::string map_files_path(uint32_t pid, const MapEntry& map) {
  return fmt::format("/proc/{}/map_files/{:x}-{:x}", pid, map.start, map.end);
}

Result<std::unique_ptr<ProcessMemory>> ProcessMemory::open(uint32_t pid) {
  const std::string path = fmt::format("/proc/{}/mem", pid);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return make_error("{}: cannot open: {}", path, std::strerror(errno));
  return std::unique_ptr<ProcessMemory>(new ProcessMemory(fd, pid));
}

std::unique_ptr<ProcessMemory> ProcessMemory::gone(uint32_t pid) {
  return std::unique_ptr<ProcessMemory>(new ProcessMemory(-1, pid));
}

std::vector<bool> ProcessMemory::read_ranges(std::span<const MemoryRange> ranges,
                                             std::vector<uint8_t>& bytes) const {
  constexpr size_t kIovMax = 1024;  // IOV_MAX: the most remote ranges one call takes
  std::vector<bool> ok(ranges.size(), false);
  size_t total = 0;
  for (const MemoryRange& r : ranges) total += r.len;
  bytes.assign(total, 0);
  if (fd_ < 0) return ok;  // gone(): its pid may be another process's by now
  std::vector<iovec> remote;
  size_t next = 0, offset = 0;
  while (next < ranges.size()) {
    // One call for up to kIovMax ranges into the buffer, back to back. It stops at the first
    // range it cannot read; that range is left unread and the next call starts after it.
    remote.clear();
    size_t want = 0;
    for (size_t i = next; i < ranges.size() && remote.size() < kIovMax; ++i) {
      remote.push_back({reinterpret_cast<void*>(ranges[i].addr), ranges[i].len});
      want += ranges[i].len;
    }
    iovec local{bytes.data() + offset, want};
    const ssize_t n =
        ::process_vm_readv(static_cast<pid_t>(pid_), &local, 1, remote.data(), remote.size(), 0);
    size_t got = n > 0 ? static_cast<size_t>(n) : 0;
    size_t i = next;
    for (; i < next + remote.size() && got >= ranges[i].len; ++i) {
      ok[i] = true;
      got -= ranges[i].len;
      offset += ranges[i].len;
    }
    if (i < next + remote.size()) {  // range i failed (or was cut): skip it
      offset += ranges[i].len;
      ++i;
    }
    next = i;
  }
  // A byte the batch read, read again through the file: it fails if the process is gone.
  const auto first = std::find(ok.begin(), ok.end(), true);
  uint8_t probe = 0;
  if (first != ok.end() &&
      ::pread(fd_, &probe, 1, static_cast<off_t>(ranges[first - ok.begin()].addr)) != 1) {
    std::fill(ok.begin(), ok.end(), false);  // the pid may be another process's now
  }
  return ok;
}

ProcessMemory::~ProcessMemory() {
  if (fd_ >= 0) ::close(fd_);
}

int ProcessMemory::read(uint64_t addr, void* dst, uint32_t len) const {
  if (captured_ && captured_->read(addr, dst, len) == 0) return 0;
  if (fd_ < 0) {
    std::memset(dst, 0, len);
    return -ESRCH;
  }
  // /proc/PID/mem takes the address as the file offset; off_t is signed, so user addresses
  // above 2^63 cannot exist and are refused.
  if (addr > static_cast<uint64_t>(INT64_MAX) - len) {
    std::memset(dst, 0, len);
    return -EFAULT;
  }
  const ssize_t n = ::pread(fd_, dst, len, static_cast<off_t>(addr));
  if (n != static_cast<ssize_t>(len)) {
    std::memset(dst, 0, len);
    return n < 0 ? -errno : -EFAULT;
  }
  return 0;
}

namespace {
int read_callback(void* ctx, uint64_t addr, void* dst, uint32_t len) {
  return static_cast<const ProcessMemory*>(ctx)->read(addr, dst, len);
}
}  // namespace

ljprof_mem_reader ProcessMemory::reader() const {
  return ljprof_mem_reader{&read_callback, const_cast<ProcessMemory*>(this)};
}

}  // namespace ljprof::proc
