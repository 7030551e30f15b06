#include "symbolize/source_line.h"

#include <elfutils/libdw.h>
#include <fcntl.h>
#include <libelf.h>
#include <unistd.h>

namespace ljprof::symbolize {

struct SourceLines::Handles {
  std::unique_ptr<elf::ElfFile> debug_file;  // the separate debug file, when that is used
  int fd = -1;
  Elf* elf = nullptr;
  Dwarf* dwarf = nullptr;
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

}  // namespace

std::unique_ptr<SourceLines> SourceLines::open(const elf::ElfFile& file,
                                               const std::string& debug_dir) {
  if (elf_version(EV_CURRENT) == EV_NONE) return nullptr;
  auto h = std::make_unique<Handles>();
  const elf::ElfFile* source = &file;
  if (!has_line_table(file)) {
    const std::optional<std::string>& id = file.build_id();
    if (!id || id->size() < 3) return nullptr;
    auto debug = elf::ElfFile::open(debug_dir + "/.build-id/" + id->substr(0, 2) + "/" +
                                    id->substr(2) + ".debug");
    if (!debug.ok() || (*debug)->build_id() != id || !has_line_table(**debug)) return nullptr;
    h->debug_file = std::move(*debug);
    source = h->debug_file.get();
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
  if (dwarf_addrdie(h_->dwarf, link_address, &cu) == nullptr) return std::nullopt;
  Dwarf_Line* row = dwarf_getsrc_die(&cu, link_address);
  if (row == nullptr) return std::nullopt;
  const char* file = dwarf_linesrc(row, nullptr, nullptr);
  int line = 0;
  if (file == nullptr || dwarf_lineno(row, &line) != 0 || line <= 0) return std::nullopt;
  return SourceLine{file, line};
}

}  // namespace ljprof::symbolize
