// Internals shared by the vm_subranges sources (the driver, x86-64 and AArch64 detection): the
// instruction shapes more than one of them tests, and the Finder that collects the sub-ranges.
#pragma once

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "cfi/cfi.h"
#include "disasm/disasm.h"
#include "elf/elf_file.h"
#include "luajit/vm_cfi.h"

namespace ljprof::luajit::vm_subranges_internal {

using cfi::sp_row;
using disasm::Insn;
using disasm::InsnKind;
using OpKind = disasm::Operand::Kind;
// The VM interval's instructions, decoded once (detect_vm_subranges).
using VmCode = std::span<const Insn>;
using disasm::kA64Fp;
using disasm::kA64Lr;
using disasm::kA64Sp;
using disasm::kX86Rbp;
using disasm::kX86Rbx;
using disasm::kX86Rdx;
using disasm::kX86Rsp;

// Operand n is the full-width register `reg` (x86-64 rsp, not esp).
inline bool is_reg(const Insn& i, int n, int reg) {
  return i.op_count > n && i.ops[n].is_reg64(reg);
}
inline bool is_imm(const Insn& i, int n) {
  return i.op_count > n && i.ops[n].kind == OpKind::Imm;
}
inline bool is_kind(const Insn& i, InsnKind kind, uint8_t op_count) {
  return i.kind == kind && i.op_count == op_count;
}

// Any transfer of control, or undecodable bytes (which may be one): the end of straight-line
// code for every window the detection follows.
inline bool is_transfer(const Insn& i) {
  switch (i.kind) {
    case InsnKind::Gap:
    case InsnKind::CallDirect:
    case InsnKind::CallIndirect:
    case InsnKind::Jump:
    case InsnKind::JumpIndirect:
    case InsnKind::Ret:
    case InsnKind::Branch:
      return true;
    default:
      return false;
  }
}
inline bool is_call(const Insn& i) {
  return i.kind == InsnKind::CallDirect || i.kind == InsnKind::CallIndirect;
}
// An unconditional jump (direct, through a register or through memory).
inline bool is_jmp(const Insn& i) {
  return i.kind == InsnKind::Jump || i.kind == InsnKind::JumpIndirect;
}

// A direct jump's or branch's target: the first operand on x86-64; AArch64 puts it last
// (`b.ne L`, `cbz x0, L`, `tbz w0, #4, L`).
inline std::optional<uint64_t> branch_target(elf::Arch arch, const Insn& insn) {
  if (insn.op_count == 0) return std::nullopt;
  const int k = arch == elf::Arch::X86_64 ? 0 : insn.op_count - 1;
  if (!is_imm(insn, k)) return std::nullopt;
  return static_cast<uint64_t>(insn.ops[k].imm);
}

// x86-64 instruction shapes that the x86-64 detection and the leaf-helper checks share.
inline bool x_push(const Insn& i) {
  return is_kind(i, InsnKind::Push, 1) && i.ops[0].kind == OpKind::Reg;
}
inline bool x_pop(const Insn& i) {
  return is_kind(i, InsnKind::Pop, 1) && i.ops[0].kind == OpKind::Reg;
}
// rsp, or a writer of rsp other than push/pop, as the first operand (cmp/test only read it).
inline bool x_writes_rsp(const Insn& i) {
  return is_reg(i, 0, kX86Rsp) && !x_push(i) && !x_pop(i) && i.kind != InsnKind::Compare;
}
// The interpreter's BASE (rdx) and PC (rbx) registers (vm_x64.dasc), at any width.
inline bool writes_vm_regs(const Insn& i) {
  return i.may_write(kX86Rdx) || i.may_write(kX86Rbx);
}

// vm_arm64.dasc's fixed registers: BASE x19, PC x21.
inline constexpr int kA64Base = 19;
inline constexpr int kA64Pc = 21;

// An AArch64 row on sp: CFA = sp + cfa, with x30 and x29 still in their registers or, once
// `saved`, in the pair at CFA - 16 (`stp x29, x30, [sp, #S-16]`).
inline lj_cfi_row a64_sp_row(int32_t cfa, bool saved, uint8_t hint = LJ_CFI_OK) {
  lj_cfi_row r{};
  r.hint = hint;
  r.cfa_base = LJ_CFI_REG_SP;
  r.cfa_offset = cfa;
  r.ra_rule = saved ? LJ_CFI_RULE_AT_CFA : LJ_CFI_RULE_SAME;
  r.ra_offset = saved ? -8 : 0;
  r.fp_rule = saved ? LJ_CFI_RULE_AT_CFA : LJ_CFI_RULE_SAME;
  r.fp_offset = saved ? -16 : 0;
  return r;
}

// A register operand of `insn` is canonical register `reg`, at any width.
inline bool names_reg(const Insn& insn, int reg) {
  for (uint8_t k = 0; k < insn.op_count && k < insn.ops.size(); ++k) {
    const disasm::Operand& op = insn.ops[k];
    if ((op.kind == OpKind::Reg && op.reg == reg) || (op.kind == OpKind::Mem && op.base == reg)) {
      return true;
    }
  }
  return false;
}

// The Invalid row: no unwind rule holds there.
inline lj_cfi_row invalid() {
  return cfi::invalid_row(0);  // pc_start is set when the sub-ranges are sorted
}

// The sub-ranges found so far (`out`, in the order found) in the VM interval `vm` of `file`.
struct Finder {
  const elf::ElfFile& file;
  const VmInterval& vm;
  std::vector<cfi::Overlay> out;

  // "symbol" when the symbol of that name (.symtab, else .dynsym) contains pc.
  std::string how(uint64_t pc, const char* name) const {
    const elf::Symbol* s = file.find_symbol(name);
    bool inside = s != nullptr && s->value <= pc && pc < s->value + std::max<uint64_t>(s->size, 1);
    return inside ? "symbol" : "pattern";
  }
  // A sub-range found so far contains pc. The patterns ask this for every instruction they
  // look at, so it is a lookup in the union of the ranges (disjoint, keyed by begin), not a
  // scan of `out`: a VM-sized input with thousands of ranges stays near-linear.
  bool covers(uint64_t pc) const {
    auto it = covered.upper_bound(pc);
    return it != covered.begin() && pc < std::prev(it)->second;
  }
  void add(uint64_t b, uint64_t e, std::string what, std::string how, lj_cfi_row row) {
    add(cfi::Overlay{b, e, std::move(what), std::move(how), row});
  }
  void add(cfi::Overlay r) {
    if (r.begin >= r.end) return;
    uint64_t b = r.begin, e = r.end;
    // Merge with every union range that overlaps or touches [b, e).
    auto it = covered.upper_bound(b);
    if (it != covered.begin() && std::prev(it)->second >= b) --it;
    while (it != covered.end() && it->first <= e) {
      b = std::min(b, it->first);
      e = std::max(e, it->second);
      it = covered.erase(it);
    }
    covered.emplace(b, e);
    out.push_back(std::move(r));
  }
  std::map<uint64_t, uint64_t> covered;  // union of out's ranges (begin -> end), kept by add()
};

// x86-64 detection (vm_subranges_x86.cc).
void detect_x86(Finder& f, VmCode code, const std::map<uint64_t, size_t>& index, int32_t cfa,
                int32_t blanket_fp);
void add_x86_symbol_leaf_helpers(Finder& f, VmCode code);
void add_x86_unmatched_entry_symbols(Finder& f);

// AArch64 detection (vm_subranges_arm64.cc).
void detect_arm64(Finder& f, VmCode code, const std::map<uint64_t, size_t>& index,
                  const lj_cfi_row& blanket);

}  // namespace ljprof::luajit::vm_subranges_internal
