#include "luajit/vm_cfi.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <tuple>

#include "luajit/proc_info.h"
#include "luajit/vm_subranges.h"

namespace ljprof::luajit {

namespace {

bool is_vm_cfa(const cfi::CfaRule& cfa, elf::Arch arch) {
  cfi::ArchRegs regs = cfi::arch_regs(arch);
  if (cfa.kind != cfi::CfaRule::Kind::RegOffset) return false;
  if (arch == elf::Arch::AArch64) {
    return (cfa.reg == regs.fp && cfa.offset == 16) || (cfa.reg == regs.sp && cfa.offset > 0);
  }
  // x86-64: the VM runs with its C frame allocated (CFRAME_SIZE, lj_frame.h), so the CFA is
  // rsp + frame size from the first byte, unlike a C function (rsp + 8 at entry).
  return cfa.reg == regs.sp && cfa.offset > 8;
}

// Over the VM interval only the FDE covering its start (the interpreter's) describes the VM C
// frame: its Ok rows become Keep. Other FDEs inside the interval are ordinary native frames
// (lj_vm_ffi_call has its own rbp-based FDE in vm_x64.dasc and is called from C by
// lj_ccall_func), so they stay Ok. Then the sub-ranges where the blanket row is wrong.
std::vector<cfi::Overlay> vm_overlays(const elf::ElfFile& file, const VmInterval& vm,
                                      std::span<const disasm::Insn> vm_code) {
  auto at = cfi::fde_row_at(file, vm.begin);
  if (!at.ok() || !*at) return {};
  cfi::Overlay keep;
  keep.kind = cfi::Overlay::Kind::Hint;
  keep.begin = vm.begin;
  keep.end = std::min(vm.end, (*at)->fde_end);
  keep.what = "LuaJIT VM: the interpreter FDE's rows describe the VM C frame";
  keep.how = vm.source;
  keep.row.hint = LJ_CFI_KEEP;
  std::vector<cfi::Overlay> out = {keep};
  if ((*at)->row.hint != LJ_CFI_OK) return out;
  lj_cfi_row blanket = (*at)->row;
  blanket.hint = LJ_CFI_KEEP;
  // The LuaJIT VM (DynASM output of vm_x64.dasc / vm_arm64.dasc) is code only; undecodable
  // bytes are Gap instructions, which end every pattern (fail closed). A VM that cannot be
  // decoded at all (unreadable, over the disassembler's cap) keeps its blanket rule.
  Result<std::vector<disasm::Insn>> decoded = std::vector<disasm::Insn>{};
  if (vm_code.empty()) {
    decoded = disasm::disassemble_range(file, vm.begin, vm.end - vm.begin);
    if (decoded.ok()) vm_code = *decoded;
  }
  for (cfi::Overlay& o : detect_vm_subranges(file, vm, blanket, vm_code)) {
    out.push_back(std::move(o));
  }
  return out;
}

// Tarantool's arm64 fiber trampoline (third_party/coro, coro_startup): AArch64 ELF, a .symtab
// symbol named exactly "coro_startup", and at it `mov x0, x20; blr x19; b <anything>`. It has
// no CFI; this exact signature proves it is the bottom of a fiber stack.
constexpr uint64_t kCoroStartupBytes = 12;
std::vector<uint64_t> find_coro_startup(const elf::ElfFile& file) {
  std::vector<uint64_t> found;
  if (file.arch() != elf::Arch::AArch64) return found;
  for (const elf::Symbol& sym : file.symbols()) {
    if (sym.table != elf::SymbolTable::Symtab || !sym.defined() || sym.name != "coro_startup") {
      continue;
    }
    auto bytes = file.read(sym.value, kCoroStartupBytes);
    if (!bytes.ok()) continue;
    uint32_t w[3];
    std::memcpy(w, bytes->data(), kCoroStartupBytes);
    const bool mov_x0_x20 = w[0] == 0xaa1403e0;              // orr x0, xzr, x20
    const bool blr_x19 = w[1] == 0xd63f0260;                 // blr x19
    const bool b_imm26 = (w[2] & 0xfc000000) == 0x14000000;  // b <imm26>
    if (mov_x0_x20 && blr_x19 && b_imm26) found.push_back(sym.value);
  }
  return found;
}

cfi::Overlay fiber_root(uint64_t pc) {
  cfi::Overlay root;
  root.begin = pc;
  root.end = pc + kCoroStartupBytes;
  root.what = "coro_startup: bottom of a Tarantool fiber stack";
  root.how = "symbol and signature";
  root.row = cfi::invalid_row(pc);
  root.row.hint = LJ_CFI_STOP;
  root.row.ra_rule = LJ_CFI_RULE_UNDEFINED;
  root.row.fp_rule = LJ_CFI_RULE_UNDEFINED;
  return root;
}

}  // namespace

Result<cfi::FdeSummary> find_interpreter_fde(const elf::ElfFile& file) {
  const elf::Symbol* anchor = file.find_symbol("lj_vm_asm_begin");
  // Only the FDEs that can be the interpreter's run their CFI programs.
  LJ_ASSIGN_OR_RETURN(std::vector<cfi::FdeSummary> fdes,
                      cfi::list_fdes_with_initial_cfa(
                          file, cfi::CfiSection::EhFrame, [&](const cfi::FdeSummary& f) {
                            return f.personality && f.pc_end - f.pc_begin >= kMinInterpreterBytes &&
                                   (anchor == nullptr || f.pc_begin == anchor->value);
                          }));
  std::vector<const cfi::FdeSummary*> candidates;
  for (const cfi::FdeSummary& f : fdes) {
    if (!f.initial_cfa || !is_vm_cfa(*f.initial_cfa, file.arch())) continue;
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
  for (const cfi::FdeSummary* f : candidates) {
    list +=
        fmt::format(" .eh_frame+{:#x} ({:#x}..{:#x})", f->section_offset, f->pc_begin, f->pc_end);
  }
  return make_error("{}: ambiguous LuaJIT interpreter FDE, {} candidates:{}", file.path(),
                    candidates.size(), list);
}

std::vector<cfi::Overlay> unwind_overlays(const elf::ElfFile& file,
                                          const std::optional<VmInterval>& vm,
                                          std::span<const disasm::Insn> vm_code) {
  std::vector<cfi::Overlay> out;
  if (vm && vm->begin < vm->end) out = vm_overlays(file, *vm, vm_code);
  for (uint64_t pc : find_coro_startup(file)) out.push_back(fiber_root(pc));
  return out;
}

UnwindOverlays unwind_overlays(const elf::ElfFile& file) {
  UnwindOverlays out;
  if (auto vm = find_vm_interval(file); vm.ok()) out.vm = std::move(*vm);
  out.overlays = unwind_overlays(file, out.vm);
  return out;
}

Result<cfi::UnwindTable> walker_table(const elf::ElfFile& file, cfi::TableCache* tables) {
  if (tables != nullptr) {
    if (std::optional<cfi::UnwindTable> cached = tables->load(file)) return std::move(*cached);
  }
  auto table = cfi::build_unwind_table(file, unwind_overlays(file).overlays);
  if (table.ok() && tables != nullptr) (void)tables->store(file, *table);
  return table;
}

Result<VmCframe> derive_vm_cframe(const cfi::UnwindTable& table, uint64_t vm_begin,
                                  uint64_t vm_end) {
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
  cfi::ArchRegs regs = cfi::arch_regs(c.arch);
  nlohmann::ordered_json j;
  j["vm_begin"] = fmt::format("{:#x}", c.vm_begin);
  j["vm_end"] = fmt::format("{:#x}", c.vm_end);
  const char* base = c.cfa_base == LJ_CFI_REG_SP ? regs.sp_name : regs.fp_name;
  j["cfa"] = fmt::format("{}{:+d}", base, c.cfa_offset);
  j["cfa_base"] = c.cfa_base == LJ_CFI_REG_SP ? "sp" : "fp";
  j["cfa_offset"] = c.cfa_offset;
  j["ra"] = cfi::rule_text(c.ra_rule, c.ra_offset, regs.ra_name);
  j["ra_offset"] = c.ra_offset;
  j["fp"] = cfi::rule_text(c.fp_rule, c.fp_offset, regs.fp_name);
  j["fp_offset"] = c.fp_offset;
  j["fde_offset"] = fmt::format("{:#x}", c.fde_section_offset);
  j["covered_bytes"] = c.covered_bytes;
  return j;
}

}  // namespace ljprof::luajit
