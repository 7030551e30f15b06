// Internals shared by the matcher sources (matchers_vm.cc, matchers_c_api.cc): the calling
// convention's registers, operand views of loads, stores and immediate adds, register writes,
// instruction windows and constant tracking (matchers_operands.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "luajit/matchers.h"

namespace ljprof::luajit::matchers_internal {

using Kind = Operand::Kind;

bool is_x86(const Code& c);
int stack_reg(const Code& c);   // rsp / sp
int return_reg(const Code& c);  // rax / x0
int arg0_reg(const Code& c);    // rdi / x0

// A memory operand [base + disp] with no index register.
bool plain_mem(const Operand& m);

struct LoadView {
  int dst = kNoReg;
  int base = kNoReg;
  int64_t disp = 0;
  uint8_t size = 0;
};

// dst <- [base + disp] (no index register, no writeback).
std::optional<LoadView> as_load(const Code& c, const Insn& i);

struct StoreView {
  bool is_imm = false;
  int64_t imm = 0;
  int src = kNoReg;
  int base = kNoReg;
  int64_t disp = 0;
  uint8_t size = 0;
};

// [base + disp] <- src register or immediate (AArch64 xzr/wzr is the immediate 0).
std::optional<StoreView> as_store(const Code& c, const Insn& i);

// `dst = src + imm` with an immediate (x86 `add r, imm` / `lea r, [src + disp]`, AArch64
// `add xd, xn, #imm{, lsl #12}`), the way a compiler splits a large struct displacement
// between an address computation and the load's own offset.
struct AddImmView {
  int dst = kNoReg;
  int src = kNoReg;
  int64_t imm = 0;
};
std::optional<AddImmView> as_add_imm(const Code& c, const Insn& i);

// Whether `i` may change `reg` (conservative: unknown instructions with `reg` first do, and
// undecodable bytes may hide anything).
bool writes_reg(const Code& c, const Insn& i, int reg);

// Windows of consecutive instructions never reach across a Gap: the undecodable bytes may
// hide any instruction, so a pattern that needs the instructions on both sides is unproven.
// The end (exclusive) of the forward window [from, from + len): the first Gap in it, else its
// end within the code.
size_t window_end(const Code& c, size_t from, size_t len);
// The start of the backward window of up to `len` instructions before insns[at]: right after
// the nearest Gap in it.
size_t window_begin(const Code& c, size_t at, size_t len);

// The constant held by `reg` just before insns[at], if the nearest earlier write to it
// (within `window` instructions) is a move of an immediate (or x86 `xor r, r`).
std::optional<int64_t> const_before(const Code& c, size_t at, int reg, size_t window);
// Value stored by a store: its immediate, or the constant its source register holds.
std::optional<int64_t> stored_value(const Code& c, size_t at, const StoreView& s);

// A stored ~LJ_VMST_x.
bool is_state_value(int64_t v);
// A global_State field's displacement from the DISPATCH (x86-64) or GL (AArch64) register.
bool dispatch_disp_ok(const Code& c, int64_t disp);
// A register that can be a struct pointer (not the stack pointer, rip or the zero register).
bool valid_base(const Code& c, int reg);

// "<function> at <address> (<disassembly>)", for messages.
std::string where(const Code& c, const Insn& i);

}  // namespace ljprof::luajit::matchers_internal
