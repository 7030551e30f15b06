#include "symbolize/source_line.h"

#include <elfutils/libdw.h>
#include <fcntl.h>
#include <libelf.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

namespace ljprof::symbolize {

namespace {

// One address range of a compilation unit, from the CU's own DW_AT_low_pc/high_pc/ranges.
struct CuRange {
  uint64_t begin = 0;
  uint64_t end = 0;
  Dwarf_Off cu_offset = 0;
};
// Bounds on the CU index (a C++ binary has thousands of CUs; each may list many ranges).
constexpr size_t kMaxCus = 1u << 16;
constexpr size_t kMaxCuRanges = 1u << 20;

}  // namespace

struct SourceLines::Handles {
  int fd = -1;
  Elf* elf = nullptr;
  Dwarf* dwarf = nullptr;
  // Built on the first address .debug_aranges does not cover: clang emits no .debug_aranges,
  // and libdw 0.188's dwarf_addrdie reads nothing else.
  std::optional<std::vector<CuRange>> cu_ranges;
  ~Handles() {
    if (dwarf != nullptr) dwarf_end(dwarf);
    if (elf != nullptr) elf_end(elf);
    if (fd >= 0) ::close(fd);
  }
};

SourceLines::SourceLines(std::unique_ptr<Handles> h) : h_(std::move(h)) {}
SourceLines::~SourceLines() = default;

namespace {

bool has_line_table(const elf::ElfFile& file) {
  return file.section(".debug_info") != nullptr && file.section(".debug_line") != nullptr;
}

std::vector<CuRange> index_cu_ranges(Dwarf* dwarf) {
  std::vector<CuRange> out;
  Dwarf_Off off = 0, next = 0;
  size_t header_size = 0;
  for (size_t cus = 0;
       cus < kMaxCus && out.size() < kMaxCuRanges &&
       dwarf_nextcu(dwarf, off, &next, &header_size, nullptr, nullptr, nullptr) == 0;
       ++cus, off = next) {
    Dwarf_Die cu;
    if (dwarf_offdie(dwarf, off + header_size, &cu) == nullptr) continue;
    Dwarf_Addr base = 0, begin = 0, end = 0;
    ptrdiff_t it = 0;
    while (out.size() < kMaxCuRanges && (it = dwarf_ranges(&cu, it, &base, &begin, &end)) > 0) {
      if (end > begin) out.push_back({begin, end, off + header_size});
    }
  }
  std::sort(out.begin(), out.end(),
            [](const CuRange& a, const CuRange& b) { return a.begin < b.begin; });
  return out;
}

// The CU whose own ranges cover `address` (CU ranges do not overlap in a linked file).
bool cu_by_ranges(Dwarf* dwarf, const std::vector<CuRange>& ranges, uint64_t address,
                  Dwarf_Die* cu) {
  auto it = std::upper_bound(ranges.begin(), ranges.end(), address,
                             [](uint64_t a, const CuRange& r) { return a < r.begin; });
  if (it == ranges.begin()) return false;
  --it;
  return address < it->end && dwarf_offdie(dwarf, it->cu_offset, cu) != nullptr;
}

}  // namespace

std::unique_ptr<SourceLines> SourceLines::open(const elf::ElfFile& file,
                                               elf::LazyDebugFile& debug) {
  if (elf_version(EV_CURRENT) == EV_NONE) return nullptr;
  auto h = std::make_unique<Handles>();
  const elf::ElfFile* source = &file;
  if (!has_line_table(file)) {
    source = debug.get(file);
    if (source == nullptr || !has_line_table(*source)) return nullptr;
  }
  // libdw decompresses SHF_COMPRESSED debug sections (Debian's -dbg files have them) by
  // rewriting section headers in place, so it needs an image it may write to: a private
  // copy-on-write mapping of the file, not ElfFile's read-only one.
  h->fd = ::open(source->path().c_str(), O_RDONLY | O_CLOEXEC);
  if (h->fd < 0) return nullptr;
  h->elf = elf_begin(h->fd, ELF_C_READ_MMAP_PRIVATE, nullptr);
  if (h->elf == nullptr) return nullptr;
  h->dwarf = dwarf_begin_elf(h->elf, DWARF_C_READ, nullptr);
  if (h->dwarf == nullptr) return nullptr;
  return std::unique_ptr<SourceLines>(new SourceLines(std::move(h)));
}

std::optional<SourceLine> SourceLines::at(uint64_t link_address) const {
  Dwarf_Die cu;
  if (dwarf_addrdie(h_->dwarf, link_address, &cu) == nullptr) {
    if (!h_->cu_ranges) h_->cu_ranges = index_cu_ranges(h_->dwarf);
    if (!cu_by_ranges(h_->dwarf, *h_->cu_ranges, link_address, &cu)) return std::nullopt;
  }
  Dwarf_Line* row = dwarf_getsrc_die(&cu, link_address);
  if (row == nullptr) return std::nullopt;
  const char* file = dwarf_linesrc(row, nullptr, nullptr);
  int line = 0;
  if (file == nullptr || dwarf_lineno(row, &line) != 0 || line <= 0) return std::nullopt;
  return SourceLine{file, line};
}

}  // namespace ljprof::symbolize
