// Walker rows for the x86-64 start-up and shut-down glue that toolchains build without CFI:
// _init and _fini (glibc sysdeps/x86_64/crti.S and crtn.S: the .init and .fini sections) and
// crtstuff.c's __do_global_dtors_aux, frame_dummy and the (de)register_tm_clones they call (GCC
// builds crtstuff with -fno-asynchronous-unwind-tables; they are the .fini_array and
// .init_array entries of every executable and library). A process runs them at start and at
// exit, where a short-lived one spends a good share of its life (their first instruction takes
// the page fault that brings the section in). The rule is derived from the instructions, never
// assumed: the stack height is followed along every path from the function's entry, and any
// instruction whose effect on rsp or on the caller's rbp is not modelled, a path that leaves the
// code without CFI other than by a return or a tail jump at height 0, or two paths reaching one
// instruction at different heights leave the function without rows.
#include <elf.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "cfi/cfi.h"

namespace ljprof::cfi {

namespace {

using disasm::Insn;
using disasm::InsnKind;
using disasm::kX86Rbp;
using disasm::kX86Rsp;

// The frame at one instruction: `height` bytes below the return address (rsp = CFA - 8 -
// height); where the caller's rbp is saved (fp_off from the CFA; 0: still in rbp); the height
// at which rbp was made to point at the stack (mov rbp, rsp), -1 when it does not.
struct Height {
  int64_t height = 0;
  int32_t fp_off = 0;
  int64_t rbp_height = -1;
  bool operator==(const Height&) const = default;
};

// Caps: crtstuff's functions are a few dozen instructions; a gap bigger than this is not glue.
constexpr size_t kMaxGlueInsns = 512;
constexpr int64_t kMaxGlueHeight = 4096;

bool is_rsp(const disasm::Operand& op) {
  return op.is_reg64(kX86Rsp);
}
bool is_rbp(const disasm::Operand& op) {
  return op.is_reg64(kX86Rbp);
}

// The height after `insn` (not a control transfer), or why it is not modelled.
std::optional<std::string> step(const Insn& insn, Height* h) {
  const auto& op0 = insn.op(0);
  const auto& op1 = insn.op(1);
  switch (insn.kind) {
    case InsnKind::Push:
      if (op0.kind == disasm::Operand::Kind::Reg && op0.size != 8) return "a push of 2 bytes";
      h->height += 8;
      if (is_rbp(op0) && h->fp_off == 0) h->fp_off = static_cast<int32_t>(-(8 + h->height));
      return std::nullopt;
    case InsnKind::Pop:
      if (op0.kind != disasm::Operand::Kind::Reg || op0.size != 8) return "a pop into memory";
      if (is_rsp(op0)) return "pop rsp";
      if (is_rbp(op0)) {
        if (h->fp_off == -(8 + h->height)) {
          h->fp_off = 0;  // the caller's rbp, back from its slot
        } else if (h->fp_off == 0) {
          return "pop rbp over the caller's rbp";
        }
        h->rbp_height = -1;
      }
      h->height -= 8;
      return std::nullopt;
    case InsnKind::Sub:
    case InsnKind::Add:
      if (is_rsp(op0)) {
        if (op1.kind != disasm::Operand::Kind::Imm) return "rsp adjusted by a register";
        h->height += insn.kind == InsnKind::Sub ? op1.imm : -op1.imm;
        return std::nullopt;
      }
      break;
    case InsnKind::Mov:
      if (is_rbp(op0) && is_rsp(op1)) {
        if (h->fp_off == 0) return "mov rbp, rsp before the caller's rbp is saved";
        h->rbp_height = h->height;
        return std::nullopt;
      }
      if (is_rsp(op0) && is_rbp(op1)) {
        if (h->rbp_height < 0) return "mov rsp, rbp without a frame in rbp";
        h->height = h->rbp_height;
        return std::nullopt;
      }
      break;
    default:
      if (insn.text == "leave") {
        if (h->rbp_height < 0) return "leave without a frame in rbp";
        h->height = h->rbp_height;
        Insn pop{};
        pop.kind = InsnKind::Pop;
        pop.op_count = 1;
        pop.ops[0].kind = disasm::Operand::Kind::Reg;
        pop.ops[0].reg = kX86Rbp;
        pop.ops[0].size = 8;
        return step(pop, h);
      }
      break;
  }
  if (insn.kind == InsnKind::Gap) return "undecodable bytes";
  if (insn.may_write(kX86Rsp)) return "writes rsp";
  if (insn.may_write(kX86Rbp)) {
    if (h->fp_off == 0) return "writes the caller's rbp";
    h->rbp_height = -1;
  }
  return std::nullopt;
}

bool stops(const Insn& insn) {
  return insn.text == "hlt" || insn.text == "ud2" || insn.text == "int3";
}

}  // namespace

Result<std::map<uint64_t, GlueFrame>> x86_glue_frames(std::span<const Insn> code, uint64_t entry,
                                                      std::set<uint64_t>* calls) {
  std::map<uint64_t, size_t> at;  // instruction address -> index in code
  for (size_t i = 0; i < code.size(); ++i) at.emplace(code[i].address, i);
  const uint64_t end = code.empty() ? entry : code.back().end();
  std::map<uint64_t, Height> seen;
  std::vector<std::pair<uint64_t, Height>> work{{entry, Height{}}};
  auto fail = [](const Insn& insn, const std::string& why) {
    return make_error("{:#x} `{}`: {}", insn.address, insn.text, why);
  };
  while (!work.empty()) {
    auto [pc, h] = work.back();
    work.pop_back();
    auto it = at.find(pc);
    if (it == at.end()) return make_error("{:#x}: not an instruction of the code without CFI", pc);
    if (auto s = seen.find(pc); s != seen.end()) {
      if (s->second == h) continue;
      return fail(code[it->second], "reached at two stack heights");
    }
    if (seen.size() >= kMaxGlueInsns) return make_error("more than {} instructions", kMaxGlueInsns);
    seen.emplace(pc, h);
    const Insn& insn = code[it->second];
    const bool at_return = h.height == 0 && h.fp_off == 0;
    const auto target = [&]() -> std::optional<uint64_t> {
      if (insn.op_count == 0 || insn.op(0).kind != disasm::Operand::Kind::Imm) return {};
      return static_cast<uint64_t>(insn.op(0).imm);
    };
    switch (insn.kind) {
      case InsnKind::Ret:
        if (!at_return) return fail(insn, "returns with the stack not back at its entry height");
        continue;
      case InsnKind::JumpIndirect:
        if (!at_return) return fail(insn, "an indirect jump inside the frame");
        continue;
      case InsnKind::Jump:
      case InsnKind::Branch: {
        const std::optional<uint64_t> to = target();
        if (!to) return fail(insn, "a jump to a computed address");
        if (*to >= entry && *to < end) {
          work.emplace_back(*to, h);
        } else if (insn.kind == InsnKind::Branch || !at_return) {
          return fail(insn, "leaves the code without CFI inside the frame");
        }
        if (insn.kind == InsnKind::Branch) work.emplace_back(insn.end(), h);
        continue;
      }
      case InsnKind::CallDirect:
        if (const std::optional<uint64_t> to = target(); to && calls != nullptr) calls->insert(*to);
        work.emplace_back(insn.end(), h);  // a call returns with rsp and rbp as they were
        continue;
      case InsnKind::CallIndirect:
        work.emplace_back(insn.end(), h);
        continue;
      default:
        break;
    }
    if (stops(insn)) continue;
    if (std::optional<std::string> why = step(insn, &h)) return fail(insn, *why);
    if (h.height < 0 || h.height > kMaxGlueHeight || h.height % 8 != 0) {
      return fail(insn, fmt::format("stack height {}", h.height));
    }
    work.emplace_back(insn.end(), h);
  }
  std::map<uint64_t, GlueFrame> out;
  for (const auto& [pc, h] : seen) out.emplace(pc, GlueFrame{h.height, h.fp_off});
  return out;
}

namespace {

// The entry points of the file's glue: .init, .fini and the .init_array/.fini_array entries.
std::vector<std::pair<uint64_t, std::string>> glue_entries(const elf::ElfFile& file) {
  std::vector<std::pair<uint64_t, std::string>> out;
  for (const char* name : {".init", ".fini"}) {
    if (const elf::Section* s = file.section(name); s != nullptr && s->size != 0) {
      out.emplace_back(s->addr, name);
    }
  }
  for (const char* name : {".init_array", ".fini_array"}) {
    const elf::Section* s = file.section(name);
    if (s == nullptr || !s->has_file_data()) continue;
    std::span<const uint8_t> data = file.section_data(*s);
    for (size_t off = 0; off + 8 <= data.size() && off < 64 * 8; off += 8) {
      uint64_t fn = 0;
      std::memcpy(&fn, data.data() + off, 8);
      if (fn != 0) out.emplace_back(fn, fmt::format("{}[{}]", name, off / 8));
    }
  }
  return out;
}

// The executable section holding `pc`, or null.
const elf::Section* code_section(const elf::ElfFile& file, uint64_t pc) {
  for (const elf::Section& s : file.sections()) {
    if ((s.flags & SHF_EXECINSTR) != 0 && s.has_file_data() && pc >= s.addr &&
        pc - s.addr < s.size) {
      return &s;
    }
  }
  return nullptr;
}

}  // namespace

GlueOverlays x86_glue_overlays(const elf::ElfFile& file, std::span<const FunctionSpan> fdes) {
  GlueOverlays out;
  if (file.arch() != elf::Arch::X86_64) return out;
  std::vector<std::pair<uint64_t, std::string>> todo = glue_entries(file);
  std::set<uint64_t> done;
  for (size_t k = 0; k < todo.size() && k < 64; ++k) {
    const auto [entry, name] = todo[k];
    if (!done.insert(entry).second || entry == file.entry()) continue;
    // Code without CFI only: from the entry to the next FDE or the section's end.
    auto next = std::upper_bound(fdes.begin(), fdes.end(), entry,
                                 [](uint64_t pc, const FunctionSpan& f) { return pc < f.begin; });
    if (next != fdes.begin() && entry < std::prev(next)->end) continue;
    const elf::Section* s = code_section(file, entry);
    if (s == nullptr) continue;
    uint64_t end = s->addr + s->size;
    if (next != fdes.end()) end = std::min(end, next->begin);
    if (end - entry > disasm::DisasmLimits::kMaxFunctionBytes) {
      out.rejected.push_back(fmt::format("{} ({:#x}): more than {} bytes without CFI", name, entry,
                                         disasm::DisasmLimits::kMaxFunctionBytes));
      continue;
    }
    auto code = disasm::disassemble_range(file, entry, end - entry);
    if (!code.ok()) {
      out.rejected.push_back(fmt::format("{} ({:#x}): {}", name, entry, code.message()));
      continue;
    }
    std::set<uint64_t> calls;
    auto frames = x86_glue_frames(*code, entry, &calls);
    if (!frames.ok()) {
      out.rejected.push_back(fmt::format("{} ({:#x}): {}", name, entry, frames.message()));
      continue;
    }
    for (uint64_t c : calls) todo.emplace_back(c, fmt::format("called from {}", name));
    std::map<uint64_t, const Insn*> by_address;
    for (const Insn& insn : *code) by_address.emplace(insn.address, &insn);
    for (const auto& [pc, f] : *frames) {
      const lj_cfi_row row =
          sp_row(static_cast<int32_t>(8 + f.height),
                 f.fp_off != 0 ? LJ_CFI_RULE_AT_CFA : LJ_CFI_RULE_SAME, f.fp_off, LJ_CFI_OK);
      out.overlays.push_back(
          Overlay{pc, by_address.at(pc)->end(),
                  fmt::format("{} without CFI: {} bytes below its return address", name, f.height),
                  "stack height along every path from its entry", row, Overlay::Kind::Replace});
    }
  }
  return out;
}

}  // namespace ljprof::cfi
