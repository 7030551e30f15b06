#include "disasm/disasm.h"

#include <capstone/capstone.h>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstring>

namespace ljprof::disasm {

namespace {

constexpr uint64_t kAllRegisters = ~uint64_t{0};

// Parses the decimal register number after a one-letter prefix ("r12d" -> 12, rest "d").
int register_number(const char* digits, const char** rest) {
  int n = 0;
  const char* p = digits;
  while (std::isdigit(static_cast<unsigned char>(*p))) n = n * 10 + (*p++ - '0');
  *rest = p;
  return n;
}

// Canonical number of a register from its Capstone name. Parsing the name (rather than
// listing Capstone's enum) keeps every width of one register on one number.
int canonical_x86(const char* name) {
  static constexpr const char* kFamilies[8][5] = {
      {"rax", "eax", "ax", "al", "ah"},     {"rcx", "ecx", "cx", "cl", "ch"},
      {"rdx", "edx", "dx", "dl", "dh"},     {"rbx", "ebx", "bx", "bl", "bh"},
      {"rsp", "esp", "sp", "spl", nullptr}, {"rbp", "ebp", "bp", "bpl", nullptr},
      {"rsi", "esi", "si", "sil", nullptr}, {"rdi", "edi", "di", "dil", nullptr}};
  if (name == nullptr) return kNoReg;
  for (int i = 0; i < 8; ++i) {
    for (const char* alias : kFamilies[i]) {
      if (alias != nullptr && std::strcmp(alias, name) == 0) return i;
    }
  }
  if (std::strcmp(name, "rip") == 0 || std::strcmp(name, "eip") == 0) return kX86Rip;
  if (name[0] == 'r' && std::isdigit(static_cast<unsigned char>(name[1]))) {
    const char* p = nullptr;
    const int n = register_number(name + 1, &p);
    if (n >= 8 && n <= 15 && (*p == 0 || ((*p == 'd' || *p == 'w' || *p == 'b') && p[1] == 0))) {
      return n;
    }
  }
  return kNoReg;
}

// FP/SIMD registers are not tracked, but their width matters for ldr/str access sizes.
uint8_t a64_fp_width(char prefix) {
  switch (prefix) {
    case 'b':
      return 1;
    case 'h':
      return 2;
    case 's':
      return 4;
    case 'd':
      return 8;
    case 'q':
      return 16;
    default:
      return 0;
  }
}

int canonical_a64(const char* name, uint8_t* width) {
  *width = 0;
  if (name == nullptr) return kNoReg;
  if (std::strcmp(name, "sp") == 0) return *width = 8, kA64Sp;
  if (std::strcmp(name, "wsp") == 0) return *width = 4, kA64Sp;
  if (std::strcmp(name, "xzr") == 0) return *width = 8, kA64Zr;
  if (std::strcmp(name, "wzr") == 0) return *width = 4, kA64Zr;
  if (std::strcmp(name, "fp") == 0) return *width = 8, kA64Fp;
  if (std::strcmp(name, "lr") == 0) return *width = 8, kA64Lr;
  if ((name[0] == 'x' || name[0] == 'w') && std::isdigit(static_cast<unsigned char>(name[1]))) {
    const char* p = nullptr;
    const int n = register_number(name + 1, &p);
    if (*p == 0 && n <= 30) {
      *width = name[0] == 'x' ? 8 : 4;
      return n;
    }
  }
  *width = a64_fp_width(name[0]);
  return kNoReg;
}

int64_t sign_extend(int64_t value, uint8_t size) {
  switch (size) {
    case 1:
      return static_cast<int8_t>(value);
    case 2:
      return static_cast<int16_t>(value);
    case 4:
      return static_cast<int32_t>(value);
    default:
      return value;
  }
}

bool is_control_group(csh handle, const cs_insn& ci) {
  return cs_insn_group(handle, &ci, CS_GRP_JUMP) || cs_insn_group(handle, &ci, CS_GRP_CALL) ||
         cs_insn_group(handle, &ci, CS_GRP_RET);
}

int x86_reg(csh handle, unsigned reg) {
  return reg == X86_REG_INVALID ? kNoReg : canonical_x86(cs_reg_name(handle, reg));
}

void convert_x86_operands(csh handle, const cs_x86& x, Insn& out) {
  out.op_count = static_cast<uint8_t>(std::min<int>(x.op_count, 4));
  for (int i = 0; i < out.op_count; ++i) {
    const cs_x86_op& o = x.operands[i];
    Operand& op = out.ops[i];
    op.size = o.size;
    switch (o.type) {
      case X86_OP_REG:
        op.kind = Operand::Kind::Reg;
        op.reg = x86_reg(handle, o.reg);
        break;
      case X86_OP_IMM:
        op.kind = Operand::Kind::Imm;
        op.imm = sign_extend(o.imm, o.size);
        break;
      case X86_OP_MEM:
        op.kind = Operand::Kind::Mem;
        op.base = x86_reg(handle, o.mem.base);
        op.index = x86_reg(handle, o.mem.index);
        op.scale = o.mem.scale;
        op.disp = o.mem.disp;
        break;
      default:
        break;
    }
  }
}

InsnKind x86_kind(csh handle, const cs_insn& ci, const Insn& out) {
  const bool first_imm = out.op_count > 0 && out.ops[0].kind == Operand::Kind::Imm;
  switch (ci.id) {
    case X86_INS_MOV:
    case X86_INS_MOVABS:
      return InsnKind::Mov;
    case X86_INS_ADD:
      return InsnKind::Add;
    case X86_INS_SUB:
      return InsnKind::Sub;
    case X86_INS_AND:
      return InsnKind::And;
    case X86_INS_NEG:
      return InsnKind::Neg;
    case X86_INS_LEA:
      return InsnKind::Lea;
    case X86_INS_SAR:
    case X86_INS_SHR:
    case X86_INS_SHL:
      return InsnKind::Shift;
    case X86_INS_CMP:
    case X86_INS_TEST:
      return InsnKind::Compare;
    case X86_INS_PUSH:
      return InsnKind::Push;
    case X86_INS_POP:
      return InsnKind::Pop;
    case X86_INS_CALL:
      return first_imm ? InsnKind::CallDirect : InsnKind::CallIndirect;
    case X86_INS_JMP:
      return first_imm ? InsnKind::Jump : InsnKind::JumpIndirect;
    case X86_INS_RET:
      return InsnKind::Ret;
    default:
      return is_control_group(handle, ci) ? InsnKind::Branch : InsnKind::Other;
  }
}

// The registers an x86-64 instruction writes, from Capstone's access lists (which include the
// implicit ones: div writes rdx, cpuid writes rbx, ...).
uint64_t x86_writes(csh handle, const cs_insn& ci) {
  cs_regs read, written;
  uint8_t nread = 0, nwritten = 0;
  if (cs_regs_access(handle, &ci, read, &nread, written, &nwritten) != CS_ERR_OK) {
    return kAllRegisters;
  }
  uint64_t mask = 0;
  for (uint8_t k = 0; k < nwritten; ++k) {
    const int reg = x86_reg(handle, written[k]);
    if (reg != kNoReg) mask |= uint64_t{1} << reg;
  }
  return mask;
}

void convert_x86(csh handle, const cs_insn& ci, Insn& out) {
  convert_x86_operands(handle, ci.detail->x86, out);
  out.kind = x86_kind(handle, ci, out);
  if (out.kind == InsnKind::Mov && out.op_count == 2) out.access_size = out.ops[0].size;
  out.writes = x86_writes(handle, ci);
}

uint8_t a64_shift(const cs_arm64_op& o) {
  return o.shift.type == ARM64_SFT_INVALID ? 0 : static_cast<uint8_t>(o.shift.value);
}

int a64_reg(csh handle, unsigned reg) {
  uint8_t width = 0;
  return reg == ARM64_REG_INVALID ? kNoReg : canonical_a64(cs_reg_name(handle, reg), &width);
}

// Returns the width of the first operand's register (FP/SIMD registers included), the access
// size of loads and stores.
uint8_t convert_a64_operands(csh handle, const cs_arm64& a, Insn& out) {
  out.op_count = static_cast<uint8_t>(std::min<int>(a.op_count, 4));
  uint8_t first_width = 0;
  for (int i = 0; i < out.op_count; ++i) {
    const cs_arm64_op& o = a.operands[i];
    Operand& op = out.ops[i];
    switch (o.type) {
      case ARM64_OP_REG:
        op.kind = Operand::Kind::Reg;
        op.reg = canonical_a64(cs_reg_name(handle, o.reg), &op.size);
        op.shift = a64_shift(o);
        op.ext = static_cast<uint8_t>(o.ext);
        if (i == 0) canonical_a64(cs_reg_name(handle, o.reg), &first_width);
        break;
      case ARM64_OP_IMM:
      case ARM64_OP_CIMM:
        op.kind = Operand::Kind::Imm;
        op.imm = o.imm;
        op.shift = a64_shift(o);
        break;
      case ARM64_OP_MEM:
        op.kind = Operand::Kind::Mem;
        op.base = a64_reg(handle, o.mem.base);
        op.index = a64_reg(handle, o.mem.index);
        op.disp = o.mem.disp;
        op.shift = a64_shift(o);
        break;
      default:
        break;  // system operands: not tracked
    }
  }
  return first_width;
}

bool imm_without_shift(const Insn& out) {
  return out.op_count == 2 && out.ops[1].kind == Operand::Kind::Imm && out.ops[1].shift == 0;
}

// Moves of a constant: movz only without a shift (a shifted one is not a plain small constant);
// movn wd, #imm == mov wd, #~imm, normalised to a Mov of the value it produces.
InsnKind a64_move_wide(unsigned id, Insn& out) {
  if (!imm_without_shift(out)) return InsnKind::Other;
  if (id == ARM64_INS_MOVN) {
    out.ops[1].imm = out.ops[0].size == 4 ? static_cast<int32_t>(~out.ops[1].imm) : ~out.ops[1].imm;
  }
  return InsnKind::Mov;
}

// Loads and stores, with the bytes they move per register.
InsnKind a64_memory_kind(unsigned id, uint8_t first_width, uint8_t* access_size) {
  switch (id) {
    case ARM64_INS_LDR:
    case ARM64_INS_LDUR:
      return *access_size = first_width, InsnKind::Load;
    case ARM64_INS_LDRB:
    case ARM64_INS_LDURB:
      return *access_size = 1, InsnKind::Load;
    case ARM64_INS_LDRH:
    case ARM64_INS_LDURH:
      return *access_size = 2, InsnKind::Load;
    case ARM64_INS_STR:
    case ARM64_INS_STUR:
      return *access_size = first_width, InsnKind::Store;
    case ARM64_INS_STRB:
    case ARM64_INS_STURB:
      return *access_size = 1, InsnKind::Store;
    case ARM64_INS_STRH:
    case ARM64_INS_STURH:
      return *access_size = 2, InsnKind::Store;
    case ARM64_INS_LDP:
      return *access_size = first_width, InsnKind::LoadPair;
    case ARM64_INS_STP:
      return *access_size = first_width, InsnKind::StorePair;
    default:
      return InsnKind::Other;
  }
}

InsnKind a64_kind(csh handle, const cs_insn& ci, Insn& out) {
  switch (ci.id) {
    case ARM64_INS_MOV:
      return InsnKind::Mov;
    case ARM64_INS_MOVZ:
    case ARM64_INS_MOVN:
      return a64_move_wide(ci.id, out);
    case ARM64_INS_ADD:
      return InsnKind::Add;
    case ARM64_INS_SUB:
      return InsnKind::Sub;
    case ARM64_INS_AND:
      return InsnKind::And;
    case ARM64_INS_NEG:
      return InsnKind::Neg;
    case ARM64_INS_ASR:
    case ARM64_INS_LSR:
    case ARM64_INS_LSL:
      return InsnKind::Shift;
    case ARM64_INS_CMP:
    case ARM64_INS_CMN:
    case ARM64_INS_TST:
      return InsnKind::Compare;
    case ARM64_INS_BL:
      return InsnKind::CallDirect;
    case ARM64_INS_BLR:
      return InsnKind::CallIndirect;
    case ARM64_INS_B:  // b.cond is the same id with a condition code
      return ci.detail->arm64.cc == ARM64_CC_INVALID ? InsnKind::Jump : InsnKind::Branch;
    case ARM64_INS_BR:
      return InsnKind::JumpIndirect;
    case ARM64_INS_RET:
      return InsnKind::Ret;
    default:
      return is_control_group(handle, ci) ? InsnKind::Branch : InsnKind::Other;
  }
}

bool is_memory_access(InsnKind kind) {
  return kind == InsnKind::Load || kind == InsnKind::Store || kind == InsnKind::LoadPair ||
         kind == InsnKind::StorePair;
}

void convert_a64(csh handle, const cs_insn& ci, Insn& out) {
  const cs_arm64& a = ci.detail->arm64;
  const uint8_t first_width = convert_a64_operands(handle, a, out);
  out.kind = a64_memory_kind(ci.id, first_width, &out.access_size);
  if (out.kind == InsnKind::Other) out.kind = a64_kind(handle, ci, out);
  // A writeback (pre/post-index) access changes its base register: patterns must not treat
  // it as a plain [base + disp] access.
  if (a.writeback && is_memory_access(out.kind)) out.kind = InsnKind::Other;
  out.writes = kAllRegisters;
}

struct Handle {
  csh h = 0;
  bool ok = false;
  explicit Handle(elf::Arch arch) {
    cs_err err = arch == elf::Arch::X86_64 ? cs_open(CS_ARCH_X86, CS_MODE_64, &h)
                                           : cs_open(CS_ARCH_ARM64, CS_MODE_ARM, &h);
    ok = err == CS_ERR_OK;
    if (ok) cs_option(h, CS_OPT_DETAIL, CS_OPT_ON);
  }
  ~Handle() {
    if (ok) cs_close(&h);
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
};

Insn decoded(elf::Arch arch, csh handle, const cs_insn& ci) {
  Insn insn;
  insn.address = ci.address;
  insn.size = static_cast<uint8_t>(std::min<size_t>(ci.size, insn.bytes.size()));
  std::memcpy(insn.bytes.data(), ci.bytes, insn.size);
  insn.text = std::string(ci.mnemonic) + (ci.op_str[0] ? " " : "") + ci.op_str;
  if (arch == elf::Arch::X86_64) {
    convert_x86(handle, ci, insn);
  } else {
    convert_a64(handle, ci, insn);
  }
  return insn;
}

// One undecodable unit: a byte on x86-64 (the next byte may start a valid instruction), an
// instruction slot on AArch64 (fixed 4-byte encoding), or what is left of the input.
Insn gap(elf::Arch arch, const uint8_t* p, size_t left, uint64_t pc) {
  Insn insn;
  insn.address = pc;
  insn.size = static_cast<uint8_t>(std::min<size_t>(left, arch == elf::Arch::X86_64 ? 1 : 4));
  std::memcpy(insn.bytes.data(), p, insn.size);
  insn.kind = InsnKind::Gap;
  insn.writes = kAllRegisters;
  insn.text = "(bad)";  // what objdump prints there
  return insn;
}

}  // namespace

Result<std::vector<Insn>> disassemble(elf::Arch arch, std::span<const uint8_t> code,
                                      uint64_t address) {
  if (code.size() > DisasmLimits::kMaxBytes) {
    return make_error(
        "disassemble {:#x}: {} bytes exceed the cap of {} bytes (DisasmLimits::"
        "kMaxBytes)",
        address, code.size(), DisasmLimits::kMaxBytes);
  }
  Handle handle(arch);
  if (!handle.ok) return make_error("capstone: cannot open a {} handle", elf::arch_name(arch));
  cs_insn* ci = cs_malloc(handle.h);
  if (ci == nullptr) return make_error("capstone: cs_malloc failed");
  std::vector<Insn> out;
  out.reserve(std::min<size_t>(code.size() / 4 + 16, DisasmLimits::kMaxInsns + 1));
  const uint8_t* p = code.data();
  size_t left = code.size();
  uint64_t pc = address;
  while (left > 0 && out.size() <= DisasmLimits::kMaxInsns) {
    if (cs_disasm_iter(handle.h, &p, &left, &pc, ci)) {
      out.push_back(decoded(arch, handle.h, *ci));
      continue;
    }
    out.push_back(gap(arch, p, left, pc));
    p += out.back().size;
    left -= out.back().size;
    pc += out.back().size;
  }
  cs_free(ci, 1);
  if (out.size() > DisasmLimits::kMaxInsns) {
    return make_error(
        "disassemble {:#x}: more than {} instructions in {} bytes (DisasmLimits::"
        "kMaxInsns), stopped at {:#x}",
        address, DisasmLimits::kMaxInsns, code.size(), out.back().address);
  }
  return out;
}

Result<std::vector<Insn>> disassemble_range(const elf::ElfFile& file, uint64_t address,
                                            uint64_t len) {
  if (len > DisasmLimits::kMaxBytes) {
    return make_error(
        "{}: code range {:#x}+{:#x} exceeds the cap of {} bytes (DisasmLimits::"
        "kMaxBytes)",
        file.path(), address, len, DisasmLimits::kMaxBytes);
  }
  LJ_ASSIGN_OR_RETURN(std::span<const uint8_t> bytes, file.read(address, len));
  auto insns = disassemble(file.arch(), bytes, address);
  if (!insns.ok()) return make_error("{}: {}", file.path(), insns.message());
  return insns;
}

std::string register_name(elf::Arch arch, int reg) {
  if (arch == elf::Arch::X86_64) {
    static constexpr const char* kNames[] = {"rax", "rcx", "rdx", "rbx", "rsp", "rbp",
                                             "rsi", "rdi", "r8",  "r9",  "r10", "r11",
                                             "r12", "r13", "r14", "r15", "rip"};
    if (reg >= 0 && reg <= kX86Rip) return kNames[reg];
    return "?";
  }
  if (reg >= 0 && reg <= kA64Lr) return fmt::format("x{}", reg);
  if (reg == kA64Zr) return "xzr";
  if (reg == kA64Sp) return "sp";
  return "?";
}

std::string hex_bytes(std::span<const uint8_t> bytes) {
  std::string s;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (i) s += ' ';
    s += fmt::format("{:02x}", bytes[i]);
  }
  return s;
}

}  // namespace ljprof::disasm
