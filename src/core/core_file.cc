// Why the notes are parsed by hand instead of with libelf/libdw: the descriptors of the core notes
// (elf_prstatus, elf_prpsinfo, the NT_FILE table) are Linux ABI structs that neither library
// decodes, libdw's core support (dwfl_core_file_report) trusts NT_FILE and reports no malformed
// counts, and we need every count, size and range of a possibly truncated core checked by rules
// of our own. Layouts come from the kernel's include/uapi/linux/elfcore.h (struct elf_prstatus,
// elf_prpsinfo), fs/binfmt_elf.c (fill_files_note: NT_FILE) and the regsets of
// arch/x86/include/asm/user_64.h (user_regs_struct) and arch/arm64/include/uapi/asm/ptrace.h
// (user_pt_regs). Every read goes through `read_struct` (common/bounds.h), which bounds-checks and
// memcpy's.
#include "core/core_file.h"

#include "common/bounds.h"

#include <elf.h>
#include <link.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>

namespace ljprof::core {

namespace {

uint64_t align_up4(uint64_t v) {
  return (v + 3) & ~uint64_t{3};
}

// Fixed-length, possibly unterminated char array -> string up to the first NUL.
std::string fixed_string(const uint8_t* p, size_t n) {
  const void* nul = std::memchr(p, 0, n);
  size_t len = nul ? static_cast<size_t>(static_cast<const uint8_t*>(nul) - p) : n;
  return std::string(reinterpret_cast<const char*>(p), len);
}

std::string hex_of(std::span<const uint8_t> bytes) {
  std::string hex;
  for (uint8_t b : bytes) hex += fmt::format("{:02x}", b);
  return hex;
}

constexpr const char* kX86Gprs[] = {"r15",     "r14",      "r13", "r12", "rbp",    "rbx", "r11",
                                    "r10",     "r9",       "r8",  "rax", "rcx",    "rdx", "rsi",
                                    "rdi",     "orig_rax", "rip", "cs",  "eflags", "rsp", "ss",
                                    "fs_base", "gs_base",  "ds",  "es",  "fs",     "gs"};
constexpr uint32_t kX86Rbp = 4, kX86Rip = 16, kX86Rsp = 19;
constexpr const char* kA64Gprs[] = {"x0",  "x1",  "x2",  "x3",  "x4",  "x5",  "x6",    "x7",  "x8",
                                    "x9",  "x10", "x11", "x12", "x13", "x14", "x15",   "x16", "x17",
                                    "x18", "x19", "x20", "x21", "x22", "x23", "x24",   "x25", "x26",
                                    "x27", "x28", "x29", "x30", "sp",  "pc",  "pstate"};
constexpr uint32_t kA64Fp = 29, kA64Lr = 30, kA64Sp = 31, kA64Pc = 32;

// struct elf_prstatus: pr_reg follows elf_siginfo (12), pr_cursig (2 + 2 pad), pr_sigpend and
// pr_sighold (8 each), pr_pid/ppid/pgrp/sid (4 each) and four struct timeval (16 each).
constexpr uint64_t kPrstatusCursig = 12;
constexpr uint64_t kPrstatusPid = 32;
constexpr uint64_t kPrstatusReg = 112;
// pr_reg, then int pr_fpvalid, padded to 8.
uint64_t prstatus_size(elf::Arch arch) {
  return kPrstatusReg + uint64_t{gpr_count(arch)} * 8 + 8;
}

// struct elf_prpsinfo (64-bit): pr_state/sname/zomb/nice, pad, pr_flag (8), pr_uid, pr_gid,
// pr_pid, pr_ppid, pr_pgrp, pr_sid (4 each), pr_fname[16], pr_psargs[80].
constexpr uint64_t kPrpsinfoSize = 136;
// siginfo_t is 128 bytes; si_signo, si_errno, si_code, then the union at 16 (si_addr, or
// si_pid + si_uid).
constexpr uint64_t kSiginfoSize = 128;

// Signals whose siginfo carries si_addr (asm-generic/siginfo.h, the _sigfault member).
bool is_fault_signal(int signo) {
  return signo == 4 || signo == 5 || signo == 7 || signo == 8 ||
         signo == 11;  // ILL TRAP BUS FPE SEGV
}

struct LoadSegment {
  uint64_t vaddr = 0;
  uint64_t memsz = 0;
  uint64_t filesz = 0;
  uint64_t offset = 0;
  uint64_t present = 0;  // bytes of the file part that the core file really holds (truncation)
};

}  // namespace

const char* gpr_name(elf::Arch arch, uint32_t index) {
  if (index >= gpr_count(arch)) return nullptr;
  return arch == elf::Arch::X86_64 ? kX86Gprs[index] : kA64Gprs[index];
}

uint32_t gpr_count(elf::Arch arch) {
  return arch == elf::Arch::X86_64 ? std::size(kX86Gprs) : std::size(kA64Gprs);
}

std::optional<uint64_t> Thread::reg(std::string_view name) const {
  for (uint32_t i = 0; i < gpr_count && i < kMaxGprs; ++i) {
    if (name == gpr_name(arch, i)) return gprs[i];
  }
  return std::nullopt;
}

const char* mapping_source_name(MappingSource source) {
  switch (source) {
    case MappingSource::NtFile:
      return "NT_FILE";
    case MappingSource::LinkMap:
      return "link_map";
    case MappingSource::None:
      return "none";
  }
  return "?";
}

const char* file_check_name(FileCheck check) {
  switch (check) {
    case FileCheck::Verified:
      return "verified";
    case FileCheck::Unverified:
      return "unverified";
    case FileCheck::Mismatch:
      return "build-id mismatch";
    case FileCheck::OpenFailed:
      return "open failed";
    case FileCheck::NotOpened:
      return "not opened";
  }
  return "?";
}

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
  MappingSource source = MappingSource::None;
  std::vector<Mapping> mappings;
  std::vector<MappedFile> files;
  int exe_index = -1;
  std::vector<std::string> diagnostics;
  // NT_FILE before files are opened: recorded path per mapping.
  std::vector<std::string> nt_file_paths;

  std::span<const uint8_t> bytes() const { return elf->bytes(); }

  Status parse_segments();
  Status parse_notes();
  Status parse_note(uint32_t type, std::string_view name, std::span<const uint8_t> desc,
                    uint64_t file_offset);
  Status parse_prstatus(std::span<const uint8_t> desc, uint64_t file_offset);
  Status parse_prpsinfo(std::span<const uint8_t> desc, uint64_t file_offset);
  Status parse_siginfo(std::span<const uint8_t> desc, uint64_t file_offset);
  Status parse_auxv(std::span<const uint8_t> desc, uint64_t file_offset);
  Status parse_nt_file(std::span<const uint8_t> desc, uint64_t file_offset);
  Status build_nt_file_mappings();
  void build_link_map_mappings();
  // Why `candidate` cannot be the file the core mapped (its build-id differs from the one the
  // core holds, or it does not fit the loader's record of it); nothing when it fits.
  using Fits = std::function<std::optional<std::string>(const std::string& path,
                                                        const elf::ElfFile& candidate)>;
  std::optional<uint32_t> add_file(const std::string& recorded, bool is_exe, const Fits& fits);
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

Status CoreFile::State::parse_segments() {
  const uint64_t size = bytes().size();
  uint64_t truncated = 0;
  for (const elf::Segment& seg : elf->segments()) {
    if (seg.type != PT_LOAD || seg.memsz == 0) continue;
    LoadSegment s{seg.vaddr, seg.memsz, seg.filesz, seg.offset, 0};
    if (seg.filesz != 0) {
      if (seg.offset >= size) {
        s.present = 0;
      } else {
        s.present = std::min(seg.filesz, size - seg.offset);
      }
      if (s.present < seg.filesz && ++truncated == 1) {
        diagnostics.push_back(fmt::format(
            "{}: core file truncated: PT_LOAD {:#x}..{:#x} should hold {:#x} bytes at offset "
            "{:#x} but the file has {} bytes; the missing part is unreadable",
            path, seg.vaddr, seg.vaddr + seg.memsz, seg.filesz, seg.offset, size));
      }
    }
    segments.push_back(s);
  }
  if (truncated > 1) {
    diagnostics.push_back(
        fmt::format("{}: core file truncated: {} more PT_LOAD segments lack "
                    "some or all of their bytes",
                    path, truncated - 1));
  }
  std::sort(segments.begin(), segments.end(),
            [](const LoadSegment& a, const LoadSegment& b) { return a.vaddr < b.vaddr; });
  for (size_t i = 1; i < segments.size(); ++i) {
    const LoadSegment& prev = segments[i - 1];
    if (segments[i].vaddr < prev.vaddr + prev.memsz) {
      return make_error(
          "{}: inconsistent core: PT_LOAD {:#x}..{:#x} overlaps PT_LOAD {:#x}..{:#x} (the rule: "
          "load segments of a core must not overlap)",
          path, segments[i].vaddr, segments[i].vaddr + segments[i].memsz, prev.vaddr,
          prev.vaddr + prev.memsz);
    }
  }
  return Ok{};
}

Status CoreFile::State::parse_notes() {
  uint32_t note_count = 0;
  const uint64_t size = bytes().size();
  for (const elf::Segment& seg : elf->segments()) {
    if (seg.type != PT_NOTE) continue;
    if (!in_bounds(seg.offset, seg.filesz, size)) {
      return make_error(
          "{}: truncated core: PT_NOTE at offset {:#x} with {:#x} bytes is outside the file ({} "
          "bytes)",
          path, seg.offset, seg.filesz, size);
    }
    std::span<const uint8_t> data = bytes().subspan(seg.offset, seg.filesz);
    // Core notes are padded to 4 bytes whatever p_align says (the kernel writes 4, gdb writes 1,
    // qemu writes 0 with the same 4-byte padding inside).
    uint64_t pos = 0;
    while (pos < data.size()) {
      if (++note_count > Limits::kMaxNotes) {
        return make_error("{}: more than {} notes (cap)", path, Limits::kMaxNotes);
      }
      Elf64_Nhdr nh;
      const uint64_t at = seg.offset + pos;
      if (!read_struct(data, pos, &nh)) {
        return make_error("{}: truncated note header at offset {:#x} (PT_NOTE ends at {:#x})", path,
                          at, seg.offset + seg.filesz);
      }
      const uint64_t name_at = pos + sizeof(nh);
      const uint64_t desc_at = name_at + align_up4(nh.n_namesz);
      const uint64_t next = desc_at + align_up4(nh.n_descsz);
      if (nh.n_descsz > Limits::kMaxNoteDesc) {
        return make_error(
            "{}: note at offset {:#x} (type {:#x}): n_descsz {} exceeds the cap of {}", path, at,
            nh.n_type, nh.n_descsz, Limits::kMaxNoteDesc);
      }
      if (!in_bounds(name_at, nh.n_namesz, data.size()) ||
          !in_bounds(desc_at, nh.n_descsz, data.size())) {
        return make_error(
            "{}: note at offset {:#x} (type {:#x}, n_namesz {}, n_descsz {}) runs past the end of "
            "its PT_NOTE (offset {:#x}, {:#x} bytes)",
            path, at, nh.n_type, nh.n_namesz, nh.n_descsz, seg.offset, seg.filesz);
      }
      std::string_view name(reinterpret_cast<const char*>(data.data() + name_at), nh.n_namesz);
      while (!name.empty() && name.back() == '\0') name.remove_suffix(1);
      LJ_TRY(parse_note(nh.n_type, name, data.subspan(desc_at, nh.n_descsz), seg.offset + desc_at));
      pos = next;
    }
  }
  if (threads.empty()) return make_error("{}: core has no NT_PRSTATUS note (no threads)", path);
  return Ok{};
}

Status CoreFile::State::parse_note(uint32_t type, std::string_view name,
                                   std::span<const uint8_t> desc, uint64_t file_offset) {
  if (name != "CORE") return Ok{};  // LINUX (xstate, arm64 regsets), GDB (tdesc): not needed
  switch (type) {
    case NT_PRSTATUS:
      return parse_prstatus(desc, file_offset);
    case NT_PRPSINFO:
      return parse_prpsinfo(desc, file_offset);
    case NT_SIGINFO:
      return parse_siginfo(desc, file_offset);
    case NT_AUXV:
      return parse_auxv(desc, file_offset);
    case NT_FILE:
      return parse_nt_file(desc, file_offset);
    default:
      return Ok{};
  }
}

Status CoreFile::State::parse_prstatus(std::span<const uint8_t> desc, uint64_t file_offset) {
  const uint64_t expected = prstatus_size(arch);
  if (desc.size() != expected) {
    return make_error(
        "{}: NT_PRSTATUS at offset {:#x}: {} bytes, expected {} for an {} struct elf_prstatus",
        path, file_offset, desc.size(), expected, elf::arch_name(arch));
  }
  if (threads.size() >= Limits::kMaxThreads) {
    return make_error("{}: more than {} NT_PRSTATUS notes (cap)", path, Limits::kMaxThreads);
  }
  Thread t;
  t.arch = arch;
  int16_t cursig = 0;
  int32_t pid = 0;
  read_struct(desc, kPrstatusCursig, &cursig);
  read_struct(desc, kPrstatusPid, &pid);
  t.signal = cursig;
  t.tid = static_cast<uint32_t>(pid);
  t.gpr_count = gpr_count(arch);
  for (uint32_t i = 0; i < t.gpr_count; ++i) read_struct(desc, kPrstatusReg + 8 * i, &t.gprs[i]);
  if (arch == elf::Arch::X86_64) {
    t.pc = t.gprs[kX86Rip];
    t.sp = t.gprs[kX86Rsp];
    t.fp = t.gprs[kX86Rbp];
  } else {
    t.pc = t.gprs[kA64Pc];
    t.sp = t.gprs[kA64Sp];
    t.fp = t.gprs[kA64Fp];
    t.lr = t.gprs[kA64Lr];
  }
  threads.push_back(t);
  return Ok{};
}

Status CoreFile::State::parse_prpsinfo(std::span<const uint8_t> desc, uint64_t file_offset) {
  if (desc.size() != kPrpsinfoSize) {
    return make_error("{}: NT_PRPSINFO at offset {:#x}: {} bytes, expected {}", path, file_offset,
                      desc.size(), kPrpsinfoSize);
  }
  if (process) {
    return make_error("{}: second NT_PRPSINFO at offset {:#x} (a core has one)", path, file_offset);
  }
  ProcessInfo p;
  p.state = static_cast<char>(desc[1]);
  read_struct(desc, 16, &p.uid);
  read_struct(desc, 20, &p.gid);
  read_struct(desc, 24, &p.pid);
  read_struct(desc, 28, &p.ppid);
  p.fname = fixed_string(desc.data() + 40, 16);
  p.psargs = fixed_string(desc.data() + 56, 80);
  process = std::move(p);
  return Ok{};
}

Status CoreFile::State::parse_siginfo(std::span<const uint8_t> desc, uint64_t file_offset) {
  if (desc.size() != kSiginfoSize) {
    return make_error("{}: NT_SIGINFO at offset {:#x}: {} bytes, expected {}", path, file_offset,
                      desc.size(), kSiginfoSize);
  }
  if (signal) return Ok{};  // the first one belongs to the thread that took the signal
  SignalInfo s;
  read_struct(desc, 0, &s.signo);
  read_struct(desc, 4, &s.errno_value);
  read_struct(desc, 8, &s.code);
  if (is_fault_signal(s.signo) && s.code > 0) {
    read_struct(desc, 16, &s.fault_addr);
  } else if (s.code <= 0) {  // SI_USER, SI_TKILL, SI_QUEUE...: sent by a process
    read_struct(desc, 16, &s.sender_pid);
  }
  signal = s;
  return Ok{};
}

Status CoreFile::State::parse_auxv(std::span<const uint8_t> desc, uint64_t file_offset) {
  if (have_auxv) {
    return make_error("{}: second NT_AUXV at offset {:#x} (a core has one)", path, file_offset);
  }
  have_auxv = true;
  if (desc.size() % 16 != 0) {
    return make_error("{}: NT_AUXV at offset {:#x}: {} bytes is not a multiple of 16", path,
                      file_offset, desc.size());
  }
  const uint64_t count = desc.size() / 16;
  if (count > Limits::kMaxAuxv) {
    return make_error("{}: NT_AUXV at offset {:#x}: {} entries exceeds the cap of {}", path,
                      file_offset, count, Limits::kMaxAuxv);
  }
  for (uint64_t i = 0; i < count; ++i) {
    AuxEntry e;
    read_struct(desc, i * 16, &e.type);
    read_struct(desc, i * 16 + 8, &e.value);
    if (e.type == AT_NULL) break;
    auxv.push_back(e);
  }
  return Ok{};
}

Status CoreFile::State::parse_nt_file(std::span<const uint8_t> desc, uint64_t file_offset) {
  if (have_nt_file) {
    return make_error("{}: second NT_FILE at offset {:#x} (a core has one)", path, file_offset);
  }
  have_nt_file = true;
  uint64_t count = 0, page_size = 0;
  if (!read_struct(desc, 0, &count) || !read_struct(desc, 8, &page_size)) {
    return make_error("{}: NT_FILE at offset {:#x}: {} bytes is too small for its header", path,
                      file_offset, desc.size());
  }
  if (count > Limits::kMaxMappings) {
    return make_error("{}: NT_FILE at offset {:#x}: {} mappings exceeds the cap of {}", path,
                      file_offset, count, Limits::kMaxMappings);
  }
  // The kernel records offsets in pages of PAGE_SIZE; gdb writes a page size of 1 and byte offsets.
  if (page_size == 0 || (page_size & (page_size - 1)) != 0 || page_size > (1u << 21)) {
    return make_error("{}: NT_FILE at offset {:#x}: page size {} is not a power of two up to 2 MiB",
                      path, file_offset, page_size);
  }
  const uint64_t table_end = 16 + count * 24;  // count is capped: no overflow
  if (table_end > desc.size()) {
    return make_error(
        "{}: NT_FILE at offset {:#x}: {} mappings need {} bytes but the note has {} (truncated)",
        path, file_offset, count, table_end, desc.size());
  }
  mappings.reserve(count);
  nt_file_paths.reserve(count);
  uint64_t name_pos = table_end;
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t start = 0, end = 0, pgoff = 0;
    read_struct(desc, 16 + i * 24, &start);
    read_struct(desc, 24 + i * 24, &end);
    read_struct(desc, 32 + i * 24, &pgoff);
    if (start >= end) {
      return make_error("{}: NT_FILE at offset {:#x}: mapping {} has start {:#x} >= end {:#x}",
                        path, file_offset, i, start, end);
    }
    if (i > 0 && start < mappings.back().end) {
      return make_error(
          "{}: NT_FILE at offset {:#x}: mapping {} ({:#x}..{:#x}) overlaps or precedes mapping {} "
          "({:#x}..{:#x}); the rule: mappings are sorted and disjoint",
          path, file_offset, i, start, end, i - 1, mappings.back().start, mappings.back().end);
    }
    uint64_t byte_offset;
    if (__builtin_mul_overflow(pgoff, page_size, &byte_offset)) {
      return make_error("{}: NT_FILE at offset {:#x}: mapping {} file offset {:#x} pages overflows",
                        path, file_offset, i, pgoff);
    }
    if (name_pos >= desc.size()) {
      return make_error(
          "{}: NT_FILE at offset {:#x}: the name of mapping {} is missing (truncated)", path,
          file_offset, i);
    }
    const size_t window = std::min<uint64_t>(desc.size() - name_pos, Limits::kMaxPath + 1);
    const void* nul = std::memchr(desc.data() + name_pos, 0, window);
    if (nul == nullptr) {
      return make_error(
          "{}: NT_FILE at offset {:#x}: the name of mapping {} (at note offset {:#x}) is not "
          "NUL-terminated within {} bytes",
          path, file_offset, i, name_pos, window);
    }
    const size_t len = static_cast<const uint8_t*>(nul) - (desc.data() + name_pos);
    nt_file_paths.emplace_back(reinterpret_cast<const char*>(desc.data() + name_pos), len);
    name_pos += len + 1;
    mappings.push_back(Mapping{start, end, byte_offset, 0});
  }
  return Ok{};
}

std::optional<uint64_t> CoreFile::State::aux(uint64_t type) const {
  for (const AuxEntry& e : auxv) {
    if (e.type == type) return e.value;
  }
  return std::nullopt;
}

// The paths a recorded file may be at, in the order a loader with these roots would look:
// the executable override alone; else each sysroot + the recorded path, then the path itself.
std::vector<std::string> CoreFile::State::candidate_paths(const std::string& recorded,
                                                          bool is_exe) const {
  if (is_exe && !options.exe.empty()) return {options.exe};
  std::vector<std::string> out;
  for (const std::string& root : options.sysroots) {
    if (!root.empty()) out.push_back(root + recorded);
  }
  if (std::find(out.begin(), out.end(), recorded) == out.end()) out.push_back(recorded);
  return out;
}

// The reason `candidate` is not the file whose first page the core holds at `header_addr`:
// the core holds that page's build-id note and the candidate's differs. Nothing when they are
// equal or the core does not hold the note (qemu-user cores dump no file-backed text).
std::optional<std::string> CoreFile::State::build_id_differs(uint64_t header_addr,
                                                             const std::string& path,
                                                             const elf::ElfFile& candidate) const {
  auto in_core = build_id_in_core(header_addr);
  if (!in_core.ok() || !in_core->has_value() || candidate.build_id() == **in_core) {
    return std::nullopt;
  }
  return fmt::format("{} has build-id {}, the core's mapping at {:#x} has {}", path,
                     candidate.build_id().value_or("(none)"), header_addr, **in_core);
}

// Adds a MappedFile for `recorded` and opens the first candidate path (candidate_paths) that is
// an ELF file of the core's architecture that `fits` the core's mapping. Returns its index, or
// nothing when the cap on files is reached. A file no candidate gives is refused, and the
// diagnostic names every path tried and why each was not used.
std::optional<uint32_t> CoreFile::State::add_file(const std::string& recorded, bool is_exe,
                                                  const Fits& fits) {
  if (files.size() >= Limits::kMaxMappedFiles) {
    diagnostics.push_back(fmt::format("{}: more than {} mapped files (cap); {} is ignored", path,
                                      Limits::kMaxMappedFiles, recorded));
    return std::nullopt;
  }
  MappedFile f;
  f.path = recorded;
  f.is_executable = is_exe;
  f.tried = candidate_paths(recorded, is_exe);
  f.resolved = f.tried.front();
  if (options.open_mapped_files) {
    std::vector<std::string> refused;
    bool mismatch = false;
    for (const std::string& candidate : f.tried) {
      auto opened = elf::ElfFile::open(candidate);
      if (!opened.ok()) {
        refused.push_back(opened.message());
        continue;
      }
      if ((*opened)->arch() != arch) {
        refused.push_back(fmt::format("{} is {} but the core is {}", candidate,
                                      elf::arch_name((*opened)->arch()), elf::arch_name(arch)));
        continue;
      }
      if (auto why = fits ? fits(candidate, **opened) : std::nullopt) {
        mismatch = true;
        refused.push_back(*why);
        continue;
      }
      f.resolved = candidate;
      f.elf = std::move(opened).value();
      f.check = FileCheck::Unverified;
      break;
    }
    if (f.elf == nullptr) {
      f.check = mismatch ? FileCheck::Mismatch : FileCheck::OpenFailed;
      f.error = fmt::format(
          "{} ({})",
          mismatch ? "build-id mismatch: no candidate is the file the core mapped" : "not found",
          fmt::join(refused, "; "));
      diagnostics.push_back(fmt::format("{}: mapped file {} refused: {}", path, recorded, f.error));
    }
  }
  files.push_back(std::move(f));
  if (is_exe) exe_index = static_cast<int>(files.size() - 1);
  return static_cast<uint32_t>(files.size() - 1);
}

Status CoreFile::State::build_nt_file_mappings() {
  source = MappingSource::NtFile;
  // The executable is the file mapped at AT_ENTRY (else AT_PHDR).
  std::optional<std::string> exe_path;
  for (uint64_t at : {uint64_t{AT_ENTRY}, uint64_t{AT_PHDR}}) {
    auto v = aux(at);
    if (!v) continue;
    for (size_t i = 0; i < mappings.size(); ++i) {
      if (*v >= mappings[i].start && *v < mappings[i].end) {
        exe_path = nt_file_paths[i];
        break;
      }
    }
    if (exe_path) break;
  }
  if (!exe_path && !options.exe.empty()) {
    return make_error(
        "{}: cannot apply the executable override {}: no NT_FILE mapping holds AT_ENTRY/AT_PHDR "
        "of NT_AUXV",
        path, options.exe);
  }
  // Where each file's first page (file offset 0) is mapped: its build-id note is there.
  std::map<std::string, uint64_t> header_of;
  for (size_t i = 0; i < mappings.size(); ++i) {
    if (mappings[i].file_offset == 0) header_of.emplace(nt_file_paths[i], mappings[i].start);
  }
  std::map<std::string, uint32_t> by_path;
  std::vector<Mapping> kept;
  kept.reserve(mappings.size());
  for (size_t i = 0; i < mappings.size(); ++i) {
    const std::string& p = nt_file_paths[i];
    auto it = by_path.find(p);
    if (it == by_path.end()) {
      auto header = header_of.find(p);
      Fits fits;
      if (header != header_of.end()) {
        fits = [this, addr = header->second](const std::string& candidate, const elf::ElfFile& e) {
          return build_id_differs(addr, candidate, e);
        };
      }
      auto index = add_file(p, exe_path && p == *exe_path, fits);
      if (!index) continue;
      it = by_path.emplace(p, *index).first;
    }
    Mapping m = mappings[i];
    m.file_index = it->second;
    kept.push_back(m);
  }
  mappings = std::move(kept);
  nt_file_paths.clear();
  return Ok{};
}

// Mappings of an ELF file loaded at `bias` (link_map mode): each PT_LOAD's file part, starting at
// its page (the loader maps whole pages from the page-aligned file offset).
void CoreFile::State::add_elf_mappings(uint32_t file_index, uint64_t bias) {
  const MappedFile& f = files[file_index];
  const uint64_t page = aux(AT_PAGESZ).value_or(4096);
  if (page == 0 || (page & (page - 1)) != 0) {
    diagnostics.push_back(fmt::format("{}: AT_PAGESZ {} is not a power of two", path, page));
    return;
  }
  for (const elf::Segment& seg : f.elf->segments()) {
    if (seg.type != PT_LOAD || seg.filesz == 0) continue;
    if ((seg.vaddr - seg.offset) % page != 0) {
      diagnostics.push_back(fmt::format(
          "{}: {}: PT_LOAD vaddr {:#x} and offset {:#x} disagree modulo the page size {}; not "
          "mapped",
          path, f.resolved, seg.vaddr, seg.offset, page));
      continue;
    }
    const uint64_t page_vaddr = seg.vaddr & ~(page - 1);
    uint64_t start, end;
    if (add_overflows(bias, page_vaddr, &start) ||
        add_overflows(bias, seg.vaddr + seg.filesz, &end)) {
      diagnostics.push_back(
          fmt::format("{}: {} at bias {:#x}: segment address overflows", path, f.resolved, bias));
      continue;
    }
    // Insert in order and refuse overlaps at once: reads made while the link_map is still being
    // walked already look mappings up by binary search.
    const Mapping m{start, end, seg.offset & ~(page - 1), file_index};
    auto at = std::upper_bound(mappings.begin(), mappings.end(), m.start,
                               [](uint64_t a, const Mapping& x) { return a < x.start; });
    const Mapping* before = at == mappings.begin() ? nullptr : &*(at - 1);
    const Mapping* after = at == mappings.end() ? nullptr : &*at;
    const Mapping* clash = before != nullptr && before->end > m.start ? before
                           : after != nullptr && after->start < m.end ? after
                                                                      : nullptr;
    if (clash != nullptr) {
      diagnostics.push_back(fmt::format(
          "{}: mapping {:#x}..{:#x} of {} overlaps {:#x}..{:#x} of {}; dropped", path, m.start,
          m.end, f.path, clash->start, clash->end, files[clash->file_index].path));
      continue;
    }
    mappings.insert(at, m);
  }
}

void CoreFile::State::build_link_map_mappings() {
  // qemu-user cores have no NT_FILE. Rebuild the mappings the way a debugger does: the
  // executable from the aux vector, the shared objects from the dynamic linker's list
  // (<link.h>: DT_DEBUG -> struct r_debug -> r_map -> struct link_map l_addr/l_name/l_next).
  std::string exe_path = options.exe;
  std::string recorded = options.exe;
  if (exe_path.empty()) {
    auto execfn = aux(AT_EXECFN);
    if (!execfn) {
      diagnostics.push_back(fmt::format(
          "{}: no NT_FILE, no executable override and no AT_EXECFN: only the core's own bytes are "
          "readable",
          path));
      return;
    }
    auto name = read_c_string(*execfn, Limits::kMaxPath);
    if (!name.ok()) {
      diagnostics.push_back(fmt::format("{}: AT_EXECFN string: {}", path, name.message()));
      return;
    }
    recorded = *name;
  }
  auto phdr = aux(AT_PHDR);
  auto entry = aux(AT_ENTRY);
  if (!phdr || !entry) {
    diagnostics.push_back(fmt::format(
        "{}: no NT_FILE and no AT_PHDR/AT_ENTRY: the executable cannot be placed", path));
    return;
  }
  auto exe_index_opt = add_file(recorded, true, nullptr);
  if (!exe_index_opt) return;
  const uint32_t exe = *exe_index_opt;
  source = MappingSource::LinkMap;
  MappedFile& exe_file = files[exe];
  if (!exe_file.usable()) return;
  const elf::ElfFile& exe_elf = *exe_file.elf;
  // Where the program headers are in the file's address space: PT_PHDR, else the PT_LOAD
  // that holds e_phoff.
  Elf64_Ehdr eh;
  read_struct(exe_elf.bytes(), 0, &eh);  // validated by ElfFile::open
  std::optional<uint64_t> phdr_vaddr;
  for (const elf::Segment& seg : exe_elf.segments()) {
    if (seg.type == PT_PHDR) phdr_vaddr = seg.vaddr;
  }
  for (const elf::Segment& seg : exe_elf.segments()) {
    if (phdr_vaddr) break;
    if (seg.type == PT_LOAD && eh.e_phoff >= seg.offset && eh.e_phoff - seg.offset < seg.filesz) {
      phdr_vaddr = seg.vaddr + (eh.e_phoff - seg.offset);
    }
  }
  if (!phdr_vaddr) {
    exe_file.elf.reset();
    exe_file.check = FileCheck::OpenFailed;
    exe_file.error = fmt::format("{}: no PT_PHDR and no PT_LOAD holds e_phoff {:#x}",
                                 exe_file.resolved, eh.e_phoff);
    diagnostics.push_back(fmt::format("{}: executable refused: {}", path, exe_file.error));
    return;
  }
  const uint64_t bias = *phdr - *phdr_vaddr;
  if (bias + exe_elf.entry() != *entry || (exe_elf.type() == ET_EXEC && bias != 0)) {
    exe_file.check = FileCheck::Mismatch;
    exe_file.error = fmt::format(
        "{} does not match the core: AT_PHDR {:#x} gives load bias {:#x}, so e_entry {:#x} would "
        "be at {:#x}, but AT_ENTRY is {:#x}",
        exe_file.resolved, *phdr, bias, exe_elf.entry(), bias + exe_elf.entry(), *entry);
    exe_file.elf.reset();
    diagnostics.push_back(fmt::format("{}: executable refused: {}", path, exe_file.error));
    return;
  }
  add_elf_mappings(exe, bias);

  // DT_DEBUG of the executable's dynamic section in memory holds &_r_debug.
  std::optional<uint64_t> r_debug;
  for (const elf::Segment& seg : exe_elf.segments()) {
    if (seg.type != PT_DYNAMIC) continue;
    const uint64_t count = std::min<uint64_t>(seg.memsz / sizeof(Elf64_Dyn), 4096);
    for (uint64_t i = 0; i < count; ++i) {
      Elf64_Dyn d;
      if (!read(bias + seg.vaddr + i * sizeof(Elf64_Dyn), &d, sizeof(d)).ok()) break;
      if (d.d_tag == DT_NULL) break;
      if (d.d_tag == DT_DEBUG) r_debug = d.d_un.d_ptr;
    }
  }
  if (!r_debug || *r_debug == 0) {
    diagnostics.push_back(
        fmt::format("{}: the executable's DT_DEBUG is {} in the core: no shared objects are mapped",
                    path, r_debug ? "0" : "missing"));
    return;
  }
  // struct r_debug { int r_version; struct link_map* r_map; ... }: r_map at 8 on LP64.
  auto lm = read_u64(*r_debug + 8);
  uint64_t node = lm.ok() ? *lm : 0;
  if (!lm.ok()) diagnostics.push_back(fmt::format("{}: r_debug.r_map: {}", path, lm.message()));
  uint32_t steps = 0;
  for (; node != 0 && steps < Limits::kMaxLinkMapEntries; ++steps) {
    // struct link_map { ElfW(Addr) l_addr; char* l_name; ElfW(Dyn)* l_ld; link_map* l_next, ... }
    uint64_t fields[4];
    auto got = read(node, fields, sizeof(fields));
    if (!got.ok()) {
      diagnostics.push_back(
          fmt::format("{}: link_map entry at {:#x}: {}", path, node, got.message()));
      break;
    }
    const uint64_t l_addr = fields[0], l_name = fields[1], l_next = fields[3];
    node = l_next;
    auto name = read_c_string(l_name, Limits::kMaxPath);
    if (!name.ok()) {
      diagnostics.push_back(fmt::format("{}: link_map l_name: {}", path, name.message()));
      continue;
    }
    if (name->empty()) continue;  // the executable itself
    // The file the loader mapped: its first page (l_addr + the vaddr of its offset-0 PT_LOAD)
    // holds its build-id when the core has that page, and its PT_DYNAMIC is where the loader
    // recorded l_ld. qemu-user cores dump no file-backed text, so l_ld is what tells two builds
    // of one library apart there (Debian's libc6:arm64 and libc6-arm64-cross differ in it).
    auto fits = [this, l_addr, l_ld = fields[2]](
                    const std::string& candidate,
                    const elf::ElfFile& e) -> std::optional<std::string> {
      std::optional<uint64_t> dynamic;
      for (const elf::Segment& seg : e.segments()) {
        if (seg.type == PT_LOAD && seg.offset == 0) {
          if (auto why = build_id_differs(l_addr + seg.vaddr, candidate, e)) return why;
        }
        if (seg.type == PT_DYNAMIC) dynamic = seg.vaddr;
      }
      if (l_ld != 0 && (!dynamic || l_addr + *dynamic != l_ld)) {
        return fmt::format(
            "{} is not the file the loader mapped: its PT_DYNAMIC would be at {}, the "
            "link_map's l_ld is {:#x}",
            candidate, dynamic ? fmt::format("{:#x}", l_addr + *dynamic) : "(none)", l_ld);
      }
      return std::nullopt;
    };
    auto index = add_file(*name, false, fits);
    if (!index || !files[*index].usable()) continue;
    add_elf_mappings(*index, l_addr);
  }
  if (node != 0) {
    diagnostics.push_back(
        fmt::format("{}: link_map list longer than {} entries (cap); rest ignored", path,
                    Limits::kMaxLinkMapEntries));
  }
}

// The build-id note of the ELF file whose first page (file offset 0) the core holds at
// `header_addr`, found through the in-memory ELF header and program headers only (never the
// file on disk, which is what is being checked). Nothing when the core lacks those bytes or the
// note; an error when the bytes are there but are not a well-formed ELF header.
Result<std::optional<std::string>> CoreFile::State::build_id_in_core(uint64_t header_addr) const {
  Elf64_Ehdr eh;
  if (!core_read(header_addr, &eh, sizeof(eh))) return std::optional<std::string>{};
  if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) {
    return make_error(
        "the core's bytes at {:#x} (file offset 0 of the mapping) are not an ELF "
        "header",
        header_addr);
  }
  if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_phentsize != sizeof(Elf64_Phdr) ||
      eh.e_phnum > elf::Limits::kMaxSegments) {
    return make_error(
        "the core's ELF header at {:#x} is malformed (class {}, e_phentsize {}, e_phnum {})",
        header_addr, eh.e_ident[EI_CLASS], eh.e_phentsize, eh.e_phnum);
  }
  std::vector<Elf64_Phdr> phdrs(eh.e_phnum);
  for (uint32_t i = 0; i < eh.e_phnum; ++i) {
    uint64_t at;
    if (add_overflows(header_addr, eh.e_phoff + uint64_t{i} * sizeof(Elf64_Phdr), &at) ||
        !core_read(at, &phdrs[i], sizeof(Elf64_Phdr))) {
      return std::optional<std::string>{};
    }
  }
  const Elf64_Phdr* first_load = nullptr;
  for (const Elf64_Phdr& ph : phdrs) {
    if (ph.p_type == PT_LOAD && (first_load == nullptr || ph.p_offset < first_load->p_offset)) {
      first_load = &ph;
    }
  }
  if (first_load == nullptr) {
    return make_error("the core's ELF header at {:#x} has no PT_LOAD", header_addr);
  }
  // Memory address of file offset X of the first segment is header_addr + X.
  const uint64_t bias = header_addr + first_load->p_offset - first_load->p_vaddr;
  for (const Elf64_Phdr& ph : phdrs) {
    if (ph.p_type != PT_NOTE) continue;
    if (ph.p_filesz > Limits::kMaxHeaderNoteBytes) {
      return make_error("the core's ELF header at {:#x}: PT_NOTE of {} bytes exceeds the cap of {}",
                        header_addr, ph.p_filesz, Limits::kMaxHeaderNoteBytes);
    }
    std::vector<uint8_t> notes(ph.p_filesz);
    if (!core_read(bias + ph.p_vaddr, notes.data(), notes.size())) continue;
    const uint64_t align = ph.p_align == 8 ? 8 : 4;
    uint64_t pos = 0;
    for (int guard = 0; pos < notes.size() && guard < 1024; ++guard) {
      Elf64_Nhdr nh;
      if (!read_struct(std::span<const uint8_t>(notes), pos, &nh)) break;
      const uint64_t name_at = pos + sizeof(nh);
      const uint64_t desc_at = (name_at + nh.n_namesz + align - 1) & ~(align - 1);
      const uint64_t next = (desc_at + nh.n_descsz + align - 1) & ~(align - 1);
      if (!in_bounds(name_at, nh.n_namesz, notes.size()) ||
          !in_bounds(desc_at, nh.n_descsz, notes.size())) {
        return make_error("the core's copy of the note at {:#x} runs past its PT_NOTE",
                          bias + ph.p_vaddr + pos);
      }
      if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 &&
          std::memcmp(notes.data() + name_at, "GNU", 4) == 0) {
        if (nh.n_descsz == 0 || nh.n_descsz > 64) {
          return make_error("the core's build-id note at {:#x} has {} bytes (expected 1..64)",
                            bias + ph.p_vaddr + pos, nh.n_descsz);
        }
        return std::optional<std::string>(
            hex_of(std::span<const uint8_t>(notes).subspan(desc_at, nh.n_descsz)));
      }
      pos = next;
    }
  }
  return std::optional<std::string>{};
}

void CoreFile::State::check_build_ids() {
  for (uint32_t index = 0; index < files.size(); ++index) {
    MappedFile& f = files[index];
    if (!f.usable()) continue;
    const Mapping* first = nullptr;
    for (const Mapping& m : mappings) {
      if (m.file_index == index && m.file_offset == 0) {
        first = &m;
        break;
      }
    }
    if (first == nullptr) continue;  // stays Unverified
    auto in_core = build_id_in_core(first->start);
    if (!in_core.ok()) {
      f.check = FileCheck::Mismatch;
      f.error = fmt::format("{}: {}", f.resolved, in_core.message());
    } else if (!in_core->has_value()) {
      continue;  // stays Unverified
    } else {
      f.core_build_id = **in_core;
      const auto& file_id = f.elf->build_id();
      if (!file_id) {
        f.check = FileCheck::Mismatch;
        f.error = fmt::format("{} has no build-id, but the core's mapping at {:#x} has {}",
                              f.resolved, first->start, *f.core_build_id);
      } else if (*file_id != *f.core_build_id) {
        f.check = FileCheck::Mismatch;
        f.error = fmt::format("build-id mismatch: the core's mapping at {:#x} has {}, {} has {}",
                              first->start, *f.core_build_id, f.resolved, *file_id);
      } else {
        f.check = FileCheck::Verified;
        continue;
      }
    }
    f.elf.reset();
    diagnostics.push_back(fmt::format("{}: mapped file {} refused: {}", path, f.path, f.error));
  }
}

const LoadSegment* CoreFile::State::segment_at(uint64_t addr) const {
  auto it = std::upper_bound(segments.begin(), segments.end(), addr,
                             [](uint64_t a, const LoadSegment& s) { return a < s.vaddr; });
  if (it == segments.begin()) return nullptr;
  --it;
  return addr - it->vaddr < it->memsz ? &*it : nullptr;
}

const LoadSegment* CoreFile::State::segment_after(uint64_t addr) const {
  auto it = std::upper_bound(segments.begin(), segments.end(), addr,
                             [](uint64_t a, const LoadSegment& s) { return a < s.vaddr; });
  return it == segments.end() ? nullptr : &*it;
}

const Mapping* CoreFile::State::mapping_at(uint64_t addr) const {
  auto it = std::upper_bound(mappings.begin(), mappings.end(), addr,
                             [](uint64_t a, const Mapping& m) { return a < m.start; });
  if (it == mappings.begin()) return nullptr;
  --it;
  return addr < it->end ? &*it : nullptr;
}

// Only the core's own bytes, all or nothing.
bool CoreFile::State::core_read(uint64_t addr, void* dst, size_t len) const {
  uint8_t* out = static_cast<uint8_t*>(dst);
  size_t done = 0;
  while (done < len) {
    const uint64_t a = addr + done;
    if (a < addr) return false;  // wrapped
    const LoadSegment* seg = segment_at(a);
    if (seg == nullptr) return false;
    const uint64_t rel = a - seg->vaddr;
    if (rel >= seg->present) return false;
    const size_t n = std::min<uint64_t>(len - done, seg->present - rel);
    std::memcpy(out + done, bytes().data() + seg->offset + rel, n);
    done += n;
  }
  return true;
}

Result<size_t> CoreFile::State::read_piece(uint64_t addr, uint8_t* dst, size_t want) const {
  const LoadSegment* seg = segment_at(addr);
  uint64_t limit = UINT64_MAX;  // where core bytes may start again
  if (seg != nullptr) {
    const uint64_t rel = addr - seg->vaddr;
    if (rel < seg->present) {
      const size_t n = std::min<uint64_t>(want, seg->present - rel);
      std::memcpy(dst, bytes().data() + seg->offset + rel, n);
      return n;
    }
    if (rel < seg->filesz) {
      return make_error(
          "{}: {:#x}: the core file is truncated: its PT_LOAD {:#x}..{:#x} should hold this byte "
          "at file offset {:#x}, past the end of the file ({} bytes)",
          path, addr, seg->vaddr, seg->vaddr + seg->memsz, seg->offset + rel, bytes().size());
    }
    limit = seg->vaddr + seg->memsz;
  } else if (const LoadSegment* next = segment_after(addr)) {
    limit = next->vaddr;
  }
  const Mapping* m = mapping_at(addr);
  if (m == nullptr) {
    return make_error("{}: {:#x}: not in the core ({}) and not in a file mapping", path, addr,
                      seg ? "its PT_LOAD holds no bytes here" : "no PT_LOAD");
  }
  const MappedFile& f = files[m->file_index];
  if (!f.usable()) {
    return make_error(
        "{}: {:#x}: the core holds no bytes here and the mapped file {} ({}..{}) is {}: {}", path,
        addr, f.path, fmt::format("{:#x}", m->start), fmt::format("{:#x}", m->end),
        file_check_name(f.check), f.error.empty() ? "mapped files not opened" : f.error);
  }
  const uint64_t off = m->file_offset + (addr - m->start);
  const uint64_t fsize = f.elf->bytes().size();
  if (off < m->file_offset || off >= fsize) {
    return make_error(
        "{}: {:#x}: maps file offset {:#x} of {}, past its end ({} bytes; the process would get "
        "SIGBUS)",
        path, addr, off, f.resolved, fsize);
  }
  const size_t n = std::min({uint64_t{want}, m->end - addr, fsize - off, limit - addr});
  std::memcpy(dst, f.elf->bytes().data() + off, n);
  return n;
}

Result<size_t> CoreFile::State::read(uint64_t addr, void* dst, size_t len) const {
  uint64_t end;
  if (len > Limits::kMaxRead || add_overflows(addr, len, &end)) {
    return make_error("{}: read of {} bytes at {:#x}: too long or wraps around", path, len, addr);
  }
  uint8_t* out = static_cast<uint8_t*>(dst);
  size_t done = 0;
  while (done < len) {  // every piece is at least one byte
    auto n = read_piece(addr + done, out + done, len - done);
    if (!n.ok()) return n.error();
    done += *n;
  }
  return len;
}

Result<uint64_t> CoreFile::State::read_u64(uint64_t addr) const {
  uint64_t v = 0;
  LJ_TRY(read(addr, &v, sizeof(v)));
  return v;
}

Result<std::string> CoreFile::State::read_c_string(uint64_t addr, size_t max_len) const {
  std::string s;
  char chunk[64];
  while (s.size() <= max_len) {
    // Read up to the end of the 64-byte block so a string ending just before an unreadable
    // page is still found.
    const size_t n = 64 - ((addr + s.size()) & 63);
    auto got = read(addr + s.size(), chunk, n);
    if (!got.ok()) return got.error();
    const void* nul = std::memchr(chunk, 0, n);
    if (nul != nullptr) {
      s.append(chunk, static_cast<const char*>(nul) - chunk);
      if (s.size() > max_len) break;
      return s;
    }
    s.append(chunk, n);
  }
  return make_error("{}: string at {:#x} is longer than {} bytes", path, addr, max_len);
}

CoreFile::CoreFile(std::unique_ptr<State> state) : state_(std::move(state)) {}
CoreFile::CoreFile(CoreFile&&) noexcept = default;
CoreFile& CoreFile::operator=(CoreFile&&) noexcept = default;
CoreFile::~CoreFile() = default;

Result<CoreFile> CoreFile::open(const std::string& path, const CoreOptions& options) {
  LJ_ASSIGN_OR_RETURN(auto elf, elf::ElfFile::open(path));
  return from_elf(std::move(elf), options);
}

Result<CoreFile> CoreFile::from_memory(std::span<const uint8_t> bytes, std::string name,
                                       const CoreOptions& options) {
  LJ_ASSIGN_OR_RETURN(auto elf, elf::ElfFile::from_memory(bytes, std::move(name)));
  return from_elf(std::move(elf), options);
}

Result<CoreFile> CoreFile::from_elf(std::unique_ptr<elf::ElfFile> elf, const CoreOptions& options) {
  auto st = std::make_unique<State>();
  st->path = elf->path();
  st->options = options;
  if (elf->type() != ET_CORE) {
    return make_error("{}: not a core file (e_type {}, expected ET_CORE {})", st->path, elf->type(),
                      ET_CORE);
  }
  st->arch = elf->arch();
  st->elf = std::move(elf);
  LJ_TRY(st->parse_segments());
  LJ_TRY(st->parse_notes());
  if (st->have_nt_file) {
    LJ_TRY(st->build_nt_file_mappings());
  } else {
    st->build_link_map_mappings();
  }
  if (st->options.open_mapped_files) st->check_build_ids();
  return CoreFile(std::move(st));
}

const std::string& CoreFile::path() const {
  return state_->path;
}
elf::Arch CoreFile::arch() const {
  return state_->arch;
}
std::span<const Thread> CoreFile::threads() const {
  return state_->threads;
}
const std::optional<ProcessInfo>& CoreFile::process() const {
  return state_->process;
}
const std::optional<SignalInfo>& CoreFile::signal() const {
  return state_->signal;
}
std::span<const AuxEntry> CoreFile::auxv() const {
  return state_->auxv;
}
std::optional<uint64_t> CoreFile::auxv_value(uint64_t type) const {
  return state_->aux(type);
}
MappingSource CoreFile::mapping_source() const {
  return state_->source;
}
std::span<const Mapping> CoreFile::mappings() const {
  return state_->mappings;
}
std::span<const MappedFile> CoreFile::files() const {
  return state_->files;
}
const Mapping* CoreFile::mapping_at(uint64_t addr) const {
  return state_->mapping_at(addr);
}
const MappedFile& CoreFile::file_of(const Mapping& mapping) const {
  return state_->files[mapping.file_index];
}
const MappedFile* CoreFile::executable() const {
  return state_->exe_index < 0 ? nullptr : &state_->files[state_->exe_index];
}
Result<FileAddress> CoreFile::file_address(uint64_t addr) const {
  const Mapping* m = state_->mapping_at(addr);
  if (m == nullptr) {
    return make_error("{}: {:#x} is in no file mapping", state_->path, addr);
  }
  const MappedFile& f = file_of(*m);
  if (!f.usable()) {
    return make_error("{}: {:#x} is in {}, which is {}: {}", state_->path, addr, f.path,
                      file_check_name(f.check), f.error);
  }
  const uint64_t off = m->file_offset + (addr - m->start);
  for (const elf::Segment& seg : f.elf->segments()) {
    if (seg.type == PT_LOAD && off >= seg.offset && off - seg.offset < seg.filesz) {
      return FileAddress{&f, off, seg.vaddr + (off - seg.offset)};
    }
  }
  return make_error("{}: {:#x} maps file offset {:#x} of {}, which no PT_LOAD of the file holds",
                    state_->path, addr, off, f.resolved);
}

Result<uint64_t> CoreFile::load_bias(uint32_t file_index) const {
  if (file_index >= state_->files.size()) {
    return make_error("{}: no mapped file {}", state_->path, file_index);
  }
  const MappedFile& f = state_->files[file_index];
  if (!f.usable()) {
    return make_error("{}: {} is {}: {}", state_->path, f.path, file_check_name(f.check), f.error);
  }
  for (const Mapping& m : state_->mappings) {
    if (m.file_index != file_index) continue;
    for (const elf::Segment& seg : f.elf->segments()) {
      if (seg.type != PT_LOAD || seg.offset < m.file_offset ||
          seg.offset - m.file_offset >= m.end - m.start) {
        continue;
      }
      // The byte at file offset p_offset is at m.start + (p_offset - file_offset) and links at
      // p_vaddr.
      return m.start + (seg.offset - m.file_offset) - seg.vaddr;
    }
  }
  return make_error("{}: no mapping of {} holds the start of one of its PT_LOAD segments",
                    state_->path, f.path);
}

std::span<const std::string> CoreFile::diagnostics() const {
  return state_->diagnostics;
}
Result<size_t> CoreFile::read(uint64_t addr, void* dst, size_t len) const {
  return state_->read(addr, dst, len);
}
Result<uint64_t> CoreFile::read_u64(uint64_t addr) const {
  return state_->read_u64(addr);
}
Result<uint32_t> CoreFile::read_u32(uint64_t addr) const {
  uint32_t v = 0;
  LJ_TRY(state_->read(addr, &v, sizeof(v)));
  return v;
}
Result<std::string> CoreFile::read_c_string(uint64_t addr, size_t max_len) const {
  return state_->read_c_string(addr, max_len);
}
bool CoreFile::core_has(uint64_t addr) const {
  uint8_t b;
  return state_->core_read(addr, &b, 1);
}

// The same contract as ljprof_core_read_mem, over the State (stable across moves of CoreFile).
int CoreFile::read_mem_of_state(void* ctx, uint64_t addr, void* dst, uint32_t len) {
  if (ctx == nullptr || dst == nullptr) return -14;  // -EFAULT
  if (static_cast<const CoreFile::State*>(ctx)->read(addr, dst, len).ok()) return 0;
  std::memset(dst, 0, len);
  return -14;  // -EFAULT, as bpf_probe_read_user
}

ljprof_mem_reader CoreFile::mem_reader() const {
  return ljprof_mem_reader{&read_mem_of_state, state_.get()};
}

}  // namespace ljprof::core

extern "C" int ljprof_core_read_mem(void* ctx, uint64_t addr, void* dst, uint32_t len) {
  const auto* core = static_cast<const ljprof::core::CoreFile*>(ctx);
  if (core == nullptr || dst == nullptr) return -14;  // -EFAULT
  if (core->read(addr, dst, len).ok()) return 0;
  std::memset(dst, 0, len);
  return -14;  // -EFAULT, as bpf_probe_read_user
}
