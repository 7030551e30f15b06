#include "record/unwind_rows.h"

#include <bpf/bpf.h>
#include <linux/membarrier.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "record/cost.h"

namespace ljprof::record {

UnwindRows::UnwindRows(ObjectCache& cache, AgentCounts& counts, Warn warn)
    : cache_(cache), counts_(counts), warn_(std::move(warn)) {}

void UnwindRows::attach(int map_fd, uint32_t capacity) {
  fd_ = map_fd;
  rows_ = RowAllocator(capacity);
}

void UnwindRows::upload(MappedObject& obj) {
  if (!obj.table || obj.uploaded || obj.upload_failed || fd_ < 0) return;
  if (obj.table->rows().empty()) {  // freed since they were last in the map
    if (Status reloaded = cache_.reload_rows(obj); !reloaded.ok()) {
      obj.upload_failed = true;
      warn(reloaded.message());
      return;
    }
  }
  const std::span<const lj_cfi_row> rows = obj.table->rows();
  const auto count = static_cast<uint32_t>(std::min<size_t>(rows.size(), UINT32_MAX));
  const uint64_t now = monotonic_ns();
  const std::optional<uint32_t> first = place(count, now, obj);
  if (!first) {
    if (!obj.no_room) {
      obj.no_room = true;
      ++counts_[LJ_REC_CTR_ROWS_FULL];
      if (rows_.free_rows() >= count) ++counts_[LJ_REC_CTR_ROWS_FRAGMENTED];
      warn(fmt::format(
          "{}: {} CFI rows do not fit the kernel's row table ({} of {} rows in use, the largest "
          "free range {}): its processes are sampled without them until others free room "
          "(--unwind-rows)",
          obj.path, count, rows_.in_use(), rows_.capacity(), rows_.largest_free()));
    }
    return;
  }
  if (Status written = write(*first, rows); !written.ok()) {
    rows_.retire(*first, count, now);  // named by no context; freed with the next retired rows
    obj.upload_failed = true;
    warn(fmt::format("{}: {}", obj.path, written.message()));
    return;
  }
  obj.row_first = *first;
  obj.row_count = count;
  obj.uploaded = true;
  obj.no_room = false;
  obj.unmapped_since_ns = 0;
  // Only the LuaJIT file's rows are read again in user space (the FFI trampoline's return
  // address, sample_frames.cc); every other file's live on in the kernel alone.
  if (!obj.luajit) obj.table->release_rows();
}

// A free range of `count` rows. When none is long enough, the rows of files kept only in case
// they are mapped again go at once, and retired rows as soon as no program can be reading them.
std::optional<uint32_t> UnwindRows::place(uint32_t count, uint64_t now_ns,
                                          const MappedObject& placing) {
  if (auto at = rows_.allocate(count)) return at;
  retire_unmapped(now_ns, 0, &placing);
  free_retired(now_ns);
  return rows_.allocate(count);
}

bool UnwindRows::sweep(uint64_t now_ns) {
  retire_unmapped(now_ns, kUnmappedNs, nullptr);
  return free_retired(now_ns) > 0;
}

void UnwindRows::retire_unmapped(uint64_t now_ns, uint64_t after_ns, const MappedObject* keep) {
  cache_.for_each([&](MappedObject& obj) {
    if (obj.contexts > 0 || &obj == keep) {
      obj.unmapped_since_ns = 0;
      return;
    }
    // Rows kept in memory to retry a file that did not fit: no process waits for them now.
    if (obj.no_room) {
      obj.no_room = false;
      if (obj.table) obj.table->release_rows();
    }
    if (!obj.uploaded) return;
    if (obj.unmapped_since_ns == 0) obj.unmapped_since_ns = now_ns;
    if (now_ns - obj.unmapped_since_ns >= after_ns) retire(obj, now_ns);
  });
}

void UnwindRows::retire(MappedObject& obj, uint64_t now_ns) {
  if (on_retire_) on_retire_(obj.row_first, obj.row_count);
  rows_.retire(obj.row_first, obj.row_count, now_ns);
  obj.uploaded = false;
  obj.row_first = obj.row_count = 0;
  obj.unmapped_since_ns = 0;
  if (obj.table) obj.table->release_rows();
  // No process maps the file now: the pages of it that symbolizing samples read need not stay
  // resident in the agent either (they count in its RSS while the cache keeps the file).
  if (obj.elf) obj.elf->release_resident_pages();
  ++counts_[LJ_REC_CTR_ROWS_FREED];
}

uint64_t UnwindRows::free_retired(uint64_t now_ns) {
  if (rows_.retired_rows() == 0) return 0;
  if (membarrier_works_) {
    // Every range was retired (after the contexts naming it were unpublished) before now_ns
    // was read; the call returns once every program that started before it has returned.
    if (::syscall(__NR_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0) == 0) {
      return rows_.release_retired(now_ns);
    }
    membarrier_works_ = false;
    warn(fmt::format(
        "membarrier(MEMBARRIER_CMD_GLOBAL) failed ({}): freed unwind rows are reused {} s after "
        "they are given back instead",
        std::strerror(errno), kFallbackGraceNs / 1e9));
  }
  return now_ns >= kFallbackGraceNs ? rows_.release_retired(now_ns - kFallbackGraceNs) : 0;
}

// Writes `rows` to the map from row `first` on. The row map is BPF_F_MMAPABLE (record.bpf.c):
// the rows are copied in through a window of its pages mapped for the copy (kept mapped, every
// page written would count in the agent's resident memory, so at most kWindow bytes are mapped
// at a time). One bpf_map_update_batch costs the kernel ~0.3 us a row (a copy_from_user and
// checks per element: a third of a first Tarantool attach); a copy costs nanoseconds. The
// context that names these rows is published afterwards by a bpf() call, which orders the copy
// before it.
Status UnwindRows::write(uint32_t first, std::span<const lj_cfi_row> rows) {
  constexpr uint64_t kWindow = 64 * 1024;
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t begin = uint64_t{first} * sizeof(lj_cfi_row);
  const uint64_t end = begin + rows.size_bytes();
  const auto* from = reinterpret_cast<const uint8_t*>(rows.data());
  for (uint64_t at = begin; at < end;) {
    const uint64_t map_begin = at & ~(page - 1);
    const uint64_t map_end = std::min(map_begin + kWindow, (end + page - 1) & ~(page - 1));
    void* mapped = ::mmap(nullptr, map_end - map_begin, PROT_READ | PROT_WRITE, MAP_SHARED, fd_,
                          static_cast<off_t>(map_begin));
    if (mapped == MAP_FAILED) return write_by_syscall(first, rows);
    const uint64_t n = std::min(end, map_end) - at;
    std::memcpy(static_cast<uint8_t*>(mapped) + (at - map_begin), from + (at - begin), n);
    ::munmap(mapped, map_end - map_begin);
    at += n;
  }
  return Ok{};
}

// Where the map cannot be mapped (a security module refusing it): batches of updates.
Status UnwindRows::write_by_syscall(uint32_t first, std::span<const lj_cfi_row> rows) {
  constexpr size_t kBatch = 1 << 14;
  std::vector<uint32_t> keys;
  for (size_t done = 0; done < rows.size(); done += kBatch) {
    const size_t n = std::min(kBatch, rows.size() - done);
    keys.resize(n);
    for (size_t i = 0; i < n; ++i) keys[i] = first + static_cast<uint32_t>(done + i);
    uint32_t count = static_cast<uint32_t>(n);
    LIBBPF_OPTS(bpf_map_batch_opts, opts);
    if (bpf_map_update_batch(fd_, keys.data(), rows.data() + done, &count, &opts) != 0 ||
        count != n) {
      return make_error("writing {} CFI rows to the kernel's row table at row {} failed: {}", n,
                        first + done, std::strerror(errno));
    }
  }
  return Ok{};
}

bool waiting_for_rows(const ProcessContext& ctx) {
  return std::any_of(ctx.modules.begin(), ctx.modules.end(),
                     [](const ModuleView& m) { return m.object->no_room; });
}

}  // namespace ljprof::record
