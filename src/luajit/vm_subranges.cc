// The LuaJIT VM's sub-ranges where the interpreter FDE's one blanket row is wrong (entry
// prologues, epilogues, the trace exit handler, JLOOP, C-callable leaf helpers, ...), found
// from symbols where present and from instruction patterns over the decoded VM otherwise: the
// driver (decodes the VM, runs the architecture's detection from vm_subranges_x86.cc or
// vm_subranges_arm64.cc and the leaf helpers called from the VM, sorts the result).
#include "luajit/vm_subranges.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "disasm/disasm.h"
#include "luajit/vm_subranges_internal.h"

namespace ljprof::luajit {

namespace vm_subranges_internal {

namespace {

// What a leaf helper may not do, per architecture: move the stack pointer (x86-64: push, pop,
// rsp arithmetic) or lose its return address (AArch64: call, which writes x30). Capstone 4's
// AArch64 write lists are unusable (disasm.h Insn::writes), so there any instruction naming sp
// or x30 counts, except the plain `ret` the caller checks: stricter than needed, never wrong.
bool disturbs_leaf_frame(elf::Arch arch, const Insn& insn) {
  if (arch == elf::Arch::X86_64) return x_push(insn) || x_pop(insn) || x_writes_rsp(insn);
  if (insn.kind == InsnKind::Ret) return false;
  return is_call(insn) || names_reg(insn, kA64Sp) || names_reg(insn, kA64Lr);
}

// The interpreter's BASE and PC registers: vm_x64.dasc rdx/rbx, vm_arm64.dasc x19/x21 (on
// AArch64 naming one counts as writing it, see disturbs_leaf_frame).
bool writes_interpreter_regs(elf::Arch arch, const Insn& insn) {
  if (arch == elf::Arch::X86_64) return writes_vm_regs(insn);
  return names_reg(insn, kA64Base) || names_reg(insn, kA64Pc);
}

// The row of a leaf helper's instructions: x86-64 CFA = rsp + 8 (the return address the call
// pushed); AArch64 CFA = sp, the return address still in x30.
lj_cfi_row leaf_row(elf::Arch arch, bool keeps_vm_regs) {
  const uint8_t hint = keeps_vm_regs ? LJ_CFI_VM_LEAF : LJ_CFI_OK;
  if (arch == elf::Arch::X86_64) return sp_row(8, LJ_CFI_RULE_SAME, 0, hint);
  return a64_sp_row(0, false, hint);
}

// The instructions reachable from `target` when it is a leaf helper (at most kMaxHelperInsns,
// every path ending in `ret`, none disturbing the frame), else nullopt.
std::optional<std::set<size_t>> leaf_helper_body(const Finder& f, elf::Arch arch, VmCode code,
                                                 const std::map<uint64_t, size_t>& index,
                                                 uint64_t target) {
  constexpr size_t kMaxHelperInsns = 512;
  std::set<size_t> reached;
  std::vector<size_t> work;
  auto start = index.find(target);
  if (start == index.end()) return std::nullopt;
  work.push_back(start->second);
  while (!work.empty()) {
    const size_t i = work.back();
    work.pop_back();
    if (!reached.insert(i).second) continue;
    const Insn& insn = code[i];
    if (reached.size() > kMaxHelperInsns || insn.kind == InsnKind::Gap ||
        disturbs_leaf_frame(arch, insn) || f.covers(insn.address)) {
      return std::nullopt;
    }
    // AArch64 `ret` returns through x30 only when it names no other register.
    if (insn.kind == InsnKind::Ret) {
      if (arch != elf::Arch::X86_64 && insn.op_count != 0 && !is_reg(insn, 0, kA64Lr)) {
        return std::nullopt;
      }
      continue;
    }
    if (is_jmp(insn) || insn.kind == InsnKind::Branch) {
      const std::optional<uint64_t> to = branch_target(arch, insn);
      auto t = to ? index.find(*to) : index.end();
      if (t == index.end()) return std::nullopt;
      work.push_back(t->second);
      if (is_jmp(insn)) continue;
    }
    if (i + 1 >= code.size()) return std::nullopt;
    work.push_back(i + 1);
  }
  return reached;
}

// Stripped builds (Debian's luajit, OpenResty's libluajit): the math helpers without symbols.
// They are the targets of direct calls from bytecode handlers to inside the VM (vm_x64.dasc
// BC_MODVN `call ->vm_mod`, math.floor `call ->vm_floor_sse`; vm_arm64.dasc `bl ->vm_modi`),
// and JIT traces call the same helpers (lj_ircall.h lj_vm_modi), so a sample may land in one
// with the return address pointing into trace code. A target gets the leaf rule only for the
// instructions reachable from it, and only when none of them disturbs the frame and every path
// ends in `ret`; anything else keeps the blanket rule, which stops the walk with a clear reason
// rather than guessing.
void add_called_leaf_helpers(Finder& f, elf::Arch arch, VmCode code,
                             const std::map<uint64_t, size_t>& index) {
  // Real VMs call a handful of such helpers (5 distinct targets in Debian's libluajit); more
  // than this means the bytes are not a LuaJIT VM, and following each target would cost
  // targets x kMaxHelperInsns. Over the cap no helper gets a row (they keep the blanket rule).
  constexpr size_t kMaxHelperTargets = 64;
  std::set<uint64_t> targets;
  for (const Insn& insn : code) {
    if (insn.kind != InsnKind::CallDirect || !is_imm(insn, 0)) continue;
    const auto target = static_cast<uint64_t>(insn.ops[0].imm);
    if (target >= f.vm.begin && target < f.vm.end && !f.covers(target)) targets.insert(target);
    if (targets.size() > kMaxHelperTargets) return;
  }
  for (uint64_t target : targets) {
    const std::optional<std::set<size_t>> reached = leaf_helper_body(f, arch, code, index, target);
    if (!reached) continue;
    bool keeps_vm_regs = true;
    for (size_t i : *reached) keeps_vm_regs &= !writes_interpreter_regs(arch, code[i]);
    const lj_cfi_row leaf = leaf_row(arch, keeps_vm_regs);
    const std::string what = fmt::format("leaf helper called from the VM at {:#x}", target);
    std::vector<cfi::Overlay> rows;
    for (size_t i : *reached) {  // std::set: ascending addresses
      if (!rows.empty() && rows.back().end == code[i].address) {
        rows.back().end = code[i].end();
      } else {
        rows.push_back({code[i].address, code[i].end(), what, "pattern", leaf});
      }
    }
    for (cfi::Overlay& r : rows) f.add(std::move(r));
  }
}

}  // namespace

}  // namespace vm_subranges_internal

std::vector<cfi::Overlay> detect_vm_subranges(const elf::ElfFile& file, const VmInterval& vm,
                                              const lj_cfi_row& blanket,
                                              std::span<const disasm::Insn> code) {
  using vm_subranges_internal::Finder;
  using vm_subranges_internal::Insn;
  Finder f{file, vm, {}, {}};
  if (vm.end <= vm.begin || code.empty()) return {};
  if (file.arch() == elf::Arch::X86_64) {
    if (blanket.cfa_base != LJ_CFI_REG_SP) return {};
    // Instruction index by address, for following direct jumps and calls.
    std::map<uint64_t, size_t> index;
    for (size_t i = 0; i < code.size(); ++i) index.emplace(code[i].address, i);
    vm_subranges_internal::detect_x86(
        f, code, index, blanket.cfa_offset,
        blanket.fp_rule == LJ_CFI_RULE_AT_CFA ? blanket.fp_offset : -16);
    vm_subranges_internal::add_x86_symbol_leaf_helpers(f, code);
    vm_subranges_internal::add_called_leaf_helpers(f, elf::Arch::X86_64, code, index);
    vm_subranges_internal::add_x86_unmatched_entry_symbols(f);
  } else {
    std::map<uint64_t, size_t> index;
    for (size_t i = 0; i < code.size(); ++i) index.emplace(code[i].address, i);
    vm_subranges_internal::detect_arm64(f, code, index, blanket);
    vm_subranges_internal::add_called_leaf_helpers(f, elf::Arch::AArch64, code, index);
  }
  std::sort(f.out.begin(), f.out.end(),
            [](const cfi::Overlay& a, const cfi::Overlay& b) { return a.begin < b.begin; });
  for (cfi::Overlay& r : f.out) r.row.pc_start = r.begin;
  return f.out;
}

}  // namespace ljprof::luajit
