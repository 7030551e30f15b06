// CoreFile: an ELF core file (Linux kernel, gdb `gcore`, or qemu-user guest core) of an x86-64
// or AArch64 process, opened for post-mortem unwinding.
//
// What it gives: every thread's registers (NT_PRSTATUS), the process and signal (NT_PRPSINFO,
// NT_SIGINFO), the aux vector (NT_AUXV), the file mappings (NT_FILE, or — for qemu-user cores,
// which have no NT_FILE — the dynamic linker's link_map read from the core's memory), and reads
// of the process memory. Memory comes from the core's PT_LOAD bytes first; a file-backed range the
// core holds no bytes for (p_filesz < p_memsz, or no segment at all, as gdb and qemu omit
// read-only file pages) is read from the mapped file itself. A mapped file whose build-id the core
// contains (in the ELF notes of the mapping's first page) must match it, or that file is refused;
// so is a file of another architecture, and (link_map mode) an executable whose e_entry does not
// land on AT_ENTRY.
//
// Everything read from the core is bounds-checked and capped; a malformed core fails `open` with a
// message naming the file, the offset and the rule. Reads are all-or-nothing.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "abi/read_mem.h"
#include "common/result.h"
#include "elf/elf_file.h"
#include "proc/proc_maps.h"

namespace ljprof::core {

// Caps that bound the work and memory an opened core can cost.
struct Limits {
  static constexpr uint32_t kMaxNotes = 1u << 17;
  static constexpr uint64_t kMaxNoteDesc = 16u << 20;  // one note's descriptor (NT_FILE is largest)
  static constexpr uint32_t kMaxThreads = 1u << 14;
  static constexpr uint64_t kMaxMappings = 1u << 16;  // Linux vm.max_map_count is 65530
  static constexpr uint32_t kMaxAuxv = 512;
  static constexpr uint32_t kMaxPath = 4096;  // PATH_MAX
  static constexpr uint32_t kMaxLinkMapEntries = 1024;
  static constexpr uint32_t kMaxMappedFiles = 4096;
  static constexpr uint64_t kMaxRead = 1u << 30;
  static constexpr uint32_t kMaxHeaderNoteBytes = 1u << 16;  // PT_NOTE of a mapped ELF header
};

struct CoreOptions {
  // Roots to look for each recorded file path in, like a loader with several library roots:
  // each ROOT + recorded path in order, then the recorded path itself; the first candidate that
  // is an ELF file of the core's architecture and whose build-id equals the one the core holds
  // for that mapping (when it holds one) is used. E.g. /usr/aarch64-linux-gnu for a
  // qemu-aarch64 core whose libraries are /lib/libc.so.6 — while a library qemu took from the
  // host's multiarch tree (/lib/aarch64-linux-gnu/libc.so.6) is found at its own path.
  std::vector<std::string> sysroots;
  // File to use for the executable's mappings instead of the recorded path (not prefixed by
  // `sysroot`).
  std::string exe;
  // Open the mapped files (false: only the core's own bytes are readable; for fuzzing).
  bool open_mapped_files = true;
};

// One thread's general-purpose registers, in the order of the kernel's regset for the
// architecture: x86-64 `struct user_regs_struct` (27 registers), AArch64 `struct user_pt_regs`
// (x0..x30, sp, pc, pstate). Names: `gpr_name`.
struct Thread {
  static constexpr size_t kMaxGprs = 34;

  elf::Arch arch = elf::Arch::X86_64;
  uint32_t tid = 0;    // pr_pid
  int32_t signal = 0;  // pr_cursig: the signal the thread was stopped by (0 if none)
  uint64_t pc = 0;     // rip / pc
  uint64_t sp = 0;     // rsp / sp
  uint64_t fp = 0;     // rbp / x29
  uint64_t lr = 0;     // x30 on AArch64; 0 on x86-64, which has no link register
  // Where the thread's TLS is found: x86-64 fs_base (in NT_PRSTATUS), AArch64 TPIDR_EL0 (the
  // thread's NT_ARM_TLS note, which qemu-user cores lack). nullopt when the core has none.
  std::optional<uint64_t> thread_pointer;
  std::array<uint64_t, kMaxGprs> gprs{};
  uint32_t gpr_count = 0;

  // The register with this kernel name (`gpr_name`), if the architecture has it.
  std::optional<uint64_t> reg(std::string_view name) const;
};
// Name of GPR `index` of `arch` in kernel regset order ("rip", "x29", "sp", ...), or nullptr.
const char* gpr_name(elf::Arch arch, uint32_t index);
uint32_t gpr_count(elf::Arch arch);

// NT_PRPSINFO (struct elf_prpsinfo).
struct ProcessInfo {
  int32_t pid = 0;
  int32_t ppid = 0;
  uint32_t uid = 0;
  uint32_t gid = 0;
  char state = 0;      // pr_sname: 'R', 'S', ...
  std::string fname;   // pr_fname: executable basename, at most 15 characters
  std::string psargs;  // pr_psargs: the first 80 bytes of the command line
};

// NT_SIGINFO (siginfo_t of the signal that killed the process).
struct SignalInfo {
  int32_t signo = 0;
  int32_t errno_value = 0;
  int32_t code = 0;
  // si_addr for SIGSEGV/SIGBUS/SIGILL/SIGFPE/SIGTRAP; 0 otherwise.
  uint64_t fault_addr = 0;
  // si_pid of the sender for a signal sent by kill/tgkill/raise (si_code <= 0); 0 otherwise.
  int32_t sender_pid = 0;
};

struct AuxEntry {
  uint64_t type = 0;  // AT_*
  uint64_t value = 0;
};

// Where the file mappings came from.
enum class MappingSource {
  NtFile,    // the core's NT_FILE note (kernel and gdb cores)
  LinkMap,   // the executable (auxv) + the dynamic linker's r_debug/link_map in core memory
  ProcMaps,  // a live process's /proc/PID/maps (CoreFile::from_process)
  None,      // neither: only the core's own bytes are readable
};
const char* mapping_source_name(MappingSource source);

// The outcome of opening and checking one mapped file.
enum class FileCheck {
  Verified,    // the core holds the mapping's build-id note and it equals the file's
  Unverified,  // the core does not hold the build-id note (page not dumped, or no note)
  Mismatch,    // the core's build-id differs from the file's: the file is refused
  OpenFailed,  // missing / not a valid ELF file: the file is refused
  NotOpened,   // CoreOptions::open_mapped_files was false
  Mapped,      // a live process's own mapping, opened through /proc/PID/map_files
};
const char* file_check_name(FileCheck check);

struct MappedFile {
  std::string path;                // as recorded in the core (NT_FILE or link_map l_name)
  std::string resolved;            // the path actually opened (sysroot / exe override applied)
  std::vector<std::string> tried;  // every candidate path, in the order they were tried
  bool is_executable = false;
  FileCheck check = FileCheck::NotOpened;
  std::optional<std::string> core_build_id;  // hex, as found in the core's memory
  std::string error;                         // why the file is refused (Mismatch, OpenFailed)
  std::unique_ptr<elf::ElfFile> elf;         // set when the file may be read

  bool usable() const { return elf != nullptr; }
};

struct Mapping {
  uint64_t start = 0;
  uint64_t end = 0;          // exclusive
  uint64_t file_offset = 0;  // byte offset in the file of `start`
  uint32_t file_index = 0;   // index into CoreFile::files()
};

// [start, end) of process memory.
struct AddressRange {
  uint64_t start = 0;
  uint64_t end = 0;  // exclusive
};

// Where a process address lies in a mapped file (for symbolization).
struct FileAddress {
  const MappedFile* file = nullptr;
  uint64_t file_offset = 0;
  uint64_t vaddr = 0;  // the same byte in the file's own (link-time) address space
};

class CoreFile {
 public:
  static Result<CoreFile> open(const std::string& path, const CoreOptions& options = {});
  // A core image already in memory (tests, fuzzing); `bytes` must outlive the result.
  static Result<CoreFile> from_memory(std::span<const uint8_t> bytes, std::string name,
                                      const CoreOptions& options = {});

  // A live process seen as a core without stopping it (`ljprof fibers`): its mappings from
  // /proc/PID/maps with every mapped ELF file opened through /proc/PID/map_files (the very file
  // it maps, even deleted or in another mount namespace), its aux vector from /proc/PID/auxv, and
  // every read from /proc/PID/mem at the moment of the read. It has no threads (their registers
  // need the process stopped) and no process or signal notes. Reads race the running process:
  // what they return is consistent only where the caller proves it (a fiber's csw unchanged).
  static Result<CoreFile> from_process(uint32_t pid);

  CoreFile(CoreFile&&) noexcept;
  CoreFile& operator=(CoreFile&&) noexcept;
  ~CoreFile();

  const std::string& path() const;
  elf::Arch arch() const;

  // The process a live CoreFile reads (from_process); nullopt for a core file.
  std::optional<uint32_t> live_pid() const;
  // Threads in note order; the first is the one that received the fatal signal.
  std::span<const Thread> threads() const;
  const std::optional<ProcessInfo>& process() const;
  const std::optional<SignalInfo>& signal() const;
  std::span<const AuxEntry> auxv() const;
  std::optional<uint64_t> auxv_value(uint64_t type) const;

  MappingSource mapping_source() const;
  // Sorted by start, non-overlapping.
  std::span<const Mapping> mappings() const;
  std::span<const MappedFile> files() const;
  const Mapping* mapping_at(uint64_t addr) const;
  const MappedFile& file_of(const Mapping& mapping) const;
  // Writable private memory that maps no file, where allocators keep their heaps: a core's
  // writable PT_LOAD bytes outside every file mapping (the bytes the core holds), a live
  // process's rw-p mappings without a file ([heap] and anonymous; not [stack], [vvar]). Sorted.
  std::vector<AddressRange> anonymous_writable() const;
  // The executable's MappedFile (found through AT_ENTRY), if known.
  const MappedFile* executable() const;
  // The mapped file, file offset and link-time address of `addr`; an error when `addr` is in no
  // file mapping, its file is refused, or the offset is in no PT_LOAD of the file.
  Result<FileAddress> file_address(uint64_t addr) const;
  // Runtime address minus link-time address of file `file_index` (0 for a non-PIE executable),
  // from its first mapping that holds the start of a PT_LOAD; an error if the file is refused or
  // no mapping does.
  Result<uint64_t> load_bias(uint32_t file_index) const;
  // Non-fatal findings of `open`: refused files, link_map entries that could not be resolved.
  std::span<const std::string> diagnostics() const;

  // Copies `len` bytes at `addr` into `dst`: core bytes first, then the mapped file. All or
  // nothing: returns `len`, or an error naming the first address that cannot be read and why.
  Result<size_t> read(uint64_t addr, void* dst, size_t len) const;
  Result<uint64_t> read_u64(uint64_t addr) const;
  Result<uint32_t> read_u32(uint64_t addr) const;
  // A NUL-terminated string of at most `max_len` bytes (without the NUL).
  Result<std::string> read_c_string(uint64_t addr, size_t max_len) const;
  // Whether the core itself (not a mapped file) holds the byte at `addr`.
  bool core_has(uint64_t addr) const;
  // The core's own bytes of the PT_LOAD segment that holds `addr`, readable in place for as long
  // as the CoreFile lives (release_resident_pages keeps them valid: they are read again on the
  // next touch): `start` is the address of bytes[0]. Empty for a live process (its memory
  // changes, and cached pages go) and where the core holds no byte at `addr`.
  struct InPlaceBytes {
    uint64_t start = 0;
    std::span<const uint8_t> bytes;
  };
  InPlaceBytes in_place_at(uint64_t addr) const;

  // A live process only (from_process): reads `ranges` in one batch (proc::ProcessMemory::
  // read_ranges) and serves reads that lie inside one of them from that batch until
  // drop_prefetch(): for a caller about to read many small pieces, as of one moment. Does nothing
  // for a core file. Not thread-safe, like every read.
  void prefetch(std::span<const proc::MemoryRange> ranges) const;
  void drop_prefetch() const;
  // A live process only: while on, a read inside one page reads that whole page the first time
  // and later reads of it come from that copy (memory as of that first read); turning it on or
  // off empties the cache. For one walk, whose reads are many and close together. At most
  // `max_pages` are kept; then reads go through uncached, or with `start_over` the cache is
  // emptied and fills again (a walk over more memory than the cache holds: the heap).
  // `ahead_pages`: a miss on the page next to the previous miss (a walk going through memory,
  // up or down) reads that many pages in one read.
  void cache_pages(bool on, size_t max_pages = kDefaultCachedPages, bool start_over = false,
                   uint32_t ahead_pages = 1) const;
  // A live process only: the cached copies of the pages holding [addr, addr + len) are dropped,
  // so the next read of them sees the process's memory as it is then.
  void forget_cached_pages(uint64_t addr, uint64_t len) const;
  static constexpr size_t kDefaultCachedPages = 256;  // 1 MiB: a deep stack walk
  // A core file: drops its mapped pages read so far (read again from the kernel's page cache on
  // the next touch). A live process: nothing (its page cache is bounded by cache_pages).
  void release_resident_pages() const;

  // The C interface for the natively compiled walker. `ctx` is the core's internal state, so
  // the reader stays valid when the CoreFile is moved; it must not outlive the CoreFile.
  ljprof_mem_reader mem_reader() const;

 private:
  struct State;
  explicit CoreFile(std::unique_ptr<State> state);
  static int read_mem_of_state(void* ctx, uint64_t addr, void* dst, uint32_t len);
  static int read_live_of_state(void* ctx, uint64_t addr, void* dst, uint32_t len);
  static Result<CoreFile> from_elf(std::unique_ptr<elf::ElfFile> elf, const CoreOptions& options);
  std::unique_ptr<State> state_;
};

}  // namespace ljprof::core

extern "C" {
// ljprof_read_mem_fn over a `const ljprof::core::CoreFile*` context.
int ljprof_core_read_mem(void* ctx, uint64_t addr, void* dst, uint32_t len);
}
