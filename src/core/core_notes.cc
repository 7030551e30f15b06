// CoreFile's notes: the threads' registers (NT_PRSTATUS), the process (NT_PRPSINFO), the signal
// (NT_SIGINFO), the aux vector (NT_AUXV) and the file mappings' table (NT_FILE).
//
// Why the notes are parsed by hand instead of with libelf/libdw: the descriptors of the core notes
// (elf_prstatus, elf_prpsinfo, the NT_FILE table) are Linux ABI structs that neither library
// decodes, libdw's core support (dwfl_core_file_report) trusts NT_FILE and reports no malformed
// counts, and we need every count, size and range of a possibly truncated core checked by rules
// of our own. Layouts come from the kernel's include/uapi/linux/elfcore.h (struct elf_prstatus,
// elf_prpsinfo), fs/binfmt_elf.c (fill_files_note: NT_FILE) and the regsets of
// arch/x86/include/asm/user_64.h (user_regs_struct) and arch/arm64/include/uapi/asm/ptrace.h
// (user_pt_regs). Every read goes through `read_struct` (common/bounds.h), which bounds-checks and
// memcpy's.
#include <elf.h>

#include <algorithm>
#include <cstring>

#include "common/bounds.h"
#include "core/core_file_internal.h"

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

constexpr const char* kX86Gprs[] = {"r15",     "r14",      "r13", "r12", "rbp",    "rbx", "r11",
                                    "r10",     "r9",       "r8",  "rax", "rcx",    "rdx", "rsi",
                                    "rdi",     "orig_rax", "rip", "cs",  "eflags", "rsp", "ss",
                                    "fs_base", "gs_base",  "ds",  "es",  "fs",     "gs"};
constexpr uint32_t kX86Rbp = 4, kX86Rip = 16, kX86Rsp = 19, kX86FsBase = 21;
constexpr const char* kA64Gprs[] = {"x0",  "x1",  "x2",  "x3",  "x4",  "x5",  "x6",    "x7",  "x8",
                                    "x9",  "x10", "x11", "x12", "x13", "x14", "x15",   "x16", "x17",
                                    "x18", "x19", "x20", "x21", "x22", "x23", "x24",   "x25", "x26",
                                    "x27", "x28", "x29", "x30", "sp",  "pc",  "pstate"};
constexpr uint32_t kA64Fp = 29, kA64Lr = 30, kA64Sp = 31, kA64Pc = 32;

// struct elf_prstatus: pr_reg follows elf_siginfo (12), pr_cursig (2 + 2 pad), pr_sigpend and
// pr_sighold (8 each), pr_pid/ppid/pgrp/sid (4 each) and four struct timeval (16 each).
constexpr uint64_t kPrstatusCursig = 12;
// include/uapi/linux/elf.h NT_ARM_TLS (owner "LINUX").
constexpr uint32_t kNtArmTls = 0x401;
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
  if (name == "LINUX" && type == kNtArmTls && arch == elf::Arch::AArch64) {
    return parse_arm_tls(desc, file_offset);
  }
  if (name != "CORE") return Ok{};  // other LINUX regsets (xstate, SVE), GDB (tdesc): not needed
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

// The kernel writes a thread's other regsets right after its NT_PRSTATUS (fs/binfmt_elf.c
// fill_thread_core_info), so NT_ARM_TLS belongs to the last thread read. Its regset
// (arch/arm64/kernel/ptrace.c tls_get) is TPIDR_EL0, then TPIDR2_EL0 on kernels with SME.
Status CoreFile::State::parse_arm_tls(std::span<const uint8_t> desc, uint64_t file_offset) {
  if (threads.empty()) {
    return make_error("{}: NT_ARM_TLS at offset {:#x} precedes every NT_PRSTATUS (whose thread?)",
                      path, file_offset);
  }
  Thread& t = threads.back();
  if (desc.size() < 8) {
    return make_error("{}: NT_ARM_TLS at offset {:#x}: {} bytes, less than TPIDR_EL0's 8", path,
                      file_offset, desc.size());
  }
  if (t.thread_pointer) {
    return make_error("{}: second NT_ARM_TLS at offset {:#x} for thread {}", path, file_offset,
                      t.tid);
  }
  uint64_t tpidr = 0;
  read_struct(desc, 0, &tpidr);
  t.thread_pointer = tpidr;
  return Ok{};
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
    t.thread_pointer = t.gprs[kX86FsBase];
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

}  // namespace ljprof::core
