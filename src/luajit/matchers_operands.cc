// The operand views and data-flow helpers every matcher builds on (matchers_internal.h), and
// evidence_of (matchers.h).
#include "luajit/matchers.h"

#include <fmt/format.h>

#include <algorithm>

#include "luajit/matchers_internal.h"

namespace ljprof::luajit {

Evidence evidence_of(const Code& code, const Insn& insn, std::string role) {
  return Evidence{code.function, insn.address, hex_bytes(insn.byte_span()), insn.text,
                  std::move(role)};
}

namespace matchers_internal {

namespace {

bool caller_saved(const Code& c, int reg) {
  if (is_x86(c))
    return reg == 0 || reg == 1 || reg == 2 || reg == 6 || reg == 7 || (reg >= 8 && reg <= 11);
  return (reg >= 0 && reg <= 18) || reg == 30;
}

bool starts_with(const std::string& s, const char* prefix) {
  return s.rfind(prefix, 0) == 0;
}

}  // namespace

bool is_x86(const Code& c) {
  return c.arch == elf::Arch::X86_64;
}
int stack_reg(const Code& c) {
  return is_x86(c) ? kX86Rsp : kA64Sp;
}
int return_reg(const Code&) {
  return 0;
}
int arg0_reg(const Code& c) {
  return is_x86(c) ? kX86Rdi : 0;
}

bool plain_mem(const Operand& m) {
  return m.kind == Kind::Mem && m.base != kNoReg && m.index == kNoReg;
}

std::optional<LoadView> as_load(const Code& c, const Insn& i) {
  if (i.op_count != 2 || i.ops[0].kind != Kind::Reg || !plain_mem(i.ops[1])) return std::nullopt;
  if (is_x86(c) ? i.kind != InsnKind::Mov : i.kind != InsnKind::Load) return std::nullopt;
  if (i.ops[0].reg == kNoReg) return std::nullopt;
  return LoadView{i.ops[0].reg, i.ops[1].base, i.ops[1].disp,
                  is_x86(c) ? i.ops[0].size : i.access_size};
}

std::optional<StoreView> as_store(const Code& c, const Insn& i) {
  if (i.op_count != 2) return std::nullopt;
  StoreView s;
  if (is_x86(c)) {
    if (i.kind != InsnKind::Mov || !plain_mem(i.ops[0])) return std::nullopt;
    const Operand& src = i.ops[1];
    if (src.kind == Kind::Imm) {
      s.is_imm = true;
      s.imm = src.imm;
    } else if (src.kind == Kind::Reg && src.reg != kNoReg) {
      s.src = src.reg;
    } else {
      return std::nullopt;
    }
    s.base = i.ops[0].base;
    s.disp = i.ops[0].disp;
    s.size = i.ops[0].size;
    return s;
  }
  if (i.kind != InsnKind::Store || i.ops[0].kind != Kind::Reg || !plain_mem(i.ops[1])) {
    return std::nullopt;
  }
  if (i.ops[0].reg == kA64Zr) {
    s.is_imm = true;
    s.imm = 0;
  } else if (i.ops[0].reg != kNoReg) {
    s.src = i.ops[0].reg;
  } else {
    return std::nullopt;
  }
  s.base = i.ops[1].base;
  s.disp = i.ops[1].disp;
  s.size = i.access_size;
  return s;
}

std::optional<AddImmView> as_add_imm(const Code& c, const Insn& i) {
  if (is_x86(c)) {
    if (i.kind == InsnKind::Add && i.op_count == 2 && i.ops[0].kind == Kind::Reg &&
        i.ops[0].size == 8 && i.ops[1].kind == Kind::Imm) {
      return AddImmView{i.ops[0].reg, i.ops[0].reg, i.ops[1].imm};
    }
    if (i.kind == InsnKind::Lea && i.op_count == 2 && i.ops[0].kind == Kind::Reg &&
        i.ops[0].size == 8 && plain_mem(i.ops[1]) && i.ops[1].base != kX86Rip) {
      return AddImmView{i.ops[0].reg, i.ops[1].base, i.ops[1].disp};
    }
    return std::nullopt;
  }
  if (i.kind == InsnKind::Add && i.op_count == 3 && i.ops[0].kind == Kind::Reg &&
      i.ops[0].size == 8 && i.ops[1].kind == Kind::Reg && i.ops[2].kind == Kind::Imm &&
      (i.ops[2].shift == 0 || i.ops[2].shift == 12)) {
    return AddImmView{i.ops[0].reg, i.ops[1].reg, i.ops[2].imm << i.ops[2].shift};
  }
  return std::nullopt;
}

bool writes_reg(const Code& c, const Insn& i, int reg) {
  switch (i.kind) {
    case InsnKind::Gap:
      return true;
    case InsnKind::Store:
    case InsnKind::StorePair:
    case InsnKind::Compare:
    case InsnKind::Push:
    case InsnKind::Branch:
    case InsnKind::Jump:
    case InsnKind::JumpIndirect:
    case InsnKind::Ret:
      return false;
    case InsnKind::CallDirect:
    case InsnKind::CallIndirect:
      return caller_saved(c, reg);
    case InsnKind::LoadPair:
      return i.op_count >= 2 && (i.ops[0].is_reg(reg) || i.ops[1].is_reg(reg));
    default:
      break;
  }
  if (is_x86(c) && i.kind == InsnKind::Mov && i.op_count == 2 && i.ops[0].kind == Kind::Mem) {
    return false;
  }
  return i.op_count > 0 && i.ops[0].is_reg(reg);
}

size_t window_end(const Code& c, size_t from, size_t len) {
  const size_t limit = std::min(c.insns.size(), from + len);
  for (size_t i = from; i < limit; ++i) {
    if (c.insns[i].kind == InsnKind::Gap) return i;
  }
  return limit;
}

size_t window_begin(const Code& c, size_t at, size_t len) {
  const size_t lo = at > len ? at - len : 0;
  for (size_t i = at; i-- > lo;) {
    if (c.insns[i].kind == InsnKind::Gap) return i + 1;
  }
  return lo;
}

std::optional<int64_t> const_before(const Code& c, size_t at, int reg, size_t window) {
  const size_t lo = window_begin(c, at, window);
  for (size_t j = at; j-- > lo;) {
    const Insn& i = c.insns[j];
    if (!writes_reg(c, i, reg)) continue;
    if (i.kind == InsnKind::Mov && i.op_count == 2 && i.ops[0].is_reg(reg) &&
        i.ops[1].kind == Kind::Imm) {
      return i.ops[1].imm;
    }
    if (is_x86(c) && starts_with(i.text, "xor") && i.op_count == 2 && i.ops[0].is_reg(reg) &&
        i.ops[1].is_reg(reg)) {
      return 0;
    }
    return std::nullopt;
  }
  return std::nullopt;
}

std::optional<int64_t> stored_value(const Code& c, size_t at, const StoreView& s) {
  if (s.is_imm) return s.imm;
  return const_before(c, at, s.src, 12);
}

bool is_state_value(int64_t v) {
  return v >= -16 && v <= -1;
}

bool dispatch_disp_ok(const Code& c, int64_t disp) {
  // x86-64: DISPATCH points at GG_State.dispatch, after global_State and jit_State, so every
  // global_State field is at a negative signed disp32. AArch64: GL is G itself.
  if (is_x86(c)) return disp < 0 && disp >= -0x10000;
  return disp >= 0 && disp < 0x10000;
}

std::string where(const Code& c, const Insn& i) {
  return fmt::format("{} at {:#x} ({})", c.function, i.address, i.text);
}

bool valid_base(const Code& c, int reg) {
  return reg != kNoReg && reg != stack_reg(c) && reg != kX86Rip && reg != kA64Zr;
}

}  // namespace matchers_internal

Result<DecodedFunction> decode_symbol(const elf::ElfFile& file, const char* name) {
  const elf::Symbol* sym = file.find_symbol(name);
  if (sym == nullptr) return make_error("{}: no symbol {}", file.path(), name);
  uint64_t len = sym->size ? sym->size : kUnsizedFunctionBytes;
  if (len > disasm::DisasmLimits::kMaxFunctionBytes) {
    return make_error("{}: {} is {} bytes, above the cap of {} (DisasmLimits::kMaxFunctionBytes)",
                      file.path(), name, len, disasm::DisasmLimits::kMaxFunctionBytes);
  }
  auto insns = disasm::disassemble_range(file, sym->value, len);
  if (!insns.ok()) {
    // An unsized symbol near the end of its segment: retry with what the segment holds.
    if (sym->size == 0) insns = disasm::disassemble_range(file, sym->value, 64);
    if (!insns.ok())
      return make_error("{}: cannot read {}: {}", file.path(), name, insns.message());
  }
  DecodedFunction f;
  f.arch = file.arch();
  f.name = name;
  f.insns = std::move(*insns);
  return f;
}

}  // namespace ljprof::luajit
