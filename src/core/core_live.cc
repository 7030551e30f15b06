// CoreFile::from_process: a live process read the way a core is, without stopping it. Only what
// a walk of memory needs is filled in: mappings and files (/proc/PID/maps, map_files), the aux
// vector (for the vDSO and the page size) and reads of /proc/PID/mem.
#include <elf.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <tuple>

#include "core/core_file_internal.h"

namespace ljprof::core {

namespace {

// /proc/PID/auxv: (type, value) pairs of the native word size, ending at AT_NULL.
Result<std::vector<AuxEntry>> read_auxv(uint32_t pid) {
  const std::string path = fmt::format("/proc/{}/auxv", pid);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return make_error("{}: cannot open: {}", path, std::strerror(errno));
  uint64_t words[2 * Limits::kMaxAuxv] = {};
  const ssize_t n = ::read(fd, words, sizeof words);
  const int err = errno;
  ::close(fd);
  if (n < 0) return make_error("{}: cannot read: {}", path, std::strerror(err));
  std::vector<AuxEntry> out;
  for (size_t i = 0; i + 1 < static_cast<size_t>(n) / 8; i += 2) {
    if (words[i] == AT_NULL) break;
    out.push_back({words[i], words[i + 1]});
  }
  return out;
}

std::string exe_path(uint32_t pid) {
  char buf[Limits::kMaxPath];
  const ssize_t n = ::readlink(fmt::format("/proc/{}/exe", pid).c_str(), buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

// The ELF file of one mapping as the process sees it; the recorded path when map_files cannot
// be opened (it needs CAP_SYS_ADMIN in some kernels).
void open_mapped_file(uint32_t pid, const proc::MapEntry& map, MappedFile& file) {
  for (const std::string& candidate : {proc::map_files_path(pid, map), map.path}) {
    file.tried.push_back(candidate);
    auto elf = elf::ElfFile::open(candidate);
    if (!elf.ok()) {
      file.error = elf.message();
      continue;
    }
    file.resolved = candidate;
    file.elf = std::move(*elf);
    file.check = FileCheck::Mapped;
    file.error.clear();
    return;
  }
  file.check = FileCheck::OpenFailed;
}

}  // namespace

Result<CoreFile> CoreFile::from_process(uint32_t pid) {
  auto st = std::make_unique<State>();
  st->path = fmt::format("process {}", pid);
  st->source = MappingSource::ProcMaps;
  LJ_ASSIGN_OR_RETURN(st->live, proc::ProcessMemory::open(pid));
  LJ_ASSIGN_OR_RETURN(st->auxv, read_auxv(pid));
  st->have_auxv = true;
  LJ_ASSIGN_OR_RETURN(std::vector<proc::MapEntry> maps, proc::read_proc_maps(pid));
  const std::string exe = exe_path(pid);
  // One MappedFile per mapped file (device, inode and path), its mappings in address order.
  std::map<std::tuple<std::string, uint64_t, std::string>, uint32_t> index;
  for (const proc::MapEntry& map : maps) {
    if (!map.file_backed()) continue;
    auto [it, added] =
        index.try_emplace({map.dev, map.inode, map.path}, static_cast<uint32_t>(st->files.size()));
    if (added) {
      if (st->files.size() >= Limits::kMaxMappedFiles) {
        return make_error("{}: maps over {} files (cap)", st->path, Limits::kMaxMappedFiles);
      }
      MappedFile file;
      file.path = map.path;
      file.is_executable = map.path == exe;
      open_mapped_file(pid, map, file);
      if (file.is_executable && st->exe_index < 0) {
        st->exe_index = static_cast<int>(st->files.size());
      }
      st->files.push_back(std::move(file));
    }
    st->mappings.push_back({map.start, map.end, map.offset, it->second});
  }
  const MappedFile* exe_file = st->exe_index < 0 ? nullptr : &st->files[st->exe_index];
  if (exe_file == nullptr || !exe_file->usable()) {
    return make_error("{}: its executable {} is not a readable ELF file{}", st->path,
                      exe.empty() ? "(/proc/PID/exe unreadable)" : exe,
                      exe_file == nullptr ? "" : ": " + exe_file->error);
  }
  st->arch = exe_file->elf->arch();
  return CoreFile(std::move(st));
}

}  // namespace ljprof::core
