// Signal trampolines (cfi.h signal_trampoline_overlays): the code a signal handler returns to,
// which calls rt_sigreturn with sp at the frame the kernel built when the signal arrived. Their
// CFI cannot be expressed as rows (glibc's __restore_rt: DWARF expressions over sp; the AArch64
// vDSO's: only the frame record, not the interrupted pc), so a signal-frame FDE (augmentation
// 'S') is trusted only together with the exact instructions that make the system call: they are
// what proves where the kernel's frame is.
#include <algorithm>
#include <array>
#include <cstring>

#include <fmt/format.h>

#include "cfi/cfi.h"

namespace ljprof::cfi {

namespace {

// x86-64 glibc sysdeps/unix/sysv/linux/x86_64/libc_sigaction.c RESTORE: `mov $15, %rax;
// syscall` (__NR_rt_sigreturn 15). Entered by the handler's `ret`, which popped the
// rt_sigframe's pretcode: sp is at its `struct ucontext`, whose uc_mcontext (the sigcontext)
// follows uc_flags, uc_link and the 24-byte uc_stack (arch/x86/include/uapi/asm/ucontext.h).
constexpr std::array<uint8_t, 9> kX86Sigreturn = {0x48, 0xc7, 0xc0, 0x0f, 0x00,
                                                  0x00, 0x00, 0x0f, 0x05};
constexpr int32_t kX86SigcontextAtSp = 40;

// AArch64 arch/arm64/kernel/vdso/sigreturn.S __kernel_rt_sigreturn: `mov x8, #139; svc #0`
// (__NR_rt_sigreturn 139), little-endian words. The handler returns to it with sp at the
// rt_sigframe: 128 bytes of siginfo, then the ucontext, whose 16-byte aligned uc_mcontext is at
// 176 (gdb aarch64-linux-tdep.c AARCH64_RT_SIGFRAME_UCONTEXT_OFFSET,
// AARCH64_UCONTEXT_SIGCONTEXT_OFFSET).
constexpr std::array<uint8_t, 8> kA64Sigreturn = {0x68, 0x11, 0x80, 0xd2, 0x01, 0x00, 0x00, 0xd4};
constexpr int32_t kA64SigcontextAtSp = 128 + 176;
constexpr uint32_t kA64Nop = 0xd503201f;

// Where `sig` starts when `fde` is a signal trampoline's, by the rule of each architecture's
// trampoline: x86-64 glibc starts the FDE one byte before the trampoline and ends it with the
// trampoline (libc_sigaction.c: "the unwind info starts one byte before"; that byte ends the
// padding before it and never runs), so a return to it is looked up at pc - 1 inside the FDE.
// The AArch64 vDSO's FDE covers no-ops only, and the trampoline follows it.
std::optional<uint64_t> trampoline_start(const elf::ElfFile& file, const FdeSummary& fde,
                                         std::span<const uint8_t> sig) {
  const uint64_t at = file.arch() == elf::Arch::X86_64 ? fde.pc_begin + 1 : fde.pc_end;
  if (file.arch() == elf::Arch::X86_64 && fde.pc_end != at + sig.size()) return std::nullopt;
  if (file.arch() == elf::Arch::AArch64) {
    if (fde.pc_end - fde.pc_begin > 16 || (fde.pc_end - fde.pc_begin) % 4 != 0) return std::nullopt;
    auto pad = file.read(fde.pc_begin, fde.pc_end - fde.pc_begin);
    if (!pad.ok()) return std::nullopt;
    for (size_t i = 0; i < pad->size(); i += 4) {
      uint32_t word = 0;
      std::memcpy(&word, pad->data() + i, 4);
      if (word != kA64Nop) return std::nullopt;
    }
  }
  auto code = file.read(at, sig.size());
  if (!code.ok() || !std::equal(sig.begin(), sig.end(), code->begin())) return std::nullopt;
  return at;
}

// Whether an FDE or a function symbol starts at `pc`.
bool code_starts_at(const elf::ElfFile& file, std::span<const FdeSummary> fdes, uint64_t pc) {
  if (std::any_of(fdes.begin(), fdes.end(),
                  [&](const FdeSummary& f) { return f.pc_begin == pc; })) {
    return true;
  }
  const elf::Symbol* sym = file.symbol_at(pc);
  return sym != nullptr && sym->value == pc;
}

// The AArch64 vDSO built without unwind tables (Debian 12's 6.1 kernel) has no FDE for its
// trampoline, but names it: __kernel_rt_sigreturn, with the no-op before it that the kernel's
// sigreturn.S keeps for callers' pc - 1 lookups.
std::optional<FdeSummary> named_a64_trampoline(const elf::ElfFile& file) {
  if (file.arch() != elf::Arch::AArch64) return std::nullopt;
  const elf::Symbol* sym = file.find_symbol("__kernel_rt_sigreturn");
  if (sym == nullptr || !sym->defined() || sym->value < 4) return std::nullopt;
  FdeSummary nop_before;
  nop_before.pc_begin = sym->value - 4;
  nop_before.pc_end = sym->value;
  nop_before.signal_frame = true;
  return nop_before;
}

}  // namespace

std::vector<Overlay> signal_trampoline_overlays(const elf::ElfFile& file,
                                                std::span<const FdeSummary> fdes) {
  std::vector<Overlay> out;
  const bool x86 = file.arch() == elf::Arch::X86_64;
  if (!x86 && file.arch() != elf::Arch::AArch64) return out;
  const std::span<const uint8_t> sig =
      x86 ? std::span<const uint8_t>(kX86Sigreturn) : std::span<const uint8_t>(kA64Sigreturn);
  auto consider = [&](const FdeSummary& fde, std::string how) {
    auto start = trampoline_start(file, fde, sig);
    if (!start) return;
    Overlay o;
    o.begin = fde.pc_begin;
    o.end = *start + sig.size();
    // A sample taken while the kernel runs rt_sigreturn, before it restored the interrupted
    // registers, has its pc right after the system call instruction and sp still at the frame:
    // that pc too, unless other code starts there.
    if (!code_starts_at(file, fdes, o.end)) o.end += x86 ? 1 : 4;
    o.what = fmt::format(
        "signal trampoline at {:#x}: the interrupted registers are in the kernel's signal frame",
        *start);
    o.how = std::move(how);
    o.row = invalid_row(0);
    o.row.hint = LJ_CFI_SIGNAL;
    o.row.cfa_base = LJ_CFI_REG_SP;
    o.row.cfa_offset = x86 ? kX86SigcontextAtSp : kA64SigcontextAtSp;
    o.row.ra_rule = x86 ? LJ_CFI_SIGCONTEXT_X86_64 : LJ_CFI_SIGCONTEXT_AARCH64;
    out.push_back(std::move(o));
  };
  bool any_fde = false;
  for (const FdeSummary& fde : fdes) {
    if (!fde.signal_frame || fde.pc_end <= fde.pc_begin) continue;
    any_fde = true;
    consider(fde, fmt::format("signal-frame FDE at {}+{:#x} and the rt_sigreturn system call",
                              cfi_section_name(fde.section), fde.section_offset));
  }
  if (!any_fde) {
    if (std::optional<FdeSummary> named = named_a64_trampoline(file)) {
      consider(*named, "symbol __kernel_rt_sigreturn and the rt_sigreturn system call");
    }
  }
  return out;
}

}  // namespace ljprof::cfi
