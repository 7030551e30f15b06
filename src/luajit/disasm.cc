#include "luajit/disasm.h"

#include <capstone/capstone.h>
#include <fmt/format.h>

#include <cctype>
#include <cstring>

namespace ljprof::luajit {

namespace {

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
    int n = 0;
    const char* p = name + 1;
    while (std::isdigit(static_cast<unsigned char>(*p))) n = n * 10 + (*p++ - '0');
    if (n >= 8 && n <= 15 && (*p == 0 || ((*p == 'd' || *p == 'w' || *p == 'b') && p[1] == 0))) {
      return n;
    }
  }
  return kNoReg;
}

int canonical_a64(const char* name, uint8_t* width) {
  *width = 0;
  if (name == nullptr) return kNoReg;
  if (std::strcmp(name, "sp") == 0) return *width = 8, kA64Sp;
  if (std::strcmp(name, "wsp") == 0) return *width = 4, kA64Sp;
  if (std::strcmp(name, "xzr") == 0) return *width = 8, kA64Zr;
  if (std::strcmp(name, "wzr") == 0) return *width = 4, kA64Zr;
  if (std::strcmp(name, "fp") == 0) return *width = 8, 29;
  if (std::strcmp(name, "lr") == 0) return *width = 8, 30;
  if ((name[0] == 'x' || name[0] == 'w') && std::isdigit(static_cast<unsigned char>(name[1]))) {
    int n = 0;
    const char* p = name + 1;
    while (std::isdigit(static_cast<unsigned char>(*p))) n = n * 10 + (*p++ - '0');
    if (*p == 0 && n <= 30) {
      *width = name[0] == 'x' ? 8 : 4;
      return n;
    }
  }
  // FP/SIMD registers: not tracked, but their width matters for ldr/str access sizes.
  switch (name[0]) {
    case 'b':
      *width = 1;
      break;
    case 'h':
      *width = 2;
      break;
    case 's':
      *width = 4;
      break;
    case 'd':
      *width = 8;
      break;
    case 'q':
      *width = 16;
      break;
    default:
      break;
  }
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

void convert_x86(csh handle, const cs_insn& ci, Insn& out) {
  const cs_x86& x = ci.detail->x86;
  out.op_count = static_cast<uint8_t>(std::min<int>(x.op_count, 4));
  for (int i = 0; i < out.op_count; ++i) {
    const cs_x86_op& o = x.operands[i];
    Operand& op = out.ops[i];
    op.size = o.size;
    switch (o.type) {
      case X86_OP_REG:
        op.kind = Operand::Kind::Reg;
        op.reg = canonical_x86(cs_reg_name(handle, o.reg));
        break;
      case X86_OP_IMM:
        op.kind = Operand::Kind::Imm;
        op.imm = sign_extend(o.imm, o.size);
        break;
      case X86_OP_MEM:
        op.kind = Operand::Kind::Mem;
        op.base =
            o.mem.base == X86_REG_INVALID ? kNoReg : canonical_x86(cs_reg_name(handle, o.mem.base));
        op.index = o.mem.index == X86_REG_INVALID ? kNoReg
                                                  : canonical_x86(cs_reg_name(handle, o.mem.index));
        op.scale = o.mem.scale;
        op.disp = o.mem.disp;
        break;
      default:
        break;
    }
  }
  const bool first_imm = out.op_count > 0 && out.ops[0].kind == Operand::Kind::Imm;
  switch (ci.id) {
    case X86_INS_MOV:
    case X86_INS_MOVABS:
      out.kind = InsnKind::Mov;
      if (out.op_count == 2) out.access_size = out.ops[0].size;
      break;
    case X86_INS_ADD:
      out.kind = InsnKind::Add;
      break;
    case X86_INS_SUB:
      out.kind = InsnKind::Sub;
      break;
    case X86_INS_AND:
      out.kind = InsnKind::And;
      break;
    case X86_INS_LEA:
      out.kind = InsnKind::Lea;
      break;
    case X86_INS_SAR:
    case X86_INS_SHR:
    case X86_INS_SHL:
      out.kind = InsnKind::Shift;
      break;
    case X86_INS_CALL:
      out.kind = first_imm ? InsnKind::CallDirect : InsnKind::CallIndirect;
      break;
    case X86_INS_JMP:
      out.kind = first_imm ? InsnKind::Branch : InsnKind::JumpIndirect;
      break;
    case X86_INS_RET:
      out.kind = InsnKind::Ret;
      break;
    default:
      if (cs_insn_group(handle, &ci, CS_GRP_JUMP) || cs_insn_group(handle, &ci, CS_GRP_CALL) ||
          cs_insn_group(handle, &ci, CS_GRP_RET)) {
        out.kind = InsnKind::Branch;
      }
      break;
  }
}

void convert_a64(csh handle, const cs_insn& ci, Insn& out) {
  const cs_arm64& a = ci.detail->arm64;
  out.op_count = static_cast<uint8_t>(std::min<int>(a.op_count, 4));
  uint8_t first_width = 0;
  for (int i = 0; i < out.op_count; ++i) {
    const cs_arm64_op& o = a.operands[i];
    Operand& op = out.ops[i];
    switch (o.type) {
      case ARM64_OP_REG: {
        op.kind = Operand::Kind::Reg;
        op.reg = canonical_a64(cs_reg_name(handle, o.reg), &op.size);
        op.shift = o.shift.type == ARM64_SFT_INVALID ? 0 : static_cast<uint8_t>(o.shift.value);
        op.ext = static_cast<uint8_t>(o.ext);
        break;
      }
      case ARM64_OP_IMM:
      case ARM64_OP_CIMM:
        op.kind = Operand::Kind::Imm;
        op.imm = o.imm;
        op.shift = o.shift.type == ARM64_SFT_INVALID ? 0 : static_cast<uint8_t>(o.shift.value);
        break;
      case ARM64_OP_MEM: {
        op.kind = Operand::Kind::Mem;
        uint8_t w = 0;
        op.base = o.mem.base == ARM64_REG_INVALID
                      ? kNoReg
                      : canonical_a64(cs_reg_name(handle, o.mem.base), &w);
        op.index = o.mem.index == ARM64_REG_INVALID
                       ? kNoReg
                       : canonical_a64(cs_reg_name(handle, o.mem.index), &w);
        op.disp = o.mem.disp;
        op.shift = o.shift.type == ARM64_SFT_INVALID ? 0 : static_cast<uint8_t>(o.shift.value);
        break;
      }
      default: {
        // FP registers and system operands: keep the width for access sizes only.
        break;
      }
    }
    if (i == 0 && o.type == ARM64_OP_REG) {
      canonical_a64(cs_reg_name(handle, o.reg), &first_width);
    }
  }
  switch (ci.id) {
    case ARM64_INS_MOV:
      out.kind = InsnKind::Mov;
      break;
    case ARM64_INS_MOVZ:
      // movz with a shift is not a plain small constant; keep it as Other unless shift 0.
      if (out.op_count == 2 && out.ops[1].kind == Operand::Kind::Imm && out.ops[1].shift == 0) {
        out.kind = InsnKind::Mov;
      }
      break;
    case ARM64_INS_MOVN:
      // movn wd, #imm == mov wd, #~imm. Normalise it to a Mov of the value it produces.
      if (out.op_count == 2 && out.ops[1].kind == Operand::Kind::Imm && out.ops[1].shift == 0) {
        out.kind = InsnKind::Mov;
        out.ops[1].imm =
            out.ops[0].size == 4 ? static_cast<int32_t>(~out.ops[1].imm) : ~out.ops[1].imm;
      }
      break;
    case ARM64_INS_LDR:
    case ARM64_INS_LDUR:
      out.kind = InsnKind::Load;
      out.access_size = first_width;
      break;
    case ARM64_INS_LDRB:
    case ARM64_INS_LDURB:
      out.kind = InsnKind::Load;
      out.access_size = 1;
      break;
    case ARM64_INS_LDRH:
    case ARM64_INS_LDURH:
      out.kind = InsnKind::Load;
      out.access_size = 2;
      break;
    case ARM64_INS_STR:
    case ARM64_INS_STUR:
      out.kind = InsnKind::Store;
      out.access_size = first_width;
      break;
    case ARM64_INS_STRB:
    case ARM64_INS_STURB:
      out.kind = InsnKind::Store;
      out.access_size = 1;
      break;
    case ARM64_INS_STRH:
    case ARM64_INS_STURH:
      out.kind = InsnKind::Store;
      out.access_size = 2;
      break;
    case ARM64_INS_LDP:
      out.kind = InsnKind::LoadPair;
      out.access_size = first_width;
      break;
    case ARM64_INS_STP:
      out.kind = InsnKind::StorePair;
      out.access_size = first_width;
      break;
    case ARM64_INS_ADD:
      out.kind = InsnKind::Add;
      break;
    case ARM64_INS_SUB:
      out.kind = InsnKind::Sub;
      break;
    case ARM64_INS_AND:
      out.kind = InsnKind::And;
      break;
    case ARM64_INS_ASR:
    case ARM64_INS_LSR:
    case ARM64_INS_LSL:
      out.kind = InsnKind::Shift;
      break;
    case ARM64_INS_BL:
      out.kind = InsnKind::CallDirect;
      break;
    case ARM64_INS_BLR:
      out.kind = InsnKind::CallIndirect;
      break;
    case ARM64_INS_BR:
      out.kind = InsnKind::JumpIndirect;
      break;
    case ARM64_INS_RET:
      out.kind = InsnKind::Ret;
      break;
    default:
      if (cs_insn_group(handle, &ci, CS_GRP_JUMP) || cs_insn_group(handle, &ci, CS_GRP_CALL) ||
          cs_insn_group(handle, &ci, CS_GRP_RET)) {
        out.kind = InsnKind::Branch;
      }
      break;
  }
  // A writeback (pre/post-index) access changes its base register: matchers must not treat
  // it as a plain [base + disp] access.
  if (a.writeback && (out.kind == InsnKind::Load || out.kind == InsnKind::Store ||
                      out.kind == InsnKind::LoadPair || out.kind == InsnKind::StorePair)) {
    out.kind = InsnKind::Other;
  }
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

}  // namespace

Result<std::vector<Insn>> disassemble(elf::Arch arch, std::span<const uint8_t> code,
                                      uint64_t address, size_t max_insns) {
  if (code.size() > DisasmLimits::kMaxVmBytes) {
    return make_error("disassemble {:#x}: {} bytes exceed the cap of {} bytes", address,
                      code.size(), DisasmLimits::kMaxVmBytes);
  }
  Handle handle(arch);
  if (!handle.ok) return make_error("capstone: cannot open a {} handle", elf::arch_name(arch));
  std::vector<Insn> out;
  cs_insn* ci = cs_malloc(handle.h);
  if (ci == nullptr) return make_error("capstone: cs_malloc failed");
  const uint8_t* p = code.data();
  size_t left = code.size();
  uint64_t pc = address;
  const size_t skip = arch == elf::Arch::X86_64 ? 1 : 4;
  while (left > 0 && out.size() < max_insns) {
    if (!cs_disasm_iter(handle.h, &p, &left, &pc, ci)) {
      size_t n = std::min(skip, left);
      p += n;
      left -= n;
      pc += n;
      continue;
    }
    Insn insn;
    insn.address = ci->address;
    insn.size = static_cast<uint8_t>(std::min<size_t>(ci->size, insn.bytes.size()));
    std::memcpy(insn.bytes.data(), ci->bytes, insn.size);
    insn.text = std::string(ci->mnemonic) + (ci->op_str[0] ? " " : "") + ci->op_str;
    if (arch == elf::Arch::X86_64) {
      convert_x86(handle.h, *ci, insn);
    } else {
      convert_a64(handle.h, *ci, insn);
    }
    out.push_back(std::move(insn));
  }
  cs_free(ci, 1);
  return out;
}

Result<std::vector<Insn>> disassemble_range(const elf::ElfFile& file, uint64_t address,
                                            uint64_t len) {
  if (len > DisasmLimits::kMaxVmBytes) {
    return make_error("{}: code range {:#x}+{:#x} exceeds the cap of {} bytes", file.path(),
                      address, len, DisasmLimits::kMaxVmBytes);
  }
  LJ_ASSIGN_OR_RETURN(std::span<const uint8_t> bytes, file.read(address, len));
  return disassemble(file.arch(), bytes, address);
}

std::string register_name(elf::Arch arch, int reg) {
  if (arch == elf::Arch::X86_64) {
    static constexpr const char* kNames[] = {"rax", "rcx", "rdx", "rbx", "rsp", "rbp",
                                             "rsi", "rdi", "r8",  "r9",  "r10", "r11",
                                             "r12", "r13", "r14", "r15", "rip"};
    if (reg >= 0 && reg <= kX86Rip) return kNames[reg];
    return "?";
  }
  if (reg >= 0 && reg <= 30) return fmt::format("x{}", reg);
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

}  // namespace ljprof::luajit
