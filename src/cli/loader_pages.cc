#include "cli/loader_pages.h"

#include <elf.h>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

#include <optional>

namespace ljprof::cli {

namespace {

struct Range {
  uintptr_t begin = 0;
  uintptr_t end = 0;
};

// Whether a read-only PT_LOAD segment of `info` holds [at, at + size).
bool in_read_only_segment(const dl_phdr_info* info, uintptr_t at, uint64_t size) {
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD || (ph.p_flags & PF_W) != 0) continue;
    const uintptr_t begin = info->dlpi_addr + ph.p_vaddr;
    if (at >= begin && size <= ph.p_memsz && at - begin <= ph.p_memsz - size) return true;
  }
  return false;
}

// The object's DT_RELA table in memory. glibc adds the load bias to DT_RELA in a writable
// .dynamic once it has relocated the object (elf/get-dynamic-info.h ADJUST_DYN_INFO) and leaves
// a read-only one as linked: whichever reading lies in a read-only segment is taken, and
// neither or both is no table.
std::optional<Range> relocation_table(const dl_phdr_info* info) {
  const ElfW(Dyn)* dyn = nullptr;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    if (info->dlpi_phdr[i].p_type == PT_DYNAMIC) {
      dyn = reinterpret_cast<const ElfW(Dyn)*>(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    }
  }
  if (dyn == nullptr) return std::nullopt;
  uintptr_t rela = 0;
  uint64_t size = 0;
  for (; dyn->d_tag != DT_NULL; ++dyn) {
    if (dyn->d_tag == DT_TEXTREL) return std::nullopt;
    if (dyn->d_tag == DT_FLAGS && (dyn->d_un.d_val & DF_TEXTREL) != 0) return std::nullopt;
    if (dyn->d_tag == DT_RELA) rela = dyn->d_un.d_ptr;
    if (dyn->d_tag == DT_RELASZ) size = dyn->d_un.d_val;
  }
  if (rela == 0 || size == 0) return std::nullopt;
  const bool absolute = in_read_only_segment(info, rela, size);
  const bool relative =
      info->dlpi_addr != 0 && in_read_only_segment(info, info->dlpi_addr + rela, size);
  if (absolute == relative) return std::nullopt;
  const uintptr_t begin = absolute ? rela : info->dlpi_addr + rela;
  return Range{begin, begin + size};
}

int release_one(dl_phdr_info* info, size_t, void* out) {
  auto* done = static_cast<LoaderPages*>(out);
  const std::optional<Range> table = relocation_table(info);
  if (!table) return 0;
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (table->begin + page - 1) & ~(page - 1);
  const uintptr_t end = table->end & ~(page - 1);
  if (end <= begin) return 0;
  if (::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED) != 0) return 0;
  ++done->objects;
  done->bytes += end - begin;
  return 0;
}

}  // namespace

LoaderPages release_relocation_pages() {
  LoaderPages done;
  dl_iterate_phdr(release_one, &done);
  return done;
}

}  // namespace ljprof::cli
