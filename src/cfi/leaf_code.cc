// Walker rows for code that has no CFI but whose functions are proven leaves by their own
// instructions: the AArch64 vDSO of kernels built without unwind tables (Debian 12's 6.1 arm64
// vDSO has no .eh_frame; os.clock's clock_gettime(CLOCK_PROCESS_CPUTIME_ID) sits in its svc
// fallback). The proof is hand-written over disasm/'s neutral instructions because it has to
// fail closed: any instruction whose effect on sp, x29 or x30 is not known keeps the function
// without a rule.
#include <elf.h>
#include <fmt/format.h>

#include <algorithm>

#include "cfi/cfi.h"

namespace ljprof::cfi {

namespace {

using disasm::Insn;
using disasm::InsnKind;
using disasm::Operand;

bool frame_register(int reg) {
  return reg == disasm::kA64Fp || reg == disasm::kA64Lr || reg == disasm::kA64Sp;
}

bool names_frame_register(const Operand& op) {
  return (op.kind == Operand::Kind::Reg && frame_register(op.reg)) ||
         (op.kind == Operand::Kind::Mem && (frame_register(op.base) || frame_register(op.index)));
}

// Why `insn` may change sp, x29 or the low bits of x30, or nullptr when it cannot. disasm/
// turns a pre/post-index (writeback) load or store into InsnKind::Other, so a memory base is
// written only by instructions of kind Other, which are rejected whenever they name sp, x29 or
// x30 at all.
const char* frame_write(const Insn& insn) {
  switch (insn.kind) {
    case InsnKind::Gap:
      return "undecodable bytes";
    case InsnKind::CallDirect:
    case InsnKind::CallIndirect:
      return "a call writes x30";
    // These only read their register operands (stores: the data registers and a base without
    // writeback; ret: x30).
    case InsnKind::Store:
    case InsnKind::StorePair:
    case InsnKind::Compare:
    case InsnKind::Branch:
    case InsnKind::Jump:
    case InsnKind::JumpIndirect:
    case InsnKind::Ret:
      return nullptr;
    // Their first operand is the destination (ldp: the first two).
    case InsnKind::Mov:
    case InsnKind::Load:
    case InsnKind::Add:
    case InsnKind::Sub:
    case InsnKind::And:
    case InsnKind::Neg:
    case InsnKind::Shift:
      return insn.op_count > 0 && insn.op(0).kind == Operand::Kind::Reg &&
                     frame_register(insn.op(0).reg)
                 ? "writes sp, x29 or x30"
                 : nullptr;
    case InsnKind::LoadPair:
      for (size_t i = 0; i < 2 && i < insn.op_count; ++i) {
        if (insn.op(i).kind == Operand::Kind::Reg && frame_register(insn.op(i).reg)) {
          return "loads sp, x29 or x30";
        }
      }
      return nullptr;
    default:
      break;
  }
  // Other. HINT-space instructions (nop, yield, bti, paciasp/autiasp, ...) leave sp and x29
  // alone and change at most the pointer-authentication bits of x30, which the walker strips
  // (native_step.h); svc returns with every general register but x0 preserved (the kernel's
  // syscall ABI).
  if (insn.text.rfind("hint", 0) == 0 || insn.text.rfind("pac", 0) == 0 ||
      insn.text.rfind("aut", 0) == 0 || insn.text.rfind("bti", 0) == 0) {
    return nullptr;
  }
  for (size_t i = 0; i < insn.op_count; ++i) {
    if (names_frame_register(insn.op(i))) return "names sp, x29 or x30 (effect not modelled)";
  }
  return nullptr;
}

lj_cfi_row leaf_row() {
  lj_cfi_row row{};
  row.hint = LJ_CFI_OK;
  row.cfa_base = LJ_CFI_REG_SP;
  row.cfa_offset = 0;
  row.ra_rule = LJ_CFI_RULE_SAME;
  row.fp_rule = LJ_CFI_RULE_SAME;
  return row;
}

}  // namespace

std::optional<std::string> aarch64_leaf_violation(std::span<const Insn> code) {
  for (const Insn& insn : code) {
    if (const char* why = frame_write(insn)) {
      return fmt::format("{:#x} `{}`: {}", insn.address, insn.text, why);
    }
  }
  return std::nullopt;
}

Result<LeafOverlays> aarch64_leaf_overlays(const elf::ElfFile& file) {
  LeafOverlays out;
  if (file.arch() != elf::Arch::AArch64) return out;
  std::vector<elf::Symbol> functions;
  for (const elf::Symbol& s : file.symbols()) {
    if (s.type == STT_FUNC && s.defined() && s.size > 0) functions.push_back(s);
  }
  std::sort(functions.begin(), functions.end(),
            [](const elf::Symbol& a, const elf::Symbol& b) { return a.value < b.value; });
  uint64_t covered_end = 0;
  for (const elf::Symbol& f : functions) {
    if (f.value < covered_end) continue;  // an alias or an overlapping symbol: proven once
    if (f.size > disasm::DisasmLimits::kMaxFunctionBytes) {
      out.rejected.push_back(fmt::format("{} ({:#x}): {} bytes, more than the cap {}", f.name,
                                         f.value, f.size, disasm::DisasmLimits::kMaxFunctionBytes));
      continue;
    }
    auto code = disasm::disassemble_range(file, f.value, f.size);
    if (!code.ok()) {
      out.rejected.push_back(fmt::format("{} ({:#x}): {}", f.name, f.value, code.message()));
      continue;
    }
    if (std::optional<std::string> why = aarch64_leaf_violation(*code)) {
      out.rejected.push_back(fmt::format("{}: {}", f.name, *why));
      continue;
    }
    out.overlays.push_back(
        Overlay{f.value, f.value + f.size, fmt::format("{}: leaf, return address in x30", f.name),
                "no instruction writes sp, x29 or x30", leaf_row(), Overlay::Kind::Replace});
    covered_end = f.value + f.size;
  }
  return out;
}

Result<UnwindTable> build_vdso_unwind_table(const elf::ElfFile& file) {
  LJ_ASSIGN_OR_RETURN(UnwindTable table, build_unwind_table(file));
  if (table.fde_count() != 0 || file.arch() != elf::Arch::AArch64) return table;
  LJ_ASSIGN_OR_RETURN(LeafOverlays leaves, aarch64_leaf_overlays(file));
  return build_unwind_table(file, leaves.overlays);
}

}  // namespace ljprof::cfi
