#include "symbolize/trace_exits.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string_view>

#include "disasm/disasm.h"

namespace ljprof::symbolize {

namespace {

using Role = TraceInsn::Role;

// x86-64 exit stub groups (lj_asm_x86.h asm_exitstub_gen): opcodes and how far a group reaches.
constexpr uint8_t kX86PushImm8 = 0x6a, kX86JmpShort = 0xeb;
constexpr int kX86MaxStubHops = 32;  // EXITSTUBS_PER_GROUP: at most one short jump per stub
// arm64 stubs (lj_asm_arm64.h asm_exitstub_setup / lj_target_arm64.h A64I_*).
constexpr uint32_t kA64BlMask = 0xfc000000, kA64Bl = 0x94000000;
constexpr uint32_t kA64StrLrSp = 0xf90003fe;  // str x30, [sp]
constexpr uint32_t kA64MovzW0 = 0x52800000;   // movz w0, #imm16 (imm16 << 5)

// The exit number of the x86-64 stub at `target`: `push imm8` (low byte), short jumps forward
// to the group's `push imm8` (high byte).
std::optional<uint32_t> x86_stub_exit(const ljprof_mem_reader& mem, uint64_t target) {
  uint8_t ins[2];
  if (mem.read_mem(mem.ctx, target, ins, 2) != 0 || ins[0] != kX86PushImm8) return std::nullopt;
  const uint32_t low = ins[1];
  uint64_t at = target + 2;
  for (int hop = 0; hop <= kX86MaxStubHops; ++hop) {
    if (mem.read_mem(mem.ctx, at, ins, 2) != 0) return std::nullopt;
    if (ins[0] == kX86PushImm8) return uint32_t{ins[1]} << 8 | low;
    const auto rel = static_cast<int8_t>(ins[1]);
    if (ins[0] != kX86JmpShort || rel <= 0) return std::nullopt;
    at += 2 + static_cast<uint64_t>(rel);
  }
  return std::nullopt;
}

// The exit number of the arm64 stub at `target`: a `bl` back to the stub block's `str lr, [sp]`,
// which is followed by `movz w0, #traceno` two words later.
std::optional<uint32_t> a64_stub_exit(const ljprof_mem_reader& mem, uint64_t target,
                                      uint32_t traceno) {
  uint32_t bl = 0, str = 0, movz = 0;
  if (target % 4 != 0 || mem.read_mem(mem.ctx, target, &bl, 4) != 0 ||
      (bl & kA64BlMask) != kA64Bl) {
    return std::nullopt;
  }
  const int32_t words = static_cast<int32_t>(bl << 6) >> 6;  // imm26, sign-extended
  if (words > -3) return std::nullopt;
  const uint64_t start = target - static_cast<uint64_t>(-int64_t{words}) * 4;
  if (mem.read_mem(mem.ctx, start, &str, 4) != 0 ||
      mem.read_mem(mem.ctx, start + 8, &movz, 4) != 0 || str != kA64StrLrSp ||
      movz != (kA64MovzW0 | (traceno & 0xffff) << 5)) {
    return std::nullopt;
  }
  return static_cast<uint32_t>(-words - 3);
}

std::string_view mnemonic(const disasm::Insn& insn) {
  const std::string_view t = insn.text;
  return t.substr(0, t.find(' '));
}

// Whether `insn` may be part of the code LuaJIT emits for a guarded comparison (lj_asm_x86.h /
// lj_asm_arm64.h asm_comp, asm_abc, asm_retf before their branch): the compare itself, operand
// loads and spill reloads, and constants being rematerialised. Errs towards yes.
bool may_be_comparison(elf::Arch arch, const disasm::Insn& insn) {
  using disasm::InsnKind;
  switch (insn.kind) {
    case InsnKind::Compare:
    case InsnKind::Load:
    case InsnKind::LoadPair:
    case InsnKind::Lea:
      return true;
    case InsnKind::Mov:  // x86: a store is a Mov to memory
      return insn.op_count == 0 || insn.op(0).kind != disasm::Operand::Kind::Mem;
    case InsnKind::Add:
    case InsnKind::Sub:  // arm64 constants: add xN, xGL, #ofs
      return arch == elf::Arch::AArch64 && insn.op_count > 0 &&
             insn.op(insn.op_count - 1).kind == disasm::Operand::Kind::Imm;
    case InsnKind::Other: {
      static constexpr std::string_view kX86[] = {
          "ucomisd", "ucomiss", "comisd", "comiss", "movsd",  "movss", "movaps", "movapd", "movups",
          "movd",    "movq",    "movzx",  "movsx",  "movsxd", "xorps", "xorpd",  "pxor",   "xor"};
      static constexpr std::string_view kA64[] = {"fcmp", "fcmpe", "fmov", "movz", "movk",
                                                  "movn", "adr",   "adrp", "orr"};
      const std::string_view m = mnemonic(insn);
      if (arch == elf::Arch::AArch64)
        return std::find(std::begin(kA64), std::end(kA64), m) != std::end(kA64);
      return std::find(std::begin(kX86), std::end(kX86), m) != std::end(kX86);
    }
    default:
      return false;
  }
}

// The target of a direct branch: its last immediate operand (jcc rel; b.cc / cbz / tbz label).
std::optional<uint64_t> branch_target(const disasm::Insn& insn) {
  for (int i = insn.op_count - 1; i >= 0; --i) {
    if (insn.op(static_cast<size_t>(i)).kind == disasm::Operand::Kind::Imm) {
      return static_cast<uint64_t>(insn.op(static_cast<size_t>(i)).imm);
    }
  }
  return std::nullopt;
}

bool is_branch(const disasm::Insn& insn) {
  using disasm::InsnKind;
  return insn.kind == InsnKind::Branch || insn.kind == InsnKind::Jump;
}

// A guard whose exit got a side trace jumps to that trace instead of its stub (lj_asm_*.h
// lj_asm_patchexit), and its snapshot's count becomes SNAPCOUNT_DONE (lj_trace.c). Exits never
// decrease along the code, so such a branch's exit lies between the known exits around it; when
// exactly one snapshot there has a side trace, it is that one.
void infer_linked_exits(std::vector<TraceInsn>& code, const std::vector<bool>& guard_like,
                        const std::vector<bool>& linked) {
  const auto nsnap = static_cast<uint32_t>(linked.size());
  if (nsnap == 0) return;
  // Linear in the code and the snapshots (the input may be hostile): the next known exit after
  // each instruction, and linked snapshots counted by prefix.
  std::vector<uint32_t> next_exit(code.size() + 1, nsnap - 1);
  for (size_t k = code.size(); k-- > 0;) {
    next_exit[k] = code[k].role == Role::Exit ? code[k].exit : next_exit[k + 1];
  }
  std::vector<uint32_t> linked_before(nsnap + 1, 0);  // linked snapshots below s
  std::vector<uint32_t> next_linked(nsnap + 1, nsnap);
  for (uint32_t s = 0; s < nsnap; ++s)
    linked_before[s + 1] = linked_before[s] + (linked[s] ? 1 : 0);
  for (uint32_t s = nsnap; s-- > 0;) next_linked[s] = linked[s] ? s : next_linked[s + 1];
  uint32_t lo = 0;
  for (size_t k = 0; k < code.size(); ++k) {
    if (code[k].role == Role::Exit) lo = code[k].exit;
    if (code[k].role != Role::UnknownExit || !guard_like[k]) continue;
    const uint32_t hi = std::min(next_exit[k + 1], nsnap - 1);
    if (lo > hi || linked_before[hi + 1] - linked_before[lo] != 1) continue;
    code[k].role = Role::Exit;
    code[k].exit = static_cast<uint16_t>(next_linked[lo]);
    lo = code[k].exit;
  }
}

// x86-64: a trace's own code begins by storing its number as the VM state (lj_asm.c
// emit_setvmstate); a side trace's stack check comes before that store and exits through its
// parent's exit number (asm_head_side reuses J->exitno): not this trace's.
void drop_exits_before_vmstate(const std::vector<disasm::Insn>& insns, uint32_t traceno,
                               std::vector<TraceInsn>& code, std::vector<bool>& guard_like) {
  for (size_t k = 0; k < insns.size(); ++k) {
    const disasm::Insn& i = insns[k];
    const bool sets_vmstate = i.kind == disasm::InsnKind::Mov && i.op_count == 2 &&
                              i.op(0).kind == disasm::Operand::Kind::Mem &&
                              i.op(1).kind == disasm::Operand::Kind::Imm &&
                              i.op(1).imm == int64_t{traceno};
    if (sets_vmstate) {
      for (size_t j = 0; j < k; ++j) {
        if (code[j].role == Role::Exit) code[j].role = Role::UnknownExit;
        guard_like[j] = false;  // nor is its exit to be inferred
      }
      return;
    }
  }
}

// Exits never decrease along a trace's code, except for a branch that is not this trace's: the
// stack check a side trace begins with exits through its parent's exit number (lj_asm.c
// asm_head_side, x86-64 reuses J->exitno). The first branch when it is above a later exit, then
// every exit out of order with another, are left unknown.
void drop_foreign_exits(std::vector<TraceInsn>& code) {
  std::vector<size_t> exits;
  for (size_t k = 0; k < code.size(); ++k) {
    if (code[k].role == Role::Exit) exits.push_back(k);
  }
  if (exits.size() >= 2) {
    uint32_t later_min = UINT32_MAX;
    for (size_t j = 1; j < exits.size(); ++j)
      later_min = std::min<uint32_t>(later_min, code[exits[j]].exit);
    if (code[exits[0]].exit > later_min) code[exits[0]].role = Role::UnknownExit;
  }
  // An exit is out of order when one before it is higher or one after it is lower.
  std::vector<uint32_t> max_before(code.size()), min_after(code.size());
  uint32_t hi = 0;
  for (size_t k = 0; k < code.size(); ++k) {
    max_before[k] = hi;
    if (code[k].role == Role::Exit) hi = std::max<uint32_t>(hi, code[k].exit);
  }
  uint32_t lo = UINT32_MAX;
  for (size_t k = code.size(); k-- > 0;) {
    min_after[k] = lo;
    if (code[k].role == Role::Exit) lo = std::min<uint32_t>(lo, code[k].exit);
  }
  for (size_t k = 0; k < code.size(); ++k) {
    if (code[k].role == Role::Exit &&
        (max_before[k] > code[k].exit || min_after[k] < code[k].exit)) {
      code[k].role = Role::UnknownExit;
    }
  }
}

}  // namespace

Result<std::vector<TraceInsn>> read_trace_exits(const ljprof_mem_reader& mem,
                                                const lj_luajit_info& info, uint64_t mcode,
                                                uint32_t szmcode, uint32_t traceno,
                                                const std::vector<bool>& linked) {
  const auto nsnap = static_cast<uint32_t>(linked.size());
  if (szmcode == 0 || szmcode > disasm::DisasmLimits::kMaxBytes) {
    return make_error("trace {} at {:#x}: machine code size {} is out of range", traceno, mcode,
                      szmcode);
  }
  std::vector<uint8_t> code(szmcode);
  if (mem.read_mem(mem.ctx, mcode, code.data(), szmcode) != 0) {
    return make_error("cannot read trace {}'s machine code at {:#x}+{:#x}", traceno, mcode,
                      szmcode);
  }
  const elf::Arch arch = info.arch == LJ_INFO_ARCH_ARM64 ? elf::Arch::AArch64 : elf::Arch::X86_64;
  LJ_ASSIGN_OR_RETURN(std::vector<disasm::Insn> insns, disasm::disassemble(arch, code, mcode));
  std::vector<TraceInsn> out;
  out.reserve(insns.size());
  std::vector<bool> guard_like(insns.size());         // may be a guard: see infer_linked_exits
  std::map<uint64_t, std::optional<uint32_t>> stubs;  // target -> exit, decoded once
  for (size_t k = 0; k < insns.size(); ++k) {
    const disasm::Insn& insn = insns[k];
    TraceInsn t;
    t.offset = static_cast<uint32_t>(insn.address - mcode);
    const std::optional<uint64_t> target = is_branch(insn) ? branch_target(insn) : std::nullopt;
    const bool inside = target && *target >= mcode && *target < mcode + szmcode;
    // A branch inside the trace may be a guard's own: lj_asm.c asm_loop_fixup inverts the loop's
    // last guard into `jcc ->LOOP; jmp ->exit`.
    t.role = may_be_comparison(arch, insn) || inside ? Role::MaybeComparison : Role::Body;
    if (target && !inside) {
      auto [it, fresh] = stubs.try_emplace(*target);
      if (fresh) {
        it->second = arch == elf::Arch::AArch64 ? a64_stub_exit(mem, *target, traceno)
                                                : x86_stub_exit(mem, *target);
      }
      if (it->second && *it->second < nsnap) {
        t.role = Role::Exit;
        t.exit = static_cast<uint16_t>(*it->second);
      } else {
        t.role = Role::UnknownExit;
        // Not a stub (a stub numbered past the snapshots is a side trace's stack check, arm64
        // asm_head_side): a guard patched to a side trace if it is a conditional branch, or the
        // jump of an inverted loop guard (lj_asm.c asm_loop_fixup: `jcc ->LOOP; jmp ->exit`);
        // not a trace's final link jump.
        guard_like[k] = !it->second && (insn.kind == disasm::InsnKind::Branch ||
                                        (k > 0 && insns[k - 1].kind == disasm::InsnKind::Branch &&
                                         out.back().role == Role::MaybeComparison));
      }
    }
    out.push_back(t);
  }
  if (arch == elf::Arch::X86_64) drop_exits_before_vmstate(insns, traceno, out, guard_like);
  drop_foreign_exits(out);
  infer_linked_exits(out, guard_like, linked);
  return out;
}

Result<SnapshotSpan> snapshots_by_exits(std::span<const TraceInsn> code,
                                        std::span<const SnapshotIr> snaps, uint64_t mcode,
                                        uint64_t pc) {
  if (code.empty() || snaps.empty() || pc < mcode + code.front().offset) {
    return make_error("pc {:#x} is not in the trace's code", pc);
  }
  auto at = std::upper_bound(code.begin(), code.end(), pc - mcode,
                             [](uint64_t o, const TraceInsn& t) { return o < t.offset; }) -
            1;
  if (at->role == Role::Exit) return SnapshotSpan{at->exit, at->exit};
  auto is_out = [](const TraceInsn& t) {
    return t.role == Role::Exit || t.role == Role::UnknownExit;
  };
  auto is_exit = [](const TraceInsn& t) { return t.role == Role::Exit; };
  // The nearest guard branches on either side, and the nearest with a known exit.
  const auto before = std::find_if(std::make_reverse_iterator(at), code.rend(), is_out);
  const auto after = std::find_if(at + 1, code.end(), is_out);
  const auto known_before = std::find_if(std::make_reverse_iterator(at), code.rend(), is_exit);
  const auto known_after = std::find_if(at + 1, code.end(), is_exit);
  const uint32_t lo = known_before == code.rend() ? 0 : known_before->exit;
  const uint32_t hi =
      known_after == code.end() ? static_cast<uint32_t>(snaps.size() - 1) : known_after->exit;
  if (lo >= hi) return SnapshotSpan{lo, lo};
  auto body = [](const TraceInsn& t) { return t.role == Role::Body; };
  SnapshotSpan span{lo, hi};
  // Not hi: the pc is before hi's first comparison (see the header).
  if (after != code.end() && after->role == Role::Exit && snaps[hi].opens_with_comparison &&
      std::any_of(at, after, body)) {
    span.last = hi - 1;
  }
  // Not lo: the pc is past lo's closing comparison.
  if (before != code.rend() && before->role == Role::Exit && snaps[lo].closes_with_comparison &&
      std::any_of(before.base(), at + 1, body)) {
    span.first = lo + 1;
  }
  while (span.first < span.last && snaps[span.first].empty) ++span.first;
  while (span.last > span.first && snaps[span.last].empty) --span.last;
  if (span.first > span.last) {
    return make_error("no snapshot's code can hold pc {:#x} (between exits {} and {})", pc, lo, hi);
  }
  return span;
}

}  // namespace ljprof::symbolize
