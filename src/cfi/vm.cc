// The LuaJIT VM and its CFI: finding the interpreter FDE, correcting the sub-ranges where its
// one blanket row is wrong, and deriving the VM C-frame geometry from the table.
#include <capstone/capstone.h>
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <tuple>

#include "cfi/internal.h"

namespace ljprof::cfi {

namespace {

bool is_vm_cfa(const CfaRule& cfa, elf::Arch arch) {
  internal::ArchRegs regs = internal::arch_regs(arch);
  if (cfa.kind != CfaRule::Kind::RegOffset) return false;
  if (arch == elf::Arch::AArch64) {
    return (cfa.reg == regs.fp && cfa.offset == 16) || (cfa.reg == regs.sp && cfa.offset > 0);
  }
  // x86-64: the VM runs with its C frame allocated (CFRAME_SIZE, lj_frame.h), so the CFA is
  // rsp + frame size from the first byte, unlike a C function (rsp + 8 at entry).
  return cfa.reg == regs.sp && cfa.offset > 8;
}

}  // namespace

Result<FdeSummary> find_interpreter_fde(const elf::ElfFile& file) {
  LJ_ASSIGN_OR_RETURN(std::vector<FdeSummary> fdes, list_fdes(file, CfiSection::EhFrame));
  const elf::Symbol* anchor = file.find_symbol("lj_vm_asm_begin");
  std::vector<const FdeSummary*> candidates;
  for (const FdeSummary& f : fdes) {
    if (!f.personality || f.pc_end - f.pc_begin < kMinInterpreterBytes) continue;
    if (!f.initial_cfa || !is_vm_cfa(*f.initial_cfa, file.arch())) continue;
    if (anchor != nullptr && f.pc_begin != anchor->value) continue;
    candidates.push_back(&f);
  }
  if (candidates.size() == 1) return *candidates.front();
  if (candidates.empty()) {
    return make_error(
        "{}: no LuaJIT interpreter FDE in .eh_frame (rule: personality, >= {} "
        "bytes, VM CFA at its start{})",
        file.path(), kMinInterpreterBytes,
        anchor ? fmt::format(", starting at lj_vm_asm_begin {:#x}", anchor->value) : std::string());
  }
  std::string list;
  for (const FdeSummary* f : candidates) {
    list +=
        fmt::format(" .eh_frame+{:#x} ({:#x}..{:#x})", f->section_offset, f->pc_begin, f->pc_end);
  }
  return make_error("{}: ambiguous LuaJIT interpreter FDE, {} candidates:{}", file.path(),
                    candidates.size(), list);
}

namespace internal {

std::vector<VmSubRange> detect_vm_subranges(const elf::ElfFile& file, const VmHints& vm,
                                            const lj_cfi_row& blanket) {
  (void)file;
  (void)vm;
  (void)blanket;
  return {};
}

}  // namespace internal

Result<VmCframe> derive_vm_cframe(const UnwindTable& table, uint64_t vm_begin, uint64_t vm_end) {
  using Key = std::tuple<uint8_t, int32_t, uint8_t, int32_t, uint8_t, int32_t>;
  std::map<Key, std::pair<uint64_t, uint64_t>> bytes;  // rule -> (bytes, first FDE offset)
  auto rows = table.rows();
  auto origins = table.row_fde_offsets();
  if (vm_begin >= vm_end) {
    return make_error("VM interval {:#x}..{:#x} is empty", vm_begin, vm_end);
  }
  for (size_t i = 0; i + 1 < rows.size(); ++i) {
    uint64_t lo = std::max(rows[i].pc_start, vm_begin);
    uint64_t hi = std::min(rows[i + 1].pc_start, vm_end);
    if (lo >= hi) continue;
    const lj_cfi_row& r = rows[i];
    if (r.hint != LJ_CFI_OK && r.hint != LJ_CFI_KEEP) continue;
    Key key{r.cfa_base, r.cfa_offset, r.ra_rule, r.ra_offset, r.fp_rule, r.fp_offset};
    auto [it, fresh] = bytes.try_emplace(key, 0, origins[i]);
    it->second.first += hi - lo;
    if (it->second.second == UINT64_MAX) it->second.second = origins[i];
  }
  if (bytes.empty()) {
    return make_error("no Ok/Keep CFI row covers the VM interval {:#x}..{:#x}", vm_begin, vm_end);
  }
  auto best = std::max_element(bytes.begin(), bytes.end(), [](const auto& a, const auto& b) {
    return a.second.first < b.second.first;
  });
  VmCframe c;
  c.arch = table.arch();
  c.vm_begin = vm_begin;
  c.vm_end = vm_end;
  std::tie(c.cfa_base, c.cfa_offset, c.ra_rule, c.ra_offset, c.fp_rule, c.fp_offset) = best->first;
  c.covered_bytes = best->second.first;
  c.fde_section_offset = best->second.second;
  if (c.ra_rule != LJ_CFI_RULE_AT_CFA) {
    return make_error(
        "the VM interval's dominant rule keeps the return address in a register "
        "({}), not in the C frame",
        c.ra_rule);
  }
  return c;
}

nlohmann::ordered_json to_json(const VmCframe& c) {
  internal::ArchRegs regs = internal::arch_regs(c.arch);
  auto rule = [](uint8_t kind, int32_t off, const char* reg) -> std::string {
    switch (kind) {
      case LJ_CFI_RULE_AT_CFA:
        return fmt::format("[cfa{:+d}]", off);
      case LJ_CFI_RULE_VAL_CFA:
        return fmt::format("cfa{:+d}", off);
      case LJ_CFI_RULE_SAME:
        return reg;
      case LJ_CFI_RULE_UNDEFINED:
        return "undefined";
      default:
        return "unknown";
    }
  };
  nlohmann::ordered_json j;
  j["vm_begin"] = fmt::format("{:#x}", c.vm_begin);
  j["vm_end"] = fmt::format("{:#x}", c.vm_end);
  const char* base = c.cfa_base == LJ_CFI_REG_SP ? regs.sp_name : regs.fp_name;
  j["cfa"] = fmt::format("{}{:+d}", base, c.cfa_offset);
  j["cfa_base"] = c.cfa_base == LJ_CFI_REG_SP ? "sp" : "fp";
  j["cfa_offset"] = c.cfa_offset;
  j["ra"] = rule(c.ra_rule, c.ra_offset, regs.ra_name);
  j["ra_offset"] = c.ra_offset;
  j["fp"] = rule(c.fp_rule, c.fp_offset, regs.fp_name);
  j["fp_offset"] = c.fp_offset;
  j["fde_offset"] = fmt::format("{:#x}", c.fde_section_offset);
  j["covered_bytes"] = c.covered_bytes;
  return j;
}

}  // namespace ljprof::cfi
