// Why this is hand-written instead of libelf: the reader's job is to *reject* files by rules of
// our own (exact sh_entsize, sh_link type, 16 MiB string-table cap, every range inside the
// mapping, overflow-checked counts) before anything downstream trusts an address. libelf would
// give us the same fixed-size structs but with its own, more lenient acceptance rules (lazy
// per-section conversion, no caps), so we would still re-check every field; and the fuzzer
// (fuzz/elf_fuzzer.cc) can only find bugs in code it instruments. The structs and constants
// come from <elf.h>; every read goes through `read_struct` (common/bounds.h), which bounds-checks
// and memcpy's.
#include "elf/elf_file.h"

#include "common/bounds.h"

#include <elf.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace ljprof::elf {

namespace {

const char* section_type_name(uint32_t type) {
  switch (type) {
    case SHT_SYMTAB:
      return "SHT_SYMTAB";
    case SHT_DYNSYM:
      return "SHT_DYNSYM";
    case SHT_STRTAB:
      return "SHT_STRTAB";
    case SHT_NOTE:
      return "SHT_NOTE";
    case SHT_DYNAMIC:
      return "SHT_DYNAMIC";
    default:
      return "section";
  }
}

}  // namespace

const char* arch_name(Arch arch) {
  return arch == Arch::X86_64 ? "x86-64" : "aarch64";
}

const char* symbol_table_name(SymbolTable table) {
  return table == SymbolTable::Symtab ? ".symtab" : ".dynsym";
}

bool Section::has_file_data() const {
  return type != SHT_NOBITS && type != SHT_NULL;
}

ElfFile::~ElfFile() {
  if (map_ != nullptr) munmap(map_, map_size_);
}

Result<std::unique_ptr<ElfFile>> ElfFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return make_error("{}: cannot open: {}", path, std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return make_error("{}: cannot stat: {}", path, std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return make_error("{}: not a regular file", path);
  }
  if (st.st_size < static_cast<off_t>(sizeof(Elf64_Ehdr))) {
    ::close(fd);
    return make_error("{}: truncated: {} bytes is smaller than an ELF64 header ({} bytes)", path,
                      st.st_size, sizeof(Elf64_Ehdr));
  }
  void* map = mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
  int map_errno = errno;
  ::close(fd);
  if (map == MAP_FAILED) return make_error("{}: cannot mmap: {}", path, std::strerror(map_errno));

  std::unique_ptr<ElfFile> file(new ElfFile());
  file->path_ = path;
  file->map_ = map;
  file->map_size_ = static_cast<size_t>(st.st_size);
  file->bytes_ = {static_cast<const uint8_t*>(map), file->map_size_};
  LJ_TRY(file->parse());
  return file;
}

void ElfFile::release_resident_pages() const {
  if (map_ != nullptr) ::madvise(map_, map_size_, MADV_DONTNEED);
}

uint64_t ElfFile::heap_bytes() const {
  return sizeof(ElfFile) + path_.capacity() + sections_.capacity() * sizeof(Section) +
         segments_.capacity() * sizeof(Segment) + symbols_.capacity() * sizeof(Symbol) +
         by_address_.capacity() * sizeof(uint32_t) +
         (needed_.capacity() + runpath_.capacity()) * sizeof(std::string_view) +
         (build_id_ ? build_id_->capacity() : 0);
}

Result<std::unique_ptr<ElfFile>> ElfFile::from_memory(std::span<const uint8_t> bytes,
                                                      std::string name) {
  std::unique_ptr<ElfFile> file(new ElfFile());
  file->path_ = std::move(name);
  file->bytes_ = bytes;
  LJ_TRY(file->parse());
  return file;
}

Status ElfFile::parse() {
  LJ_TRY(parse_header());
  LJ_TRY(parse_sections());
  LJ_TRY(parse_segments());
  LJ_TRY(parse_symbols());
  LJ_TRY(parse_notes());
  LJ_TRY(parse_dynamic());
  return Ok{};
}

Status ElfFile::parse_header() {
  Elf64_Ehdr eh;
  if (!read_struct(bytes_, 0, &eh)) {
    return make_error("{}: truncated: {} bytes is smaller than an ELF64 header ({} bytes)", path_,
                      bytes_.size(), sizeof(Elf64_Ehdr));
  }
  if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) {
    return make_error("{}: not an ELF file (bad magic at offset 0)", path_);
  }
  if (eh.e_ident[EI_CLASS] != ELFCLASS64) {
    return make_error("{}: unsupported ELF class {} (only ELF64 is supported)", path_,
                      eh.e_ident[EI_CLASS]);
  }
  if (eh.e_ident[EI_DATA] != ELFDATA2LSB) {
    return make_error("{}: unsupported byte order {} (only little-endian is supported)", path_,
                      eh.e_ident[EI_DATA]);
  }
  if (eh.e_ident[EI_VERSION] != EV_CURRENT) {
    return make_error("{}: unsupported ELF version {} in e_ident", path_, eh.e_ident[EI_VERSION]);
  }
  if (eh.e_machine == EM_X86_64) {
    arch_ = Arch::X86_64;
  } else if (eh.e_machine == EM_AARCH64) {
    arch_ = Arch::AArch64;
  } else {
    return make_error("{}: unsupported machine {} (only x86-64 and AArch64 are supported)", path_,
                      eh.e_machine);
  }
  if (eh.e_ehsize != sizeof(Elf64_Ehdr)) {
    return make_error("{}: ELF header: e_ehsize is {}, expected {}", path_, eh.e_ehsize,
                      sizeof(Elf64_Ehdr));
  }
  type_ = eh.e_type;
  entry_ = eh.e_entry;
  return Ok{};
}

Status ElfFile::parse_sections() {
  Elf64_Ehdr eh;
  read_struct(bytes_, 0, &eh);  // checked by parse_header
  if (eh.e_shoff == 0) {
    if (eh.e_shnum != 0) {
      return make_error("{}: section header table: e_shoff is 0 but e_shnum is {}", path_,
                        eh.e_shnum);
    }
    return Ok{};  // no section headers (allowed; e.g. some cores)
  }
  if (eh.e_shentsize != sizeof(Elf64_Shdr)) {
    return make_error("{}: section header table: e_shentsize is {}, expected {}", path_,
                      eh.e_shentsize, sizeof(Elf64_Shdr));
  }
  // The first section header carries the real count and string-table index when they do not
  // fit in the ELF header (e_shnum == 0 / e_shstrndx == SHN_XINDEX).
  Elf64_Shdr first;
  if (!read_struct(bytes_, eh.e_shoff, &first)) {
    return make_error("{}: section header table at offset {:#x} is outside the file ({} bytes)",
                      path_, eh.e_shoff, bytes_.size());
  }
  uint64_t count = eh.e_shnum != 0 ? eh.e_shnum : first.sh_size;
  uint64_t strndx = eh.e_shstrndx != SHN_XINDEX ? eh.e_shstrndx : first.sh_link;
  if (count > Limits::kMaxSections) {
    return make_error("{}: section header table: {} sections exceeds the cap of {}", path_, count,
                      Limits::kMaxSections);
  }
  uint64_t table_size;
  if (mul_overflows(count, sizeof(Elf64_Shdr), &table_size) ||
      !in_bounds(eh.e_shoff, table_size, bytes_.size())) {
    return make_error(
        "{}: section header table at offset {:#x} with {} entries is outside the file ({} bytes)",
        path_, eh.e_shoff, count, bytes_.size());
  }
  sections_.reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    Elf64_Shdr sh;
    read_struct(bytes_, eh.e_shoff + i * sizeof(Elf64_Shdr), &sh);
    Section s;
    s.index = static_cast<uint32_t>(i);
    s.type = sh.sh_type;
    s.flags = sh.sh_flags;
    s.addr = sh.sh_addr;
    s.offset = sh.sh_offset;
    s.size = sh.sh_size;
    s.link = sh.sh_link;
    s.info = sh.sh_info;
    s.addralign = sh.sh_addralign;
    s.entsize = sh.sh_entsize;
    if (s.has_file_data() && !in_bounds(s.offset, s.size, bytes_.size())) {
      return make_error(
          "{}: section [{}]: sh_offset {:#x} + sh_size {:#x} is outside the file ({} bytes)", path_,
          i, s.offset, s.size, bytes_.size());
    }
    uint64_t addr_end;
    if ((s.flags & SHF_ALLOC) && add_overflows(s.addr, s.size, &addr_end)) {
      return make_error("{}: section [{}]: sh_addr {:#x} + sh_size {:#x} overflows", path_, i,
                        s.addr, s.size);
    }
    if (s.link >= count && s.link != 0) {
      return make_error("{}: section [{}]: sh_link {} is out of range ({} sections)", path_, i,
                        s.link, count);
    }
    sections_.push_back(s);
  }
  if (count == 0) return Ok{};
  if (strndx == SHN_UNDEF) return Ok{};  // sections have no names
  if (strndx >= count) {
    return make_error("{}: e_shstrndx {} is out of range ({} sections)", path_, strndx, count);
  }
  const Section& names = sections_[strndx];
  if (names.type != SHT_STRTAB) {
    return make_error("{}: e_shstrndx {} points at a {} (type {}), not SHT_STRTAB", path_, strndx,
                      section_type_name(names.type), names.type);
  }
  if (names.size > Limits::kMaxStringTable) {
    return make_error("{}: section-name string table [{}]: {} bytes exceeds the 16 MiB cap", path_,
                      strndx, names.size);
  }
  for (Section& s : sections_) {
    Elf64_Shdr sh;
    read_struct(bytes_, eh.e_shoff + uint64_t{s.index} * sizeof(Elf64_Shdr), &sh);
    LJ_ASSIGN_OR_RETURN(s.name, string_at(names, sh.sh_name, "section name"));
  }
  return Ok{};
}

Result<std::string_view> ElfFile::string_at(const Section& strtab, uint64_t offset,
                                            const char* what) const {
  if (offset >= strtab.size) {
    return make_error("{}: {} at offset {:#x} is outside its string table [{}] ({} bytes)", path_,
                      what, offset, strtab.index, strtab.size);
  }
  const char* begin = reinterpret_cast<const char*>(bytes_.data() + strtab.offset);
  const void* nul = std::memchr(begin + offset, 0, strtab.size - offset);
  if (nul == nullptr) {
    return make_error("{}: {} at offset {:#x} in string table [{}] is not NUL-terminated", path_,
                      what, offset, strtab.index);
  }
  return std::string_view(begin + offset, static_cast<const char*>(nul) - (begin + offset));
}

Status ElfFile::parse_segments() {
  Elf64_Ehdr eh;
  read_struct(bytes_, 0, &eh);
  if (eh.e_phoff == 0 || eh.e_phnum == 0) return Ok{};
  if (eh.e_phentsize != sizeof(Elf64_Phdr)) {
    return make_error("{}: program header table: e_phentsize is {}, expected {}", path_,
                      eh.e_phentsize, sizeof(Elf64_Phdr));
  }
  uint64_t count = eh.e_phnum;
  if (eh.e_phnum == PN_XNUM) {
    if (sections_.empty()) {
      return make_error("{}: program header table: e_phnum is PN_XNUM but there is no section 0",
                        path_);
    }
    count = sections_[0].info;
  }
  const uint64_t cap = type_ == ET_CORE ? Limits::kMaxCoreSegments : Limits::kMaxSegments;
  if (count > cap) {
    return make_error("{}: program header table: {} entries exceeds the cap of {}", path_, count,
                      cap);
  }
  if (!in_bounds(eh.e_phoff, count * sizeof(Elf64_Phdr), bytes_.size())) {
    return make_error(
        "{}: program header table at offset {:#x} with {} entries is outside the file ({} bytes)",
        path_, eh.e_phoff, count, bytes_.size());
  }
  segments_.reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    Elf64_Phdr ph;
    read_struct(bytes_, eh.e_phoff + i * sizeof(Elf64_Phdr), &ph);
    Segment s{ph.p_type, ph.p_flags, ph.p_offset, ph.p_vaddr, ph.p_filesz, ph.p_memsz, ph.p_align};
    uint64_t end;
    if (add_overflows(s.vaddr, s.memsz, &end) || add_overflows(s.offset, s.filesz, &end)) {
      return make_error("{}: program header [{}]: address or file range overflows", path_, i);
    }
    // Core files may legitimately have PT_LOAD entries whose file part was not written, so
    // only executables and shared objects must hold their whole file part.
    if (type_ != ET_CORE && s.type == PT_LOAD && !in_bounds(s.offset, s.filesz, bytes_.size())) {
      return make_error(
          "{}: program header [{}] (PT_LOAD): p_offset {:#x} + p_filesz {:#x} is outside the "
          "file ({} bytes)",
          path_, i, s.offset, s.filesz, bytes_.size());
    }
    if (s.type == PT_LOAD && s.filesz > s.memsz) {
      return make_error("{}: program header [{}] (PT_LOAD): p_filesz {:#x} > p_memsz {:#x}", path_,
                        i, s.filesz, s.memsz);
    }
    segments_.push_back(s);
  }
  return Ok{};
}

namespace {

// AArch64 ELF ABI (aaelf64, "Mapping symbols"): `$x` and `$d`, optionally followed by `.` and
// anything, mark where code and data start inside a section; they are not labels, so an
// address is never named after one (a sample in a function's literal pool would read "$d").
bool is_aarch64_mapping_symbol(std::string_view name) {
  if (name.size() < 2 || name[0] != '$' || (name[1] != 'x' && name[1] != 'd')) return false;
  return name.size() == 2 || name[2] == '.';
}

}  // namespace

Status ElfFile::parse_symbols() {
  for (const Section& s : sections_) {
    if (s.type == SHT_SYMTAB) {
      if (has_symtab_) return make_error("{}: more than one SHT_SYMTAB section", path_);
      has_symtab_ = true;
      LJ_TRY(load_symbol_table(s, SymbolTable::Symtab));
    }
  }
  for (const Section& s : sections_) {
    if (s.type == SHT_DYNSYM) {
      if (has_dynsym_) return make_error("{}: more than one SHT_DYNSYM section", path_);
      has_dynsym_ = true;
      LJ_TRY(load_symbol_table(s, SymbolTable::Dynsym));
    }
  }
  for (uint32_t i = 0; i < symbols_.size(); ++i) {
    const Symbol& sym = symbols_[i];
    if (sym.defined() &&
        (sym.type == STT_FUNC || sym.type == STT_OBJECT || sym.type == STT_NOTYPE ||
         sym.type == STT_GNU_IFUNC) &&
        sym.shndx != SHN_ABS && !sym.name.empty() &&
        !(arch_ == Arch::AArch64 && is_aarch64_mapping_symbol(sym.name))) {
      by_address_.push_back(i);
    }
  }
  std::sort(by_address_.begin(), by_address_.end(), [this](uint32_t a, uint32_t b) {
    const Symbol& x = symbols_[a];
    const Symbol& y = symbols_[b];
    if (x.value != y.value) return x.value < y.value;
    if (x.table != y.table) return x.table < y.table;  // .symtab first
    return x.size > y.size;
  });
  return Ok{};
}

Status ElfFile::load_symbol_table(const Section& table, SymbolTable kind) {
  const char* tname = symbol_table_name(kind);
  if (table.entsize != sizeof(Elf64_Sym)) {
    return make_error("{}: {} [{}]: sh_entsize is {}, expected {}", path_, tname, table.index,
                      table.entsize, sizeof(Elf64_Sym));
  }
  if (table.size % sizeof(Elf64_Sym) != 0) {
    return make_error("{}: {} [{}]: sh_size {} is not a multiple of the entry size {}", path_,
                      tname, table.index, table.size, sizeof(Elf64_Sym));
  }
  uint64_t count = table.size / sizeof(Elf64_Sym);
  if (symbols_.size() + count > Limits::kMaxSymbols) {
    return make_error("{}: {} [{}]: {} symbols exceeds the cap of {}", path_, tname, table.index,
                      count, Limits::kMaxSymbols);
  }
  if (table.link == 0 || table.link >= sections_.size()) {
    return make_error("{}: {} [{}]: sh_link {} does not name a string table", path_, tname,
                      table.index, table.link);
  }
  const Section& strtab = sections_[table.link];
  if (strtab.type != SHT_STRTAB) {
    return make_error("{}: {} [{}]: sh_link {} points at a {} (type {}), not SHT_STRTAB", path_,
                      tname, table.index, table.link, section_type_name(strtab.type), strtab.type);
  }
  if (strtab.size > Limits::kMaxStringTable) {
    return make_error("{}: {} [{}]: string table [{}] of {} bytes exceeds the 16 MiB cap", path_,
                      tname, table.index, strtab.index, strtab.size);
  }
  symbols_.reserve(symbols_.size() + count);
  for (uint64_t i = 0; i < count; ++i) {
    Elf64_Sym es;
    read_struct(bytes_, table.offset + i * sizeof(Elf64_Sym), &es);
    Symbol sym;
    sym.index = static_cast<uint32_t>(i);
    sym.table = kind;
    sym.value = es.st_value;
    sym.size = es.st_size;
    sym.type = ELF64_ST_TYPE(es.st_info);
    sym.bind = ELF64_ST_BIND(es.st_info);
    sym.shndx = es.st_shndx;
    uint64_t end;
    if (add_overflows(sym.value, sym.size, &end)) {
      return make_error("{}: {} [{}] symbol {}: st_value {:#x} + st_size {:#x} overflows", path_,
                        tname, table.index, i, sym.value, sym.size);
    }
    if (es.st_name != 0 || strtab.size != 0) {
      auto name = string_at(strtab, es.st_name, "symbol name");
      if (!name.ok()) {
        return make_error("{}: {} [{}] symbol {}: {}", path_, tname, table.index, i,
                          name.message());
      }
      sym.name = *name;
    }
    symbols_.push_back(sym);
  }
  return Ok{};
}

Status ElfFile::parse_notes() {
  for (const Section& s : sections_) {
    if (s.type != SHT_NOTE) continue;
    // Elf64_Nhdr is 12 bytes; name and desc are padded to the section's alignment: 4 for most
    // GNU notes, 8 for .note.gnu.property (the gABI says 8 for ELF64, toolchains use both).
    const uint64_t align = s.addralign == 8 ? 8 : 4;
    std::span<const uint8_t> data = section_data(s);
    uint64_t pos = 0;
    for (int guard = 0; pos < data.size() && guard < 4096; ++guard) {
      Elf64_Nhdr nh;
      if (!read_struct(data, pos, &nh)) {
        return make_error("{}: note section [{}] {}: truncated note header at offset {:#x}", path_,
                          s.index, s.name, s.offset + pos);
      }
      // name follows the 12-byte header; desc and the next note start at `align` boundaries.
      const uint64_t name_at = pos + sizeof(nh);
      const uint64_t desc_at = (name_at + nh.n_namesz + align - 1) & ~(align - 1);
      const uint64_t next = (desc_at + nh.n_descsz + align - 1) & ~(align - 1);
      if (!in_bounds(name_at, nh.n_namesz, data.size()) ||
          !in_bounds(desc_at, nh.n_descsz, data.size())) {
        return make_error("{}: note section [{}] {}: note at offset {:#x} runs past the section",
                          path_, s.index, s.name, s.offset + pos);
      }
      if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 &&
          std::memcmp(data.data() + name_at, "GNU", 4) == 0 && !build_id_) {
        if (nh.n_descsz == 0 || nh.n_descsz > 64) {
          return make_error("{}: note section [{}]: build-id of {} bytes (expected 1..64)", path_,
                            s.index, nh.n_descsz);
        }
        std::string hex;
        for (uint32_t i = 0; i < nh.n_descsz; ++i) {
          hex += fmt::format("{:02x}", data[desc_at + i]);
        }
        build_id_ = std::move(hex);
      }
      pos = next;
    }
  }
  return Ok{};
}

Status ElfFile::parse_dynamic() {
  const Section* dyn = nullptr;
  for (const Section& s : sections_) {
    if (s.type == SHT_DYNAMIC) {
      dyn = &s;
      break;
    }
  }
  if (dyn == nullptr) return Ok{};
  if (dyn->entsize != sizeof(Elf64_Dyn)) {
    return make_error("{}: .dynamic [{}]: sh_entsize is {}, expected {}", path_, dyn->index,
                      dyn->entsize, sizeof(Elf64_Dyn));
  }
  if (dyn->size % sizeof(Elf64_Dyn) != 0) {
    return make_error("{}: .dynamic [{}]: sh_size {} is not a multiple of {}", path_, dyn->index,
                      dyn->size, sizeof(Elf64_Dyn));
  }
  if (dyn->link == 0 || sections_[dyn->link].type != SHT_STRTAB) {
    return make_error("{}: .dynamic [{}]: sh_link {} does not point at SHT_STRTAB", path_,
                      dyn->index, dyn->link);
  }
  const Section& strtab = sections_[dyn->link];
  if (strtab.size > Limits::kMaxStringTable) {
    return make_error("{}: .dynamic [{}]: string table of {} bytes exceeds the 16 MiB cap", path_,
                      dyn->index, strtab.size);
  }
  uint64_t count = dyn->size / sizeof(Elf64_Dyn);
  for (uint64_t i = 0; i < count; ++i) {
    Elf64_Dyn d;
    read_struct(bytes_, dyn->offset + i * sizeof(Elf64_Dyn), &d);
    if (d.d_tag == DT_NULL) break;
    if (d.d_tag != DT_NEEDED && d.d_tag != DT_RUNPATH && d.d_tag != DT_RPATH &&
        d.d_tag != DT_SONAME) {
      continue;
    }
    auto str = string_at(strtab, d.d_un.d_val, "dynamic entry string");
    if (!str.ok()) return make_error("{}: .dynamic entry {}: {}", path_, i, str.message());
    if (d.d_tag == DT_NEEDED) {
      if (needed_.size() >= Limits::kMaxNeeded) {
        return make_error("{}: .dynamic: more than {} DT_NEEDED entries", path_,
                          Limits::kMaxNeeded);
      }
      needed_.push_back(*str);
    } else if (d.d_tag == DT_SONAME) {
      soname_ = *str;
    } else if (runpath_.size() < Limits::kMaxNeeded) {
      runpath_.push_back(*str);
    }
  }
  return Ok{};
}

const Section* ElfFile::section(std::string_view name) const {
  for (const Section& s : sections_) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

std::span<const uint8_t> ElfFile::section_data(const Section& section) const {
  if (!section.has_file_data()) return {};
  return bytes_.subspan(section.offset, section.size);
}

bool ElfFile::has_symbol_table(SymbolTable table) const {
  return table == SymbolTable::Symtab ? has_symtab_ : has_dynsym_;
}

const Symbol* ElfFile::find_symbol(std::string_view name) const {
  const Symbol* dynsym_match = nullptr;
  for (const Symbol& sym : symbols_) {
    if (!sym.defined() || sym.name != name) continue;
    if (sym.table == SymbolTable::Symtab) return &sym;
    if (dynsym_match == nullptr) dynsym_match = &sym;
  }
  return dynsym_match;
}

const Symbol* ElfFile::symbol_at(uint64_t addr) const {
  // Last symbol whose value <= addr, then walk back over symbols that might still contain it.
  const auto after =
      std::upper_bound(by_address_.begin(), by_address_.end(), addr,
                       [this](uint64_t a, uint32_t idx) { return a < symbols_[idx].value; });
  auto it = after;
  const Symbol* best = nullptr;
  constexpr int kMaxBacktrack = 64;  // bounded: overlapping symbols are rare
  for (int steps = 0; it != by_address_.begin() && steps < kMaxBacktrack; ++steps) {
    --it;
    const Symbol& sym = symbols_[*it];
    bool contains = sym.size == 0 ? sym.value == addr : addr - sym.value < sym.size;
    if (!contains) continue;
    if (best == nullptr) {
      best = &sym;
    } else if (sym.value == best->value && sym.table == SymbolTable::Symtab &&
               best->table == SymbolTable::Dynsym) {
      best = &sym;
    }
    if (best->table == SymbolTable::Symtab && sym.value < best->value) break;
  }
  return best != nullptr ? best : unsized_code_symbol_at(addr, after);
}

const Symbol* ElfFile::unsized_code_symbol_at(uint64_t addr,
                                              std::vector<uint32_t>::const_iterator it) const {
  // Hand-written assembly often declares its entry points without .size (Tarantool's
  // coro_transfer and, on arm64, coro_startup are size 0): such a symbol covers the code up to
  // the next symbol, as gdb's minimal symbols and perf treat it, but only when it is the nearest
  // symbol before `addr` and both lie in one executable section. `it`: the first symbol after
  // `addr` in by_address_.
  if (it == by_address_.begin()) return nullptr;
  const Symbol* nearest = &symbols_[*std::prev(it)];
  const uint64_t at = nearest->value;
  const Symbol* best = nullptr;
  for (auto j = it; j != by_address_.begin() && symbols_[*std::prev(j)].value == at; --j) {
    const Symbol& sym = symbols_[*std::prev(j)];
    if (sym.size != 0) return nullptr;  // a sized symbol starts there and ends before addr
    if ((sym.type == STT_FUNC || sym.type == STT_NOTYPE) &&
        (best == nullptr || sym.table == SymbolTable::Symtab)) {
      best = &sym;
    }
  }
  if (best == nullptr || best->shndx >= sections_.size()) return nullptr;
  const Section& sec = sections_[best->shndx];
  if (!(sec.flags & SHF_EXECINSTR) || at < sec.addr || addr - sec.addr >= sec.size) return nullptr;
  return best;
}

Result<uint64_t> ElfFile::file_offset(uint64_t vaddr) const {
  for (const Segment& seg : segments_) {
    if (seg.type != PT_LOAD) continue;
    if (vaddr >= seg.vaddr && vaddr - seg.vaddr < seg.filesz)
      return seg.offset + (vaddr - seg.vaddr);
  }
  return make_error("{}: address {:#x} is not in the file-backed part of any PT_LOAD segment",
                    path_, vaddr);
}

Result<std::span<const uint8_t>> ElfFile::read(uint64_t vaddr, uint64_t len) const {
  for (const Segment& seg : segments_) {
    if (seg.type != PT_LOAD) continue;
    if (vaddr < seg.vaddr || vaddr - seg.vaddr >= seg.filesz) continue;
    uint64_t rel = vaddr - seg.vaddr;
    if (len > seg.filesz - rel) {
      return make_error(
          "{}: read of {} bytes at {:#x} runs past the file-backed part of its PT_LOAD "
          "segment ({:#x}..{:#x})",
          path_, len, vaddr, seg.vaddr, seg.vaddr + seg.filesz);
    }
    uint64_t off = seg.offset + rel;
    if (!in_bounds(off, len, bytes_.size())) {
      return make_error("{}: read of {} bytes at {:#x} (file offset {:#x}) is outside the file",
                        path_, len, vaddr, off);
    }
    return bytes_.subspan(off, len);
  }
  return make_error("{}: address {:#x} is not in the file-backed part of any PT_LOAD segment",
                    path_, vaddr);
}

std::unique_ptr<ElfFile> separate_debug_file(const ElfFile& file, const std::string& debug_dir) {
  const std::optional<std::string>& id = file.build_id();
  if (!id || id->size() < 3) return nullptr;
  auto debug =
      ElfFile::open(debug_dir + "/.build-id/" + id->substr(0, 2) + "/" + id->substr(2) + ".debug");
  if (!debug.ok() || (*debug)->build_id() != id) return nullptr;
  return std::move(*debug);
}

const ElfFile* LazyDebugFile::get(const ElfFile& file) {
  if (!looked_) {
    looked_ = true;
    file_ = separate_debug_file(file);
    // Read once for its symbol tables; names fault back in when a lookup needs one.
    if (file_) file_->release_resident_pages();
  }
  return file_.get();
}

}  // namespace ljprof::elf
