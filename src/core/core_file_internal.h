// CoreFile::State: what an opened core holds, shared by the parts of CoreFile (core_file.cc,
// core_notes.cc, core_mappings.cc, core_memory.cc).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/core_file.h"

namespace ljprof::core {

// A PT_LOAD segment of the core: process memory at `vaddr` whose first `present` bytes the core
// file holds at `offset`.
struct LoadSegment {
  uint64_t vaddr = 0;
  uint64_t memsz = 0;
  uint64_t filesz = 0;
  uint64_t offset = 0;
  uint64_t present = 0;   // bytes of the file part that the core file really holds (truncation)
  bool writable = false;  // PF_W
};

// Bytes of a live process read in one batch (CoreFile::prefetch), served before its memory until
// CoreFile::drop_prefetch.
struct PrefetchedMemory {
  std::vector<proc::MemoryRange> ranges;  // those read, sorted by address
  std::vector<size_t> offsets;            // where each range's bytes start in `bytes`
  std::vector<uint8_t> bytes;
  // All of [addr, addr + len) from one range, or false.
  bool read(uint64_t addr, void* dst, size_t len) const;
};

// Whole pages of a live process read on first use while CoreFile::cache_pages is on: a walk reads
// a stack and the Lua objects it names in small pieces, mostly a few bytes apart. The copies live
// in one block of max_pages slots, allocated at the first page and reused when the cache starts
// over: a page allocated and freed each time came back from the kernel zeroed each time once
// glibc had given the freed block back (clear_page was 27% of a 1 GB live heap walk).
struct PageCache {
  static constexpr uint64_t kPage = 4096;
  static constexpr uint64_t kNoPage = UINT64_MAX;
  size_t max_pages = 0;  // then reads go through uncached, or (start_over) the cache empties
  bool start_over = false;
  bool on = false;
  // A miss next to the previous miss (a walk going through memory up or down) reads this many
  // pages in one read, in that direction; 1: a page a read.
  uint32_t ahead = 1;
  uint64_t last_miss = kNoPage;
  std::unordered_map<uint64_t, uint32_t> pages;  // page address -> slot
  std::unique_ptr<uint8_t[]> slots;              // max_pages pages, not initialised
  size_t slot_count = 0;                         // slots allocated
  uint32_t used = 0;                             // slots holding a page since the last reset
  // The page read last and its slot: most reads are the next field of the object read before,
  // and need no search of `pages` (a heap walk reads ~10 fields an object).
  uint64_t last_page = kNoPage;
  uint32_t last_slot = 0;
  uint8_t* slot(uint32_t i) const { return slots.get() + uint64_t{i} * kPage; }
  // Empties the cache; keeps the block for the next pages.
  void reset() {
    pages.clear();
    used = 0;
    last_miss = kNoPage;
    last_page = kNoPage;
  }
};

struct CoreFile::State {
  std::string path;
  CoreOptions options;
  std::unique_ptr<elf::ElfFile> elf;
  elf::Arch arch = elf::Arch::X86_64;
  std::vector<Thread> threads;
  std::optional<ProcessInfo> process;
  std::optional<SignalInfo> signal;
  std::vector<AuxEntry> auxv;
  bool have_auxv = false;
  bool have_nt_file = false;
  std::vector<LoadSegment> segments;  // PT_LOAD, sorted by vaddr, non-overlapping
  // A live process: its writable private mappings of no file (CoreFile::anonymous_writable).
  std::vector<AddressRange> live_anonymous_writable;
  MappingSource source = MappingSource::None;
  std::vector<Mapping> mappings;
  std::vector<MappedFile> files;
  int exe_index = -1;
  std::vector<std::string> diagnostics;
  // NT_FILE before files are opened: recorded path per mapping.
  std::vector<std::string> nt_file_paths;
  // A live process (CoreFile::from_process): every read goes to its memory.
  std::unique_ptr<proc::ProcessMemory> live;
  PrefetchedMemory prefetched;
  mutable PageCache page_cache;  // filled by reads, which are const
  // A read of the live process through the prefetched batch, then the page cache, then its
  // memory: 0 or -EFAULT (abi/read_mem.h).
  int read_live(uint64_t addr, void* dst, uint32_t len) const;
  bool cache_missed_pages(uint64_t page) const;

  std::span<const uint8_t> bytes() const { return elf->bytes(); }

  Status parse_segments();
  Status parse_notes();
  Status parse_note(uint32_t type, std::string_view name, std::span<const uint8_t> desc,
                    uint64_t file_offset);
  Status parse_prstatus(std::span<const uint8_t> desc, uint64_t file_offset);
  Status parse_arm_tls(std::span<const uint8_t> desc, uint64_t file_offset);
  Status parse_prpsinfo(std::span<const uint8_t> desc, uint64_t file_offset);
  Status parse_siginfo(std::span<const uint8_t> desc, uint64_t file_offset);
  Status parse_auxv(std::span<const uint8_t> desc, uint64_t file_offset);
  Status parse_nt_file(std::span<const uint8_t> desc, uint64_t file_offset);
  Status build_nt_file_mappings();
  void build_link_map_mappings();
  std::optional<std::string> recorded_executable_path();
  std::optional<uint64_t> place_executable(uint32_t exe, uint64_t phdr, uint64_t entry);
  std::optional<uint64_t> r_debug_address(const elf::ElfFile& exe, uint64_t bias) const;
  void add_link_map_files(uint64_t r_debug);
  // Why `candidate` cannot be the file the core mapped (its build-id differs from the one the
  // core holds, or it does not fit the loader's record of it); nothing when it fits.
  using Fits = std::function<std::optional<std::string>(const std::string& path,
                                                        const elf::ElfFile& candidate)>;
  std::optional<uint32_t> add_file(const std::string& recorded, bool is_exe, const Fits& fits);
  Fits loaded_file_fits(uint64_t l_addr, uint64_t l_ld) const;
  std::optional<std::string> build_id_differs(uint64_t header_addr, const std::string& path,
                                              const elf::ElfFile& candidate) const;
  std::vector<std::string> candidate_paths(const std::string& recorded, bool is_exe) const;
  void add_elf_mappings(uint32_t file_index, uint64_t bias);
  void check_build_ids();
  std::optional<uint64_t> aux(uint64_t type) const;

  const LoadSegment* segment_at(uint64_t addr) const;
  const LoadSegment* segment_after(uint64_t addr) const;
  const Mapping* mapping_at(uint64_t addr) const;
  bool core_read(uint64_t addr, void* dst, size_t len) const;
  Result<size_t> read_piece(uint64_t addr, uint8_t* dst, size_t want) const;
  Result<size_t> read(uint64_t addr, void* dst, size_t len) const;
  Result<std::string> read_c_string(uint64_t addr, size_t max_len) const;
  Result<uint64_t> read_u64(uint64_t addr) const;
  Result<std::optional<std::string>> build_id_in_core(uint64_t header_addr) const;
};

}  // namespace ljprof::core
