// disasm: the one Capstone wrapper. Machine code (x86-64 or AArch64) becomes instructions in a
// small architecture-neutral form, so the stages that read code (cfi/'s VM sub-ranges, luajit/'s
// offset matchers) describe "a load from [reg + disp] into reg" once for both architectures and
// never see a Capstone id.
//
// Registers are canonical numbers: x86-64 rax..r15 = 0..15 (any width of the same register maps
// to one number, e.g. r14d and r14 are both 14; Operand::size keeps the width), rip = 16; AArch64
// x0..x30 / w0..w30 = 0..30, xzr/wzr = 31, sp/wsp = 32.
//
// Bytes Capstone cannot decode become explicit InsnKind::Gap instructions, never a silent skip:
// a pattern that looks at consecutive instructions stops at a Gap, so no pattern can match
// across undecodable bytes.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/result.h"
#include "elf/elf_file.h"

namespace ljprof::disasm {

inline constexpr int kNoReg = -1;
inline constexpr int kX86Rdx = 2;
inline constexpr int kX86Rbx = 3;
inline constexpr int kX86Rsp = 4;
inline constexpr int kX86Rbp = 5;
inline constexpr int kX86Rsi = 6;
inline constexpr int kX86Rdi = 7;
inline constexpr int kX86Rip = 16;
inline constexpr int kA64Fp = 29;
inline constexpr int kA64Lr = 30;
inline constexpr int kA64Zr = 31;
inline constexpr int kA64Sp = 32;

enum class InsnKind : uint8_t {
  Other,
  Gap,           // bytes Capstone cannot decode (x86-64: 1 byte, AArch64: 4); no pattern accepts it
  Mov,           // x86 mov / movabs / AArch64 mov (register or immediate alias)
  Load,          // AArch64 ldr/ldur (x86 loads are Mov with a memory source)
  LoadPair,      // AArch64 ldp
  Store,         // AArch64 str/stur (x86 stores are Mov with a memory destination)
  StorePair,     // AArch64 stp
  Add,           // add (AArch64 add with extended/shifted register too)
  Sub,           //
  And,           //
  Neg,           //
  Lea,           // x86 lea
  Shift,         // sar/shr/shl/asr/lsr/lsl
  Compare,       // x86 cmp/test, AArch64 cmp/cmn/tst: flags only
  Push,          // x86 push (any operand)
  Pop,           // x86 pop
  CallDirect,    // call rel32 / bl
  CallIndirect,  // call reg or mem / blr
  Jump,          // unconditional direct jump: jmp rel / b
  JumpIndirect,  // jmp reg or mem / br
  Ret,           //
  Branch,        // any other control transfer (conditional jumps, cbz/tbz, loop, ...)
};

struct Operand {
  enum class Kind : uint8_t { None, Reg, Imm, Mem };
  Kind kind = Kind::None;
  int reg = kNoReg;  // Reg: canonical register
  uint8_t size = 0;  // bytes: register width (Reg), bytes accessed (Mem, x86), immediate size (x86)
  int64_t imm = 0;   // Imm: sign-extended to 64 bits from the operand size
  int base = kNoReg;  // Mem
  int index = kNoReg;
  int scale = 1;
  int64_t disp = 0;
  uint8_t shift = 0;  // AArch64: LSL/extend shift amount of a register operand
  uint8_t ext = 0;    // AArch64: extend kind (0 none, 1 uxtb, 2 uxth, 3 uxtw, 4 uxtx, 5.. sxt*)

  bool is_reg(int r) const { return kind == Kind::Reg && reg == r; }
  // The full-width register: x86 rsp, not esp/sp/spl.
  bool is_reg64(int r) const { return is_reg(r) && size == 8; }
};

struct Insn {
  uint64_t address = 0;
  uint8_t size = 0;
  std::array<uint8_t, 16> bytes{};
  InsnKind kind = InsnKind::Other;
  uint8_t op_count = 0;
  std::array<Operand, 4> ops{};
  uint8_t access_size = 0;  // loads/stores: bytes moved per register (AArch64: register width)
  // Bit r set: the instruction may write canonical register r at any width, explicitly or
  // implicitly (x86-64 div, cqo, cpuid, ...), from Capstone's register access lists. Every bit is
  // set when that is unknown: a Gap, an instruction Capstone has no list for, and all of AArch64
  // (Capstone 4 lists `cmp x0, x1` as writing x0).
  uint64_t writes = 0;
  std::string text;  // "mov dword ptr [r14 - 0xbd0], 0xfffffffc"

  uint64_t end() const { return address + size; }
  std::span<const uint8_t> byte_span() const { return {bytes.data(), size}; }
  const Operand& op(size_t i) const { return ops[i]; }
  bool may_write(int reg) const { return reg >= 0 && reg < 64 && ((writes >> reg) & 1) != 0; }
};

// Caps on what one decode may cost. The largest code ljprof decodes in one piece is the LuaJIT
// VM interval: 14..17 KiB (a few thousand instructions) in every Debian build (tarantool,
// luajit, libluajit, OpenResty's libluajit2, arm64), so kMaxBytes leaves 60x headroom for other
// builds. kMaxInsns bounds the memory of one decode (about 80 MiB of Insns): it is what an
// AArch64 kMaxBytes decode holds (4 bytes each; x86-64 code averages about as much), so only
// input that is mostly one-byte Gaps reaches it first.
struct DisasmLimits {
  static constexpr size_t kMaxBytes = 1u << 20;
  static constexpr size_t kMaxFunctionBytes = 1u << 16;  // one symbol's code (luajit/)
  static constexpr size_t kMaxInsns = 1u << 18;
};

// Decodes `code` (link-time address `address`) linearly. Undecodable bytes become Gap
// instructions, so the sweep continues after a data byte. Fails when `code` is larger than
// DisasmLimits::kMaxBytes or decodes to more than DisasmLimits::kMaxInsns instructions.
Result<std::vector<Insn>> disassemble(elf::Arch arch, std::span<const uint8_t> code,
                                      uint64_t address);

// Decodes `[address, address + len)` of `file` (must be file-backed code).
Result<std::vector<Insn>> disassemble_range(const elf::ElfFile& file, uint64_t address,
                                            uint64_t len);

// Name of a canonical register, 64-bit form ("r14", "x22", "sp").
std::string register_name(elf::Arch arch, int reg);

// "41 c7 86 30 f4 ff ff fc ff ff ff"
std::string hex_bytes(std::span<const uint8_t> bytes);

}  // namespace ljprof::disasm
