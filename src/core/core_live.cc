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
#include "proc/identity.h"

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
  const std::string exe = proc::executable_path(pid);
  // One MappedFile per mapped file (device, inode and path), its mappings in address order.
  std::map<std::tuple<std::string, uint64_t, std::string>, uint32_t> index;
  for (const proc::MapEntry& map : maps) {
    if (!map.file_backed()) {
      if (map.readable && map.writable && !map.shared &&
          (map.path.empty() || map.path == "[heap]")) {
        st->live_anonymous_writable.push_back({map.start, map.end});
      }
      continue;
    }
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

bool PrefetchedMemory::read(uint64_t addr, void* dst, size_t len) const {
  auto it = std::upper_bound(ranges.begin(), ranges.end(), addr,
                             [](uint64_t a, const proc::MemoryRange& r) { return a < r.addr; });
  if (it == ranges.begin()) return false;
  --it;
  const uint64_t rel = addr - it->addr;
  if (rel > it->len || len > it->len - rel) return false;
  std::memcpy(dst, bytes.data() + offsets[it - ranges.begin()] + rel, len);
  return true;
}

void CoreFile::prefetch(std::span<const proc::MemoryRange> ranges) const {
  State& st = *state_;
  st.prefetched = {};
  if (!st.live) return;
  std::vector<proc::MemoryRange> wanted(ranges.begin(), ranges.end());
  std::sort(wanted.begin(), wanted.end(),
            [](const proc::MemoryRange& a, const proc::MemoryRange& b) { return a.addr < b.addr; });
  // Ranges close to each other are read as one: the kernel pins pages per range, and a struct
  // and its inline name, or neighbours of one mempool, are a few bytes apart. Merged ranges stay
  // small enough that one unreadable byte loses little.
  constexpr uint64_t kGap = 256, kMaxMerged = 64 << 10;
  std::vector<proc::MemoryRange> sorted;
  for (const proc::MemoryRange& r : wanted) {
    if (!sorted.empty()) {
      proc::MemoryRange& last = sorted.back();
      const uint64_t end = std::max(last.addr + last.len, r.addr + r.len);
      if (r.addr <= last.addr + last.len + kGap && end - last.addr <= kMaxMerged) {
        last.len = static_cast<uint32_t>(end - last.addr);
        continue;
      }
    }
    sorted.push_back(r);
  }
  std::vector<uint8_t> bytes;
  const std::vector<bool> ok = st.live->read_ranges(sorted, bytes);
  size_t offset = 0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (ok[i]) {
      st.prefetched.ranges.push_back(sorted[i]);
      st.prefetched.offsets.push_back(offset);
    }
    offset += sorted[i].len;
  }
  st.prefetched.bytes = std::move(bytes);
}

void CoreFile::drop_prefetch() const {
  state_->prefetched = {};
}

void CoreFile::cache_pages(bool on, size_t max_pages, bool start_over, uint32_t ahead_pages) const {
  PageCache& cache = state_->page_cache;
  cache.on = on && state_->live != nullptr;
  cache.max_pages = std::min<size_t>(max_pages, UINT32_MAX);
  cache.start_over = start_over;
  cache.ahead = std::max<uint32_t>(1, std::min<uint64_t>(ahead_pages, cache.max_pages));
  cache.reset();
  if (!cache.on || cache.slot_count != cache.max_pages) {
    cache.slots.reset();  // allocated again, at the first page, at the new size
    cache.slot_count = 0;
  }
}

void CoreFile::forget_cached_pages(uint64_t addr, uint64_t len) const {
  PageCache& cache = state_->page_cache;
  if (len == 0 || cache.pages.empty()) return;
  cache.last_page = PageCache::kNoPage;
  const uint64_t last = (addr + len - 1) & ~(PageCache::kPage - 1);
  for (uint64_t page = addr & ~(PageCache::kPage - 1); page <= last; page += PageCache::kPage) {
    cache.pages.erase(page);  // its slot stays used until the cache starts over
    if (page == last) break;  // the last page of the address space
  }
}

void CoreFile::release_resident_pages() const {
  if (!state_->live) state_->elf->release_resident_pages();
}

int CoreFile::State::read_live(uint64_t addr, void* dst, uint32_t len) const {
  if (prefetched.read(addr, dst, len)) return 0;
  const uint64_t page = addr & ~(PageCache::kPage - 1);
  if (!page_cache.on || page_cache.max_pages == 0 || len == 0 ||
      addr + len - page > PageCache::kPage) {
    return live->read(addr, dst, len);
  }
  PageCache& cache = page_cache;
  if (page != cache.last_page) {
    auto it = cache.pages.find(page);
    if (it == cache.pages.end()) {
      if (!cache_missed_pages(page)) return live->read(addr, dst, len);
      it = cache.pages.find(page);
    }
    cache.last_page = page;
    cache.last_slot = it->second;
  }
  std::memcpy(dst, cache.slot(cache.last_slot) + (addr - page), len);
  return 0;
}

// Reads `page` into the cache, with the pages after it (before it) when the last miss was the
// page before (after) it: ahead pages in one read, into consecutive slots. Pages cached already
// keep their first copy. False when the page cannot be cached (full, no start-over) or read.
bool CoreFile::State::cache_missed_pages(uint64_t page) const {
  PageCache& cache = page_cache;
  constexpr uint64_t kPage = PageCache::kPage;
  uint64_t first = page;
  uint32_t count = 1;
  if (cache.ahead > 1 && cache.last_miss != PageCache::kNoPage) {
    if (page == cache.last_miss + kPage) {
      count = cache.ahead;
    } else if (page + kPage == cache.last_miss && page >= (cache.ahead - 1) * kPage) {
      count = cache.ahead;
      first = page - (count - 1) * kPage;
    }
  }
  cache.last_miss = page;
  if (cache.used + count > cache.max_pages) {
    if (!cache.start_over) return false;
    cache.reset();
    cache.last_miss = page;
  }
  if (!cache.slots) {
    cache.slots = std::make_unique_for_overwrite<uint8_t[]>(cache.max_pages * kPage);
    cache.slot_count = cache.max_pages;
  }
  if (count > 1 && live->read(first, cache.slot(cache.used), count * kPage) != 0) {
    count = 1;  // the block reaches memory that is not mapped: the page alone
    first = page;
  }
  if (count == 1 && live->read(page, cache.slot(cache.used), kPage) != 0) return false;
  for (uint32_t i = 0; i < count; ++i) cache.pages.emplace(first + i * kPage, cache.used + i);
  cache.used += count;
  return true;
}

}  // namespace ljprof::core
