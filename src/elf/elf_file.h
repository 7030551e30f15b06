// ElfFile: a read-only, bounds-checked view of one ELF64 little-endian file (x86-64 or AArch64).
//
// The file is mmap'd read-only; every header, table, link and address is validated when the
// file is opened, so later lookups cannot read outside the mapping. Anything malformed fails the
// open with a message naming the file, the table and the rule that failed.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace ljprof::elf {

enum class Arch { X86_64, AArch64 };
const char* arch_name(Arch arch);  // "x86-64", "aarch64"

enum class SymbolTable : uint8_t { Symtab, Dynsym };
const char* symbol_table_name(SymbolTable table);  // ".symtab", ".dynsym"

struct Symbol {
  std::string_view name;  // points into the mapping
  uint64_t value = 0;
  uint64_t size = 0;
  uint8_t type = 0;  // STT_*
  uint8_t bind = 0;  // STB_*
  uint16_t shndx = 0;
  uint32_t index = 0;  // index in its table
  SymbolTable table = SymbolTable::Symtab;

  bool defined() const { return shndx != 0; }  // SHN_UNDEF == 0
};

struct Section {
  uint32_t index = 0;
  std::string_view name;
  uint32_t type = 0;
  uint64_t flags = 0;
  uint64_t addr = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
  uint32_t link = 0;
  uint32_t info = 0;
  uint64_t addralign = 0;
  uint64_t entsize = 0;

  bool has_file_data() const;  // not SHT_NOBITS / SHT_NULL
};

struct Segment {
  uint32_t type = 0;
  uint32_t flags = 0;
  uint64_t offset = 0;
  uint64_t vaddr = 0;
  uint64_t filesz = 0;
  uint64_t memsz = 0;
  uint64_t align = 0;
};

// Caps that bound the work and memory an opened file can cost.
struct Limits {
  static constexpr uint64_t kMaxStringTable = 16u << 20;  // 16 MiB
  static constexpr uint32_t kMaxSections = 1u << 16;
  static constexpr uint32_t kMaxSegments = 1u << 12;
  // A core has one PT_LOAD per mapping of the process (Linux vm.max_map_count is 65530, and a
  // Tarantool with thousands of fibers has two mappings per fiber stack).
  static constexpr uint32_t kMaxCoreSegments = 1u << 17;
  static constexpr uint64_t kMaxSymbols = 1u << 22;  // both tables together
  static constexpr uint32_t kMaxNeeded = 1024;
};

class ElfFile {
 public:
  // Maps `path` read-only and validates it.
  static Result<std::unique_ptr<ElfFile>> open(const std::string& path);
  // Validates an image already in memory (tests, fuzzing). `bytes` must outlive the result.
  static Result<std::unique_ptr<ElfFile>> from_memory(std::span<const uint8_t> bytes,
                                                      std::string name);

  ~ElfFile();
  ElfFile(const ElfFile&) = delete;
  ElfFile& operator=(const ElfFile&) = delete;

  const std::string& path() const { return path_; }
  Arch arch() const { return arch_; }
  uint16_t type() const { return type_; }  // ET_EXEC, ET_DYN, ET_CORE, ...
  uint64_t entry() const { return entry_; }
  std::span<const uint8_t> bytes() const { return bytes_; }

  std::span<const Section> sections() const { return sections_; }
  const Section* section(std::string_view name) const;  // first section with that name
  // Drops this process's resident pages of the file's mapping (madvise MADV_DONTNEED); a later
  // access reads them again from the page cache, unchanged (the mapping is read-only and
  // private, never written). For a file analysed once and then only looked up by symbol, most
  // of its pages are never touched again. No effect on a file read from memory.
  void release_resident_pages() const;
  // What the parsed file holds on the heap, in bytes (its tables of sections, segments and
  // symbols; not the mapping, whose pages are the page cache's).
  uint64_t heap_bytes() const;
  // The bytes of a section that has file data (validated at open, so always in the file).
  std::span<const uint8_t> section_data(const Section& section) const;

  std::span<const Segment> segments() const { return segments_; }

  // All symbols of .symtab then .dynsym (the index of each within its table is kept).
  std::span<const Symbol> symbols() const { return symbols_; }
  bool has_symbol_table(SymbolTable table) const;
  // A defined symbol with exactly this name; .symtab wins over .dynsym.
  const Symbol* find_symbol(std::string_view name) const;
  // The defined function/object symbol whose [value, value+size) contains `addr`. Prefers
  // .symtab, then the larger-value symbol. With none, a zero-size code symbol (assembly without
  // .size) that is the nearest symbol before `addr` in the same executable section.
  const Symbol* symbol_at(uint64_t addr) const;

  // Hex of NT_GNU_BUILD_ID, if the file has one.
  const std::optional<std::string>& build_id() const { return build_id_; }
  // DT_NEEDED / DT_RUNPATH / DT_RPATH / DT_SONAME from the dynamic section.
  const std::vector<std::string_view>& needed() const { return needed_; }
  const std::vector<std::string_view>& runpath() const { return runpath_; }
  std::optional<std::string_view> soname() const { return soname_; }

  // Virtual address -> file offset through the PT_LOAD segment that holds it in its file part.
  Result<uint64_t> file_offset(uint64_t vaddr) const;
  // `len` bytes at a virtual address, all inside the file-backed part of one PT_LOAD.
  Result<std::span<const uint8_t>> read(uint64_t vaddr, uint64_t len) const;

 private:
  ElfFile() = default;
  Status parse();
  Status parse_header();
  Status parse_sections();
  const Symbol* unsized_code_symbol_at(uint64_t addr,
                                       std::vector<uint32_t>::const_iterator after) const;
  Status parse_segments();
  Status parse_symbols();
  Status parse_notes();
  Status parse_dynamic();
  Status load_symbol_table(const Section& table, SymbolTable kind);
  Result<std::string_view> string_at(const Section& strtab, uint64_t offset,
                                     const char* what) const;

  std::string path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::span<const uint8_t> bytes_;

  Arch arch_ = Arch::X86_64;
  uint16_t type_ = 0;
  uint64_t entry_ = 0;
  std::vector<Section> sections_;
  std::vector<Segment> segments_;
  std::vector<Symbol> symbols_;
  std::vector<uint32_t> by_address_;  // indices of defined func/object symbols, sorted
  bool has_symtab_ = false;
  bool has_dynsym_ = false;
  std::optional<std::string> build_id_;
  std::vector<std::string_view> needed_;
  std::vector<std::string_view> runpath_;
  std::optional<std::string_view> soname_;
};

// Where Debian (and gdb, by default) keeps separate debug files: DEBUG_DIR/.build-id/xx/rest.debug.
inline constexpr const char* kDebugDir = "/usr/lib/debug";
// The separate debug file of `file` found by build-id as gdb and addr2line find it
// (DEBUG_DIR/.build-id/xx/rest.debug, e.g. from Debian's -dbgsym package), when it exists and
// its own build-id is the file's; nullptr otherwise.
std::unique_ptr<ElfFile> separate_debug_file(const ElfFile& file,
                                             const std::string& debug_dir = kDebugDir);

// A file's separate debug file, looked for on first use only: most files' frames are named by
// their own symbols, and a debug file's .symtab (libc's: 10k symbols) costs memory once parsed.
class LazyDebugFile {
 public:
  // The debug file of `file` (the same file at every call), or nullptr when there is none.
  const ElfFile* get(const ElfFile& file);
  uint64_t heap_bytes() const { return file_ ? file_->heap_bytes() : 0; }

 private:
  bool looked_ = false;
  std::unique_ptr<ElfFile> file_;
};

}  // namespace ljprof::elf
