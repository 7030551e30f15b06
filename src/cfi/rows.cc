// Running FDE programs with libdw (dwarf_cfi_addrframe + dwarf_frame_info): one libdw query
// per row, walking [pc_begin, pc_end) from row end to row end. libdw executes the CIE and FDE
// instructions (all DW_CFA_* opcodes, remember/restore_state, AArch64 negate_ra_state); this
// file only checks that the rows it reports stay inside the FDE we enumerated and converts
// its location expressions back into register rules.
#include <fmt/format.h>

#include <cstdlib>

#include "cfi/internal.h"

namespace ljprof::cfi {

struct FdeRowReader::State {
  internal::ElfHandle elf;
  Dwarf* dwarf = nullptr;    // .debug_frame only
  Dwarf_CFI* cfi = nullptr;  // owned (dwarf_cfi_end) only for .eh_frame
  CfiSection section = CfiSection::EhFrame;
  elf::Arch arch = elf::Arch::X86_64;
  std::string path;

  explicit State(internal::ElfHandle handle) : elf(std::move(handle)) {}
  ~State() {
    if (section == CfiSection::EhFrame && cfi != nullptr) dwarf_cfi_end(cfi);
    if (dwarf != nullptr) dwarf_end(dwarf);
  }
};

FdeRowReader::FdeRowReader(std::unique_ptr<State> state) : state_(std::move(state)) {}
FdeRowReader::FdeRowReader(FdeRowReader&&) noexcept = default;
FdeRowReader& FdeRowReader::operator=(FdeRowReader&&) noexcept = default;
FdeRowReader::~FdeRowReader() = default;

Result<FdeRowReader> FdeRowReader::open(const elf::ElfFile& file, CfiSection section) {
  LJ_ASSIGN_OR_RETURN(internal::ElfHandle elf, internal::ElfHandle::open(file));
  auto state = std::make_unique<State>(std::move(elf));
  state->section = section;
  state->path = file.path();
  state->arch = file.arch();
  if (section == CfiSection::EhFrame) {
    state->cfi = dwarf_getcfi_elf(state->elf.get());
  } else {
    state->dwarf = dwarf_begin_elf(state->elf.get(), DWARF_C_READ, nullptr);
    if (state->dwarf == nullptr) {
      return make_error("{}: libdw cannot open DWARF for .debug_frame: {}", file.path(),
                        internal::libdw_error());
    }
    state->cfi = dwarf_getcfi(state->dwarf);
  }
  if (state->cfi == nullptr) {
    return make_error("{}: libdw finds no {} CFI: {}", file.path(), cfi_section_name(section),
                      internal::libdw_error());
  }
  return FdeRowReader(std::move(state));
}

namespace {

// libdw describes a CFA of "register + offset" as one DW_OP_bregN / DW_OP_bregx.
CfaRule cfa_from_ops(const Dwarf_Op* ops, size_t nops) {
  CfaRule rule;
  if (nops == 1 && ops[0].atom >= DW_OP_breg0 && ops[0].atom <= DW_OP_breg31) {
    rule.reg = ops[0].atom - DW_OP_breg0;
    rule.offset = static_cast<int64_t>(ops[0].number);
    return rule;
  }
  if (nops == 1 && ops[0].atom == DW_OP_bregx) {
    rule.reg = static_cast<uint32_t>(ops[0].number);
    rule.offset = static_cast<int64_t>(ops[0].number2);
    return rule;
  }
  // DW_OP_breg7 8; DW_OP_breg16 0; DW_OP_lit15; DW_OP_and; DW_OP_litN; DW_OP_ge; DW_OP_lit3;
  // DW_OP_shl; DW_OP_plus — rsp + 8 + (((rip & 15) >= N) << 3), the x86-64 PLT rule.
  if (nops == 9 && ops[0].atom == DW_OP_breg7 && ops[0].number == 8 &&
      ops[1].atom == DW_OP_breg16 && ops[1].number == 0 && ops[2].atom == DW_OP_lit15 &&
      ops[3].atom == DW_OP_and && ops[4].atom >= DW_OP_lit1 && ops[4].atom <= DW_OP_lit15 &&
      ops[5].atom == DW_OP_ge && ops[6].atom == DW_OP_lit3 && ops[7].atom == DW_OP_shl &&
      ops[8].atom == DW_OP_plus) {
    rule.kind = CfaRule::Kind::PltEntry;
    rule.reg = 7;
    rule.offset = ops[4].atom - DW_OP_lit0;
    return rule;
  }
  rule.kind = CfaRule::Kind::Expression;
  return rule;
}

// libdw's forms (dwarf_frame_register): undefined = no ops with ops == ops_mem; same_value =
// no ops with ops == NULL; offset(N) = call_frame_cfa [plus_uconst N]; val_offset(N) = the
// same + stack_value; register(R) = regx R; anything else is an expression.
RegisterRule register_from_ops(const Dwarf_Op* ops_mem, const Dwarf_Op* ops, size_t nops) {
  RegisterRule rule;
  if (nops == 0) {
    rule.kind = ops == nullptr ? RegisterRule::Kind::SameValue : RegisterRule::Kind::Undefined;
    (void)ops_mem;
    return rule;
  }
  bool stack_value = ops[nops - 1].atom == DW_OP_stack_value;
  size_t n = stack_value ? nops - 1 : nops;
  if (n >= 1 && ops[0].atom == DW_OP_call_frame_cfa) {
    if (n == 1) {
      rule.kind = stack_value ? RegisterRule::Kind::ValCfa : RegisterRule::Kind::AtCfa;
      return rule;
    }
    if (n == 2 && ops[1].atom == DW_OP_plus_uconst) {
      rule.kind = stack_value ? RegisterRule::Kind::ValCfa : RegisterRule::Kind::AtCfa;
      rule.offset = static_cast<int64_t>(ops[1].number);
      return rule;
    }
    if (n == 3 && (ops[1].atom == DW_OP_consts || ops[1].atom == DW_OP_constu) &&
        ops[2].atom == DW_OP_plus) {
      rule.kind = stack_value ? RegisterRule::Kind::ValCfa : RegisterRule::Kind::AtCfa;
      rule.offset = static_cast<int64_t>(ops[1].number);
      return rule;
    }
  }
  if (nops == 1 && ops[0].atom == DW_OP_regx) {
    rule.kind = RegisterRule::Kind::InRegister;
    rule.reg = static_cast<uint32_t>(ops[0].number);
    return rule;
  }
  if (nops == 1 && ops[0].atom >= DW_OP_reg0 && ops[0].atom <= DW_OP_reg31) {
    rule.kind = RegisterRule::Kind::InRegister;
    rule.reg = ops[0].atom - DW_OP_reg0;
    return rule;
  }
  if (n == 1 && stack_value && ops[0].atom == DW_OP_bregx && ops[0].number2 == 0) {
    rule.kind = RegisterRule::Kind::InRegister;
    rule.reg = static_cast<uint32_t>(ops[0].number);
    return rule;
  }
  if (n == 1 && stack_value && ops[0].atom >= DW_OP_breg0 && ops[0].atom <= DW_OP_breg31 &&
      ops[0].number == 0) {
    rule.kind = RegisterRule::Kind::InRegister;
    rule.reg = ops[0].atom - DW_OP_breg0;
    return rule;
  }
  rule.kind = stack_value ? RegisterRule::Kind::ValExpression : RegisterRule::Kind::Expression;
  return rule;
}

}  // namespace

Result<std::vector<CfiRow>> FdeRowReader::rows(const FdeSummary& fde) const {
  const char* name = cfi_section_name(fde.section);
  auto fail = [&](const std::string& why) {
    return make_error("{}: FDE at {}+{:#x} (pc {:#x}..{:#x}): {}", state_->path, name,
                      fde.section_offset, fde.pc_begin, fde.pc_end, why);
  };
  if (fde.section != state_->section) return fail("reader opened for another section");
  std::vector<CfiRow> rows;
  if (fde.pc_end <= fde.pc_begin) return rows;
  const uint32_t fp_reg = arch_regs(state_->arch).fp;
  uint64_t addr = fde.pc_begin;
  while (addr < fde.pc_end) {
    if (rows.size() >= CfiLimits::kMaxRowsPerFde) {
      return fail(fmt::format("more than {} rows (cap CfiLimits::kMaxRowsPerFde)",
                              CfiLimits::kMaxRowsPerFde));
    }
    Dwarf_Frame* frame = nullptr;
    if (dwarf_cfi_addrframe(state_->cfi, addr, &frame) != 0) {
      return fail(fmt::format("libdw cannot run the CFI program at pc {:#x}: {}", addr,
                              internal::libdw_error()));
    }
    std::unique_ptr<Dwarf_Frame, void (*)(void*)> owned(frame, std::free);
    Dwarf_Addr start = 0, end = 0;
    bool signal = false;
    int ra = dwarf_frame_info(frame, &start, &end, &signal);
    if (ra < 0) return fail("libdw: " + internal::libdw_error());
    if (static_cast<uint32_t>(ra) != fde.return_address_register) {
      return fail(
          fmt::format("libdw used a CIE with return address column {} at pc {:#x} (FDE "
                      "lookup resolved to another entry)",
                      ra, addr));
    }
    if (start > addr || end <= addr || start < fde.pc_begin) {
      return fail(
          fmt::format("libdw row {:#x}..{:#x} does not contain pc {:#x} inside the FDE "
                      "(overlapping FDEs or a broken .eh_frame_hdr)",
                      start, end, addr));
    }
    if (end > fde.pc_end) {
      return fail(fmt::format("advance_loc moves to {:#x}, past the FDE end", end));
    }
    CfiRow row;
    row.pc_begin = addr;
    row.pc_end = end;
    Dwarf_Op* ops = nullptr;
    size_t nops = 0;
    if (dwarf_frame_cfa(frame, &ops, &nops) != 0) {
      return fail(fmt::format("libdw has no CFA at pc {:#x}: {}", addr, internal::libdw_error()));
    }
    row.cfa = cfa_from_ops(ops, nops);
    Dwarf_Op ops_mem[3];
    if (dwarf_frame_register(frame, ra, ops_mem, &ops, &nops) != 0) {
      return fail(fmt::format("libdw has no return address rule at pc {:#x}: {}", addr,
                              internal::libdw_error()));
    }
    row.ra = register_from_ops(ops_mem, ops, nops);
    if (dwarf_frame_register(frame, static_cast<int>(fp_reg), ops_mem, &ops, &nops) != 0) {
      return fail(fmt::format("libdw has no frame pointer rule at pc {:#x}: {}", addr,
                              internal::libdw_error()));
    }
    row.fp = register_from_ops(ops_mem, ops, nops);
    if (state_->arch == elf::Arch::X86_64) {
      if (dwarf_frame_register(frame, static_cast<int>(kX86DwarfRbx), ops_mem, &ops, &nops) != 0) {
        return fail(
            fmt::format("libdw has no rbx rule at pc {:#x}: {}", addr, internal::libdw_error()));
      }
      row.bx = register_from_ops(ops_mem, ops, nops);
      // libdw's x86-64 ABI defaults mark DWARF register 0 (rax), meant as rbx, same value
      // (elfutils backends/x86_64_cfi.c: `ULEB128_7 (0), /* %rbx */`), so an rbx the CFI never
      // mentions comes back undefined. It is callee-saved (psABI §3.2.1): unchanged, as
      // libgcc's unwinder takes an unmentioned register. readelf prints both as "u".
      if (row.bx.kind == RegisterRule::Kind::Undefined) row.bx.kind = RegisterRule::Kind::SameValue;
    }
    rows.push_back(row);
    addr = end;
  }
  return rows;
}

Result<std::vector<CfiRow>> fde_rows(const elf::ElfFile& file, const FdeSummary& fde) {
  LJ_ASSIGN_OR_RETURN(FdeRowReader reader, FdeRowReader::open(file, fde.section));
  return reader.rows(fde);
}

}  // namespace ljprof::cfi
