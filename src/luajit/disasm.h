// Capstone-decoded instructions in a small architecture-neutral form, so the LuaJIT pattern
// matchers (matchers.h) can describe "a load from [reg + disp] into reg" once for x86-64 and
// AArch64. Registers are canonical numbers: x86-64 rax..r15 = 0..15 (any width of the same
// register maps to one number, e.g. r14d and r14 are both 14), rip = 16; AArch64 x0..x30 /
// w0..w30 = 0..30, xzr/wzr = 31, sp/wsp = 32.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/result.h"
#include "elf/elf_file.h"

namespace ljprof::luajit {

inline constexpr int kNoReg = -1;
inline constexpr int kX86Rsp = 4;
inline constexpr int kX86Rip = 16;
inline constexpr int kA64Zr = 31;
inline constexpr int kA64Sp = 32;

enum class InsnKind : uint8_t {
  Other,
  Mov,           // x86 mov / movabs / AArch64 mov (register or immediate alias)
  Load,          // AArch64 ldr/ldur (x86 loads are Mov with a memory source)
  LoadPair,      // AArch64 ldp
  Store,         // AArch64 str/stur (x86 stores are Mov with a memory destination)
  StorePair,     // AArch64 stp
  Add,           // add (AArch64 add with extended/shifted register too)
  Sub,           //
  And,           //
  Lea,           // x86 lea
  Shift,         // sar/shr/shl/asr/lsr/lsl
  CallDirect,    // call rel32 / bl
  CallIndirect,  // call reg / blr
  JumpIndirect,  // jmp reg / br
  Ret,           //
  Branch,        // any other control transfer
};

struct Operand {
  enum class Kind : uint8_t { None, Reg, Imm, Mem };
  Kind kind = Kind::None;
  int reg = kNoReg;   // Reg: canonical register
  uint8_t size = 0;   // bytes: register width (Reg) or bytes accessed (Mem, x86)
  int64_t imm = 0;    // Imm: sign-extended to 64 bits from the operand size
  int base = kNoReg;  // Mem
  int index = kNoReg;
  int scale = 1;
  int64_t disp = 0;
  uint8_t shift = 0;  // AArch64: LSL/extend shift amount of a register operand
  uint8_t ext = 0;    // AArch64: extend kind (0 none, 1 uxtb, 2 uxth, 3 uxtw, 4 uxtx, 5.. sxt*)

  bool is_reg(int r) const { return kind == Kind::Reg && reg == r; }
};

struct Insn {
  uint64_t address = 0;
  uint8_t size = 0;
  std::array<uint8_t, 16> bytes{};
  InsnKind kind = InsnKind::Other;
  uint8_t op_count = 0;
  std::array<Operand, 4> ops{};
  uint8_t access_size = 0;  // loads/stores: bytes moved per register (AArch64: register width)
  std::string text;         // "mov dword ptr [r14 - 0xbd0], 0xfffffffc"

  std::span<const uint8_t> byte_span() const { return {bytes.data(), size}; }
  const Operand& op(size_t i) const { return ops[i]; }
};

// Caps: how much code one extraction may decode.
struct DisasmLimits {
  static constexpr size_t kMaxFunctionBytes = 1u << 16;
  static constexpr size_t kMaxVmBytes = 1u << 20;
  static constexpr size_t kMaxInsns = 1u << 18;
};

// Decodes `code` (link-time address `address`) linearly. Bytes Capstone cannot decode are
// skipped (1 byte on x86-64, 4 on AArch64) so a data byte cannot stop the sweep; at most
// `max_insns` instructions are returned.
Result<std::vector<Insn>> disassemble(elf::Arch arch, std::span<const uint8_t> code,
                                      uint64_t address, size_t max_insns = DisasmLimits::kMaxInsns);

// Decodes `[address, address + len)` of `file` (must be file-backed code).
Result<std::vector<Insn>> disassemble_range(const elf::ElfFile& file, uint64_t address,
                                            uint64_t len);

// Name of a canonical register, 64-bit form ("r14", "x22", "sp").
std::string register_name(elf::Arch arch, int reg);

// "41 c7 86 30 f4 ff ff fc ff ff ff"
std::string hex_bytes(std::span<const uint8_t> bytes);

}  // namespace ljprof::luajit
