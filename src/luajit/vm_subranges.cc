// The LuaJIT VM's sub-ranges where the interpreter FDE's one blanket row is wrong (entry
// prologues, epilogues, the trace exit handler, JLOOP, C-callable leaf helpers, ...), found
// from symbols where present and from instruction patterns over the decoded VM otherwise.
#include "luajit/vm_subranges.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "common/bounds.h"
#include "disasm/disasm.h"

namespace ljprof::luajit {

namespace {

using cfi::sp_row;
using disasm::Insn;
using disasm::InsnKind;
using OpKind = disasm::Operand::Kind;
using disasm::kA64Fp;
using disasm::kA64Lr;
using disasm::kA64Sp;
using disasm::kX86Rbp;
using disasm::kX86Rbx;
using disasm::kX86Rdx;
using disasm::kX86Rsp;

// Operand n is the full-width register `reg` (x86-64 rsp, not esp).
bool is_reg(const Insn& i, int n, int reg) {
  return i.op_count > n && i.ops[n].is_reg64(reg);
}
bool is_imm(const Insn& i, int n) {
  return i.op_count > n && i.ops[n].kind == OpKind::Imm;
}
bool is_kind(const Insn& i, InsnKind kind, uint8_t op_count) {
  return i.kind == kind && i.op_count == op_count;
}

// Any transfer of control, or undecodable bytes (which may be one): the end of straight-line
// code for every window below.
bool is_transfer(const Insn& i) {
  switch (i.kind) {
    case InsnKind::Gap:
    case InsnKind::CallDirect:
    case InsnKind::CallIndirect:
    case InsnKind::Jump:
    case InsnKind::JumpIndirect:
    case InsnKind::Ret:
    case InsnKind::Branch:
      return true;
    default:
      return false;
  }
}
bool is_call(const Insn& i) {
  return i.kind == InsnKind::CallDirect || i.kind == InsnKind::CallIndirect;
}
// An unconditional jump (direct, through a register or through memory).
bool is_jmp(const Insn& i) {
  return i.kind == InsnKind::Jump || i.kind == InsnKind::JumpIndirect;
}

// x86-64 instruction shapes.
bool x_push(const Insn& i) {
  return is_kind(i, InsnKind::Push, 1) && i.ops[0].kind == OpKind::Reg;
}
bool x_pop(const Insn& i) {
  return is_kind(i, InsnKind::Pop, 1) && i.ops[0].kind == OpKind::Reg;
}
bool x_rsp_imm(const Insn& i, InsnKind kind) {
  return is_kind(i, kind, 2) && is_reg(i, 0, kX86Rsp) && is_imm(i, 1) && i.ops[1].imm > 0;
}
bool x_jmp_reg(const Insn& i) {
  return is_kind(i, InsnKind::JumpIndirect, 1) && i.ops[0].kind == OpKind::Reg;
}
bool x_mov_rsp_reg(const Insn& i) {
  return is_kind(i, InsnKind::Mov, 2) && is_reg(i, 0, kX86Rsp) && i.ops[1].kind == OpKind::Reg;
}
bool x_store_rsp(const Insn& i) {
  return is_kind(i, InsnKind::Mov, 2) && i.ops[0].kind == OpKind::Mem && i.ops[0].base == kX86Rsp;
}
bool x_load_rsp(const Insn& i) {
  return is_kind(i, InsnKind::Mov, 2) && i.ops[0].kind == OpKind::Reg &&
         i.ops[1].kind == OpKind::Mem && i.ops[1].base == kX86Rsp &&
         i.ops[1].index == disasm::kNoReg;
}
// `mov [base + disp], reg` with a base other than rsp: a store into a heap object (lua_State).
bool x_store_heap(const Insn& i) {
  return is_kind(i, InsnKind::Mov, 2) && i.ops[0].kind == OpKind::Mem && i.ops[0].base != kX86Rsp &&
         i.ops[0].base != disasm::kNoReg && i.ops[1].kind == OpKind::Reg;
}
// rsp, or a writer of rsp other than push/pop, as the first operand (cmp/test only read it).
bool x_writes_rsp(const Insn& i) {
  return is_reg(i, 0, kX86Rsp) && !x_push(i) && !x_pop(i) && i.kind != InsnKind::Compare;
}
// The interpreter's BASE (rdx) and PC (rbx) registers (vm_x64.dasc), at any width.
bool writes_vm_regs(const Insn& i) {
  return i.may_write(kX86Rdx) || i.may_write(kX86Rbx);
}

// vm_x64.dasc ins_call's `mov [BASE-8], PC` (LJ_FR2: the link is a whole slot) or vm_x86.dasc's
// `mov [BASE-4], PC` (without LJ_FR2: the slot's high half): a call storing its frame's link.
// Inside the VM no other store writes PC there at either width.
bool x_stores_frame_link(const Insn& i) {
  if (!is_kind(i, InsnKind::Mov, 2) || i.ops[0].kind != OpKind::Mem || i.ops[0].base != kX86Rdx ||
      i.ops[0].index != disasm::kNoReg || !i.ops[1].is_reg(kX86Rbx)) {
    return false;
  }
  return (i.ops[1].size == 8 && i.ops[0].disp == -8) || (i.ops[1].size == 4 && i.ops[0].disp == -4);
}

lj_cfi_row invalid() {
  return cfi::invalid_row(0);  // pc_start is set when the sub-ranges are sorted
}

struct Finder {
  const elf::ElfFile& file;
  const VmInterval& vm;
  std::vector<cfi::Overlay> out;

  // "symbol" when the symbol of that name (.symtab, else .dynsym) contains pc.
  std::string how(uint64_t pc, const char* name) const {
    const elf::Symbol* s = file.find_symbol(name);
    bool inside = s != nullptr && s->value <= pc && pc < s->value + std::max<uint64_t>(s->size, 1);
    return inside ? "symbol" : "pattern";
  }
  // A sub-range found so far contains pc. The patterns ask this for every instruction they
  // look at, so it is a lookup in the union of the ranges (disjoint, keyed by begin), not a
  // scan of `out`: a VM-sized input with thousands of ranges stays near-linear.
  bool covers(uint64_t pc) const {
    auto it = covered.upper_bound(pc);
    return it != covered.begin() && pc < std::prev(it)->second;
  }
  void add(uint64_t b, uint64_t e, std::string what, std::string how, lj_cfi_row row) {
    add(cfi::Overlay{b, e, std::move(what), std::move(how), row});
  }
  void add(cfi::Overlay r) {
    if (r.begin >= r.end) return;
    uint64_t b = r.begin, e = r.end;
    // Merge with every union range that overlaps or touches [b, e).
    auto it = covered.upper_bound(b);
    if (it != covered.begin() && std::prev(it)->second >= b) --it;
    while (it != covered.end() && it->first <= e) {
      b = std::min(b, it->first);
      e = std::max(e, it->second);
      it = covered.erase(it);
    }
    covered.emplace(b, e);
    out.push_back(std::move(r));
  }
  std::map<uint64_t, uint64_t> covered;  // union of out's ranges (begin -> end), kept by add()
};

// Right after an entry links its C frame into L->cframe, and before it pushes the first Lua
// frame onto that C frame (vm_call: up to the check that the callee is a function; vm_cpcall:
// through the call of its C function, lj_frame.h "cframe w/o frame"), the frame holds no Lua
// frame: hint VM_EMPTY. Straight-line code only, up to (not including) the first branch, ret
// or jmp; a call ends the window after it.
void add_linked_empty_window(Finder& f, const std::vector<Insn>& code, size_t start,
                             const std::string& who, int64_t frame, int32_t blanket_fp) {
  constexpr size_t kMaxWindowInsns = 32;
  if (start >= code.size()) return;
  const uint64_t begin = code[start].address;
  uint64_t end = begin;
  for (size_t i = start; i < code.size() && i < start + kMaxWindowInsns; ++i) {
    const Insn& insn = code[i];
    if (f.covers(insn.address) || insn.kind == InsnKind::Gap || is_jmp(insn) ||
        insn.kind == InsnKind::Ret) {
      break;
    }
    end = insn.end();
    // A conditional branch ends the window after itself (nothing is pushed by the branch);
    // vm_cpcall's call of its C function is followed by `test rax, rax; jz ->vm_leave_cp`.
    if (is_transfer(insn) && !is_call(insn)) break;
  }
  f.add(begin, end, fmt::format("{} C frame linked, no Lua frame on it yet", who), "pattern",
        sp_row(static_cast<int32_t>(frame), LJ_CFI_RULE_AT_CFA, blanket_fp, LJ_CFI_VM_EMPTY));
}

// After an entry's `sub rsp` the C frame exists but L->cframe does not point at it until the
// entry stores rsp there (vm_x64.dasc vm_call/vm_pcall/vm_cpcall `mov L:RB->cframe, rsp`,
// vm_resume with CFRAME_RESUME or'ed in via `lea`). In between, the Lua walk cannot use this
// frame (SAVE_L may still be stale, and the cross-check against L->cframe fails), but the
// frame is exact native code: CFA = rsp + frame size. The window is followed through direct
// jmps (vm_pcall jumps into vm_call) up to and including the linking store, or up to and
// including a call (vm_ffi_callback links in lj_ccallback_enter). Anything else (a
// conditional branch, an indirect jump, an undecodable byte, too long) adds nothing: the pcs
// keep the blanket Keep rule and the cframe cross-check fails them closed.
void add_unlinked_entry_window(Finder& f, const std::vector<Insn>& code,
                               const std::map<uint64_t, size_t>& index, size_t start,
                               const std::string& who, int64_t frame, int32_t blanket_fp) {
  constexpr size_t kMaxWindowInsns = 64;
  std::set<int> holds_rsp = {kX86Rsp};  // 64-bit registers
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  bool linked = false;
  size_t i = start;
  for (size_t n = 0; n < kMaxWindowInsns && i < code.size(); ++n) {
    const Insn& insn = code[i];
    if (f.covers(insn.address)) {
      linked = true;  // joins a window already proven from another entry (vm_pcall -> vm_call)
      break;
    }
    auto extend = [&] {
      if (!ranges.empty() && ranges.back().second == insn.address) {
        ranges.back().second = insn.end();
      } else {
        ranges.emplace_back(insn.address, insn.end());
      }
    };
    if (x_store_heap(insn) && insn.ops[1].size == 8 && holds_rsp.count(insn.ops[1].reg)) {
      extend();
      linked = true;
      add_linked_empty_window(f, code, i + 1, who, frame, blanket_fp);
      break;
    }
    if (is_call(insn)) {
      extend();
      linked = true;
      break;
    }
    if (insn.kind == InsnKind::Jump && is_imm(insn, 0)) {
      extend();
      auto t = index.find(static_cast<uint64_t>(insn.ops[0].imm));
      if (t == index.end()) break;
      i = t->second;
      continue;
    }
    if (is_transfer(insn)) break;
    // Track registers holding rsp or rsp + a CFRAME_* flag (vm_resume: lea r15, [rsp+1]).
    if (insn.op_count == 2 && insn.ops[0].kind == OpKind::Reg) {
      const int dst = insn.ops[0].reg;
      const bool from_rsp = insn.ops[0].size == 8 &&
                            ((insn.kind == InsnKind::Lea && insn.ops[1].kind == OpKind::Mem &&
                              insn.ops[1].base == kX86Rsp && insn.ops[1].index == disasm::kNoReg &&
                              insn.ops[1].disp >= 0 && insn.ops[1].disp < 4) ||
                             (insn.kind == InsnKind::Mov && is_reg(insn, 1, kX86Rsp)));
      if (from_rsp) {
        holds_rsp.insert(dst);
      } else {
        holds_rsp.erase(dst);
      }
    }
    extend();
    ++i;
  }
  if (!linked) return;
  for (auto [b, e] : ranges) {
    f.add(b, e, fmt::format("{} C frame built, not yet linked in L->cframe", who), "pattern",
          sp_row(static_cast<int32_t>(frame), LJ_CFI_RULE_AT_CFA, blanket_fp, LJ_CFI_OK));
  }
}

// The trace exit handler [code[first].address, stop): entered from a trace's exit stub with an
// rsp only the trace knows, so no rule from rsp. Up to and including the first byte of its
// `call lj_trace_exit` the C frame is the running lua_State's cframe and the exiting trace's
// BASE is G->jit_base: hint VM_EXIT (sampled pcs only). The rest of the call instruction, the
// return address, is VM_CUR_L: L->base is set by then (return-address lookups use pc - 1).
// Where the code joins vm_exit_interp's `1:` label before `mov rsp, reg` (GC64:
// `lea rcx, [rsp+16]` / `1: mov r13, [rcx-8]; mov r12, [rcx]; mov rsp, rcx`), the loads there
// run with BASE and PC in their registers on both paths: VM_CUR_L. The rest stays Invalid.
void add_exit_handler(Finder& f, const std::vector<Insn>& code,
                      const std::map<uint64_t, size_t>& index, size_t first, size_t mov_rsp,
                      uint64_t stop, int64_t frame, int32_t blanket_fp) {
  const char* what = "trace exit handler (all GPRs pushed, rsp from the trace)";
  const std::string how = f.how(code[first].address, "lj_vm_exit_handler");
  const lj_cfi_row cur_l =
      sp_row(static_cast<int32_t>(frame), LJ_CFI_RULE_AT_CFA, blanket_fp, LJ_CFI_VM_CUR_L);
  size_t call = code.size();
  for (size_t k = first; k < mov_rsp && k < code.size(); ++k) {
    if (code[k].kind == InsnKind::CallDirect && is_imm(code[k], 0)) call = k;
  }
  // Without its `mov rsp, reg` (not within reach, or undecodable bytes before it) the handler's
  // end is unknown: no rule for any of it.
  if (call == code.size() || mov_rsp >= code.size() || !x_mov_rsp_reg(code[mov_rsp])) {
    f.add(code[first].address, stop, what, how, invalid());
    return;
  }
  f.add(code[first].address, code[call].address + 1, what, how,
        sp_row(static_cast<int32_t>(frame), LJ_CFI_RULE_AT_CFA, blanket_fp, LJ_CFI_VM_EXIT));
  f.add(code[call].address + 1, code[call].end(), "trace exit handler: return from lj_trace_exit",
        how, cur_l);
  // The `1:` label: a direct jmp after the call targets it; from there to `mov rsp, reg`
  // only register loads.
  size_t label = code.size();
  for (size_t k = call + 1; k < mov_rsp; ++k) {
    if (code[k].kind != InsnKind::Jump || !is_imm(code[k], 0)) continue;
    auto t = index.find(static_cast<uint64_t>(code[k].ops[0].imm));
    if (t != index.end() && t->second > k && t->second <= mov_rsp) label = t->second;
  }
  bool loads_only = label < code.size();
  for (size_t k = label; loads_only && k < mov_rsp; ++k) {
    loads_only = is_kind(code[k], InsnKind::Mov, 2) && code[k].ops[0].kind == OpKind::Reg &&
                 code[k].ops[1].kind == OpKind::Mem;
  }
  if (!loads_only) {
    f.add(code[call].end(), stop, what, how, invalid());
    return;
  }
  f.add(code[call].end(), code[label].address, what, how, invalid());
  f.add(code[label].address, stop, "trace exit to interpreter, C frame in a register", how, cur_l);
}

// vm_return, returning from Lua to C (vm_x64.dasc "Return to C"): `and PC, -8; sub PC, BASE;
// neg PC` turns the frame link into the previous base, then the results are moved down over
// the returning frame (BASE, rdx, walks through them) and `mov L:RB->base, PC` stores it.
// During those three instructions PC is neither: Invalid. Until the store, neither the BASE
// register nor L->base describes a frame but PC holds the caller's base: VM_RETURNED (no Lua
// frame is read from the moved results). From the store to vm_leave_cp L->base is the
// caller's: VM_EMPTY, joined to vm_leave_cp's own range. Only when that range follows within
// a few straight-line instructions; otherwise nothing changes.
void add_return_to_c_window(Finder& f, const std::vector<Insn>& code, int64_t frame,
                            int32_t blanket_fp) {
  // rbx (GC64) or ebx: the 64-bit and the 32-bit form of the interpreter's PC (and BASE, rdx).
  auto is_vm_reg = [](const Insn& i, int n, int reg) {
    return i.op_count > n && i.ops[n].is_reg(reg) && (i.ops[n].size == 8 || i.ops[n].size == 4);
  };
  auto is_pc_reg = [&](const Insn& i, int n) { return is_vm_reg(i, n, kX86Rbx); };
  uint64_t leave_cp = 0;
  for (const cfi::Overlay& r : f.out) {
    if (r.row.hint == LJ_CFI_VM_EMPTY && r.what.rfind("vm_leave_cp", 0) == 0) leave_cp = r.begin;
  }
  if (leave_cp == 0) return;
  for (size_t i = 0; i + 2 < code.size(); ++i) {
    const Insn& a = code[i];
    // -8 in the 64-bit and the 32-bit (non-GC64) form (immediates are sign-extended).
    if (!(a.kind == InsnKind::And && is_pc_reg(a, 0) && is_imm(a, 1) && a.ops[1].imm == -8)) {
      continue;
    }
    const Insn& b = code[i + 1];
    const Insn& c = code[i + 2];
    if (!(b.kind == InsnKind::Sub && is_pc_reg(b, 0) && is_vm_reg(b, 1, kX86Rdx) &&
          c.kind == InsnKind::Neg && is_pc_reg(c, 0))) {
      continue;
    }
    size_t store = i + 3;
    while (store < code.size() && store < i + 16 && code[store].kind != InsnKind::Gap &&
           !(x_store_heap(code[store]) && is_pc_reg(code[store], 1)))
      ++store;
    if (store >= code.size() || store >= i + 16 || code[store].kind == InsnKind::Gap) continue;
    size_t k = store + 1;
    bool straight = true;
    while (k < code.size() && k < store + 16 && code[k].address < leave_cp) {
      const Insn& insn = code[k];
      straight &= insn.kind != InsnKind::Gap && !is_call(insn) && insn.kind != InsnKind::Ret &&
                  !is_jmp(insn);
      ++k;
    }
    if (!straight || k >= code.size() || code[k].address != leave_cp || f.covers(a.address)) {
      continue;
    }
    f.add(a.address, c.end(), "vm_return: PC becomes the previous base",
          f.how(a.address, "lj_vm_return"), invalid());
    f.add(c.end(), code[store].end(), "vm_return: results moved over the returning frame",
          f.how(a.address, "lj_vm_return"),
          sp_row(static_cast<int32_t>(frame), LJ_CFI_RULE_AT_CFA, blanket_fp, LJ_CFI_VM_RETURNED));
    f.add(code[store].end(), leave_cp, "vm_return: C frame linked, no Lua frame",
          f.how(a.address, "lj_vm_return"),
          sp_row(static_cast<int32_t>(frame), LJ_CFI_RULE_AT_CFA, blanket_fp, LJ_CFI_VM_EMPTY));
  }
}

// x86-64 (lj_frame.h CFRAME_SIZE; vm_x64.dasc saveregs/restoreregs, BC_JLOOP, vm_exit_handler,
// vm_exit_interp). `cfa` is the blanket rule's rsp offset (the C frame size).
// x86-64 ins_call (BC_CALL, BC_CALLM, vm_call_dispatch_f, vmeta_call and the iterator calls):
// at the store of the callee's frame link BASE is already the callee's and its function slot
// written, but the link is still in PC. Hint VM_LINK_PENDING on the blanket rule, for the store
// itself (the walker takes that frame's link from PC): before, a sample there read the slot's
// stale contents as the link.
void add_x86_pending_links(Finder& f, const std::vector<Insn>& code, int64_t frame,
                           int32_t blanket_fp) {
  for (const Insn& insn : code) {
    if (x_stores_frame_link(insn) && !f.covers(insn.address)) {
      f.add(insn.address, insn.end(), "call: frame link still in PC (mov [BASE-8], PC)", "pattern",
            sp_row(static_cast<int32_t>(frame), LJ_CFI_RULE_AT_CFA, blanket_fp,
                   LJ_CFI_VM_LINK_PENDING));
    }
  }
}

void detect_x86(Finder& f, const std::vector<Insn>& code, const std::map<uint64_t, size_t>& index,
                int32_t cfa, int32_t blanket_fp) {
  const int64_t frame = cfa;
  int64_t jit_extra = 0;  // CFRAME_SIZE_JIT - CFRAME_SIZE, from JLOOP's `sub rsp, imm`
  for (size_t i = 0; i < code.size(); ++i) {
    // Exit handler: >= 8 GPR pushes (with `lea rbp, [rsp+N]` in between), then state saves,
    // until `mov rsp, reg` restores the C frame from L->cframe. Entered from trace exit stubs
    // with an rsp only the trace knows: no static rule.
    if (x_push(code[i])) {
      size_t j = i;
      int pushes = 0;
      while (j < code.size() && (x_push(code[j]) || code[j].kind == InsnKind::Lea)) {
        pushes += x_push(code[j]) ? 1 : 0;
        ++j;
      }
      if (pushes >= 8) {
        // Up to `mov rsp, reg`; undecodable bytes before it leave the end unknown (no rule
        // from the handler's start to the VM's end, as when the move is not found at all).
        size_t k = j;
        while (k < code.size() && k < j + 256 && code[k].kind != InsnKind::Gap &&
               !x_mov_rsp_reg(code[k])) {
          ++k;
        }
        uint64_t stop = k < code.size() && x_mov_rsp_reg(code[k]) ? code[k].end() : f.vm.end;
        add_exit_handler(f, code, index, i, k, stop, frame, blanket_fp);
        while (i + 1 < code.size() && code[i + 1].address < stop) ++i;
        continue;
      }
      // Entry prologue: pushes then `sub rsp, imm` completing the C frame.
      if (j < code.size() && x_rsp_imm(code[j], InsnKind::Sub) && j > i) {
        int n = static_cast<int>(j - i);
        int64_t d0 = frame - code[j].ops[1].imm - 8 * n;
        bool pushes_rbp = false;
        for (size_t k = i; k < j; ++k) pushes_rbp |= is_reg(code[k], 0, kX86Rbp);
        // d0 == 8: called (RA only). d0 == 16 without push rbp: the FFI callback stub pushed
        // rbp before jumping here (vm_ffi_callback's saveregs_).
        if ((d0 == 8) || (d0 == 16 && !pushes_rbp)) {
          int64_t d = d0;
          uint8_t fp_rule = d0 == 16 ? LJ_CFI_RULE_AT_CFA : LJ_CFI_RULE_SAME;
          int32_t fp_off = d0 == 16 ? -16 : 0;
          const char* names[] = {"lj_vm_resume", "lj_vm_pcall", "lj_vm_call", "lj_vm_cpcall",
                                 "lj_vm_ffi_callback"};
          std::string how = "pattern", who = "VM entry";
          for (const char* nm : names) {
            const elf::Symbol* sym = f.file.find_symbol(nm);
            if (sym != nullptr && sym->value == code[i].address) {
              how = "symbol";
              who = nm;
            }
          }
          for (size_t k = i; k <= j; ++k) {
            // Not Keep: the C frame is not built yet, the caller's stack is as at the call.
            f.add(code[k].address, code[k].end(),
                  fmt::format("{} prologue before sub rsp,{:#x}", who, code[j].ops[1].imm), how,
                  sp_row(static_cast<int32_t>(d), fp_rule, fp_off, LJ_CFI_OK));
            if (k < j) {
              d += 8;
              if (is_reg(code[k], 0, kX86Rbp)) {
                fp_rule = LJ_CFI_RULE_AT_CFA;
                fp_off = static_cast<int32_t>(-d);
              }
            }
          }
          add_unlinked_entry_window(f, code, index, j + 1, who, frame, blanket_fp);
          i = j;
          continue;
        }
      }
    }
    // Epilogue: `add rsp, imm; pop...; ret` unwinding the C frame (vm_leave_*).
    if (x_rsp_imm(code[i], InsnKind::Add)) {
      size_t j = i + 1;
      while (j < code.size() && x_pop(code[j])) ++j;
      int n = static_cast<int>(j - i - 1);
      if (j < code.size() && code[j].kind == InsnKind::Ret &&
          frame - code[i].ops[1].imm - 8 * n == 8) {
        // Every path into `add rsp` (vm_leave_unw) has already unlinked this C frame from
        // L->cframe: vm_leave_cp restores SAVE_CFRAME just before, the error unwinder
        // (lj_err.c) and lj_ccallback_leave in C. From here on the frame is plain native code
        // for the walker: Ok rows, not Keep (the Lua walk would attach this L's frames to a
        // C frame that no longer holds them).
        const char* what = "VM exit epilogue (C frame unlinked)";
        f.add(code[i].address, code[i].end(), what, "pattern",
              sp_row(static_cast<int32_t>(frame), LJ_CFI_RULE_AT_CFA, blanket_fp, LJ_CFI_OK));
        // vm_leave_cp: `mov reg, [rsp+SAVE_CFRAME]; mov [L+cframe], reg; (no store or
        // branch)*` right before it: the frame is unlinked after that store too.
        for (size_t k = i; k-- > 1 && k + 4 > i;) {
          if (is_transfer(code[k]) || code[k].kind == InsnKind::Push) break;
          if (x_store_heap(code[k]) && x_load_rsp(code[k - 1]) &&
              code[k - 1].ops[0].reg == code[k].ops[1].reg) {
            // vm_leave_cp itself, up to its store: still linked, but it is reached only when
            // the frame holds no Lua frame any more (vm_return after moving the results and
            // setting L->base/L->top, vm_cpcall with no function to call): VM_EMPTY.
            f.add(code[k - 1].address, code[k].end(), "vm_leave_cp: C frame linked, no Lua frame",
                  f.how(code[k - 1].address, "lj_vm_leave_cp"),
                  sp_row(static_cast<int32_t>(frame), LJ_CFI_RULE_AT_CFA, blanket_fp,
                         LJ_CFI_VM_EMPTY));
            f.add(code[k].end(), code[i].address, what, "pattern",
                  sp_row(static_cast<int32_t>(frame), LJ_CFI_RULE_AT_CFA, blanket_fp, LJ_CFI_OK));
            break;
          }
          if (code[k].op_count > 0 && code[k].ops[0].kind == OpKind::Mem) break;
        }
        int64_t d = frame - code[i].ops[1].imm;
        uint8_t fp_rule = LJ_CFI_RULE_AT_CFA;
        int32_t fp_off = blanket_fp;
        for (size_t k = i + 1; k <= j; ++k) {
          f.add(code[k].address, code[k].end(), what, "pattern",
                sp_row(static_cast<int32_t>(d), fp_rule, fp_off, LJ_CFI_OK));
          d -= 8;
          if (is_reg(code[k], 0, kX86Rbp)) {
            fp_rule = LJ_CFI_RULE_SAME;
            fp_off = 0;
          }
        }
        i = j;
        continue;
      }
    }
    // JLOOP: `sub rsp, imm; (mov [rsp+N], reg)*; jmp reg` enters a trace with the JIT frame.
    if (x_rsp_imm(code[i], InsnKind::Sub)) {
      size_t j = i + 1;
      while (j < code.size() && j < i + 4 && x_store_rsp(code[j])) ++j;
      if (j < code.size() && x_jmp_reg(code[j])) {
        jit_extra = code[i].ops[1].imm;
        f.add(code[i].end(), code[j].end(),
              fmt::format("JLOOP after sub rsp,{:#x} (trace entry)", jit_extra),
              f.how(code[i].address, "lj_BC_JLOOP"),
              sp_row(static_cast<int32_t>(frame + jit_extra), LJ_CFI_RULE_AT_CFA, blanket_fp,
                     LJ_CFI_VM_CUR_L));
        i = j;
        continue;
      }
    }
  }
  add_return_to_c_window(f, code, frame, blanket_fp);
  add_x86_pending_links(f, code, frame, blanket_fp);
  // vm_exit_interp entry: `add rsp, <JIT extra>` right after an unconditional jmp (it is a
  // label reached from traces, which run with the JIT frame).
  if (jit_extra > 0) {
    for (size_t i = 1; i < code.size(); ++i) {
      if (is_jmp(code[i - 1]) && x_rsp_imm(code[i], InsnKind::Add) &&
          code[i].ops[1].imm == jit_extra) {
        if (f.covers(code[i].address)) continue;
        f.add(code[i].address, code[i].end(),
              fmt::format("trace exit to interpreter before add rsp,{:#x}", jit_extra),
              f.how(code[i].address, "lj_vm_exit_interp"),
              sp_row(static_cast<int32_t>(frame + jit_extra), LJ_CFI_RULE_AT_CFA, blanket_fp,
                     LJ_CFI_VM_CUR_L));
      }
    }
  }
}

// vm_arm64.dasc's fixed registers: BASE x19, PC x21.
constexpr int kA64Base = 19;
constexpr int kA64Pc = 21;

// An AArch64 row on sp: CFA = sp + cfa, with x30 and x29 still in their registers or, once
// `saved`, in the pair at CFA - 16 (`stp x29, x30, [sp, #S-16]`).
lj_cfi_row a64_sp_row(int32_t cfa, bool saved, uint8_t hint = LJ_CFI_OK) {
  lj_cfi_row r{};
  r.hint = hint;
  r.cfa_base = LJ_CFI_REG_SP;
  r.cfa_offset = cfa;
  r.ra_rule = saved ? LJ_CFI_RULE_AT_CFA : LJ_CFI_RULE_SAME;
  r.ra_offset = saved ? -8 : 0;
  r.fp_rule = saved ? LJ_CFI_RULE_AT_CFA : LJ_CFI_RULE_SAME;
  r.fp_offset = saved ? -16 : 0;
  return r;
}

// vm_arm64.dasc ins_call's `str PC, [BASE, FRAME_PC]`: a call storing its frame's link.
bool a64_stores_frame_link(const Insn& insn) {
  return insn.kind == InsnKind::Store && insn.op_count == 2 && is_reg(insn, 0, kA64Pc) &&
         insn.ops[1].kind == OpKind::Mem && insn.ops[1].base == kA64Base &&
         insn.ops[1].index == disasm::kNoReg && insn.ops[1].disp == -8;
}

// A register operand of `insn` is canonical register `reg`, at any width.
bool names_reg(const Insn& insn, int reg) {
  for (uint8_t k = 0; k < insn.op_count && k < insn.ops.size(); ++k) {
    const disasm::Operand& op = insn.ops[k];
    if ((op.kind == OpKind::Reg && op.reg == reg) || (op.kind == OpKind::Mem && op.base == reg)) {
      return true;
    }
  }
  return false;
}

// What a leaf helper may not do, per architecture: move the stack pointer (x86-64: push, pop,
// rsp arithmetic) or lose its return address (AArch64: call, which writes x30). Capstone 4's
// AArch64 write lists are unusable (disasm.h Insn::writes), so there any instruction naming sp
// or x30 counts, except the plain `ret` the caller checks: stricter than needed, never wrong.
bool disturbs_leaf_frame(elf::Arch arch, const Insn& insn) {
  if (arch == elf::Arch::X86_64) return x_push(insn) || x_pop(insn) || x_writes_rsp(insn);
  if (insn.kind == InsnKind::Ret) return false;
  return is_call(insn) || names_reg(insn, kA64Sp) || names_reg(insn, kA64Lr);
}

// A direct jump's or branch's target: the first operand on x86-64; AArch64 puts it last
// (`b.ne L`, `cbz x0, L`, `tbz w0, #4, L`).
std::optional<uint64_t> branch_target(elf::Arch arch, const Insn& insn) {
  if (insn.op_count == 0) return std::nullopt;
  const int k = arch == elf::Arch::X86_64 ? 0 : insn.op_count - 1;
  if (!is_imm(insn, k)) return std::nullopt;
  return static_cast<uint64_t>(insn.ops[k].imm);
}

// The interpreter's BASE and PC registers: vm_x64.dasc rdx/rbx, vm_arm64.dasc x19/x21 (on
// AArch64 naming one counts as writing it, see disturbs_leaf_frame).
bool writes_interpreter_regs(elf::Arch arch, const Insn& insn) {
  if (arch == elf::Arch::X86_64) return writes_vm_regs(insn);
  return names_reg(insn, kA64Base) || names_reg(insn, kA64Pc);
}

// The row of a leaf helper's instructions: x86-64 CFA = rsp + 8 (the return address the call
// pushed); AArch64 CFA = sp, the return address still in x30.
lj_cfi_row leaf_row(elf::Arch arch, bool keeps_vm_regs) {
  const uint8_t hint = keeps_vm_regs ? LJ_CFI_VM_LEAF : LJ_CFI_OK;
  if (arch == elf::Arch::X86_64) return sp_row(8, LJ_CFI_RULE_SAME, 0, hint);
  return a64_sp_row(0, false, hint);
}

// An AArch64 entry's straight-line path from `start`: the instructions up to `stop(i)` (which
// ends it, included) through fall-through of conditional branches and direct `b` jumps, or
// nullopt when it reaches anything else first (a call, an indirect jump, `ret`, undecodable
// bytes, code another rule already covers unless `joins` (then it ends before it: vm_pcall's
// path joins vm_call's, proven first), or more than kMaxWindowInsns instructions).
struct A64Path {
  std::vector<size_t> insns;
  bool joined = false;  // ended where an earlier path's rows begin
};
template <typename Stop>
std::optional<A64Path> a64_path_to(const Finder& f, const std::vector<Insn>& code,
                                   const std::map<uint64_t, size_t>& index, size_t start,
                                   bool joins, Stop stop) {
  constexpr size_t kMaxWindowInsns = 64;
  A64Path out;
  std::vector<size_t>& path = out.insns;
  size_t i = start;
  while (i < code.size() && path.size() < kMaxWindowInsns) {
    const Insn& insn = code[i];
    if (f.covers(insn.address) && joins && !path.empty()) {
      out.joined = true;
      return out;
    }
    if (f.covers(insn.address) || insn.kind == InsnKind::Gap || insn.kind == InsnKind::Ret ||
        insn.kind == InsnKind::JumpIndirect) {
      return std::nullopt;
    }
    path.push_back(i);
    if (stop(insn)) return out;
    if (is_call(insn)) return std::nullopt;
    if (insn.kind == InsnKind::Jump) {
      const std::optional<uint64_t> to = branch_target(elf::Arch::AArch64, insn);
      auto t = to ? index.find(*to) : index.end();
      if (t == index.end()) return std::nullopt;
      i = t->second;
      continue;
    }
    ++i;  // a conditional branch: its fall-through path
  }
  return std::nullopt;
}

// Adds `rows` for the instructions at `path` (merging neighbours).
void add_path(Finder& f, const std::vector<Insn>& code, const std::vector<size_t>& path,
              const std::string& what, const lj_cfi_row& row) {
  std::vector<size_t> sorted = path;
  std::sort(sorted.begin(), sorted.end());
  std::vector<cfi::Overlay> rows;
  for (size_t i : sorted) {
    if (!rows.empty() && rows.back().end == code[i].address) {
      rows.back().end = code[i].end();
    } else {
      rows.push_back({code[i].address, code[i].end(), what, "pattern", row});
    }
  }
  for (cfi::Overlay& r : rows) f.add(std::move(r));
}

// After an AArch64 entry's prologue the C frame is built (x29 set) but L->cframe does not point
// at it until the entry stores sp there (vm_arm64.dasc vm_call/vm_pcall/vm_cpcall
// `mov TMP0, sp; str TMP0, L->cframe`; vm_resume with CFRAME_RESUME added: `add TMP0, sp, #1`):
// exact native code meanwhile, the blanket rule with hint OK, up to and including that store.
// Returns the index of the instruction after the linking store, or nullopt (also when the path
// joins another entry's, proven before).
std::optional<size_t> add_a64_unlinked_window(Finder& f, const std::vector<Insn>& code,
                                              const std::map<uint64_t, size_t>& index, size_t start,
                                              const lj_cfi_row& blanket, bool fp_is_sp) {
  // Registers holding sp (x29 after the writeback prologue's `mov x29, sp`: Tarantool's fork
  // links with `str x29, L->cframe`).
  std::set<int> holds_sp = {kA64Sp};
  if (fp_is_sp) holds_sp.insert(kA64Fp);
  auto links_cframe = [&](const Insn& insn) {
    if (insn.kind == InsnKind::Store && insn.op_count == 2 && insn.ops[0].kind == OpKind::Reg &&
        insn.ops[0].reg != kA64Sp && holds_sp.count(insn.ops[0].reg) != 0 &&
        insn.ops[0].size == 8 && insn.ops[1].kind == OpKind::Mem && insn.ops[1].base != kA64Sp) {
      return true;
    }
    // Track the registers holding sp or sp + a CFRAME_* flag.
    if (insn.op_count >= 2 && insn.ops[0].kind == OpKind::Reg && insn.ops[0].size == 8) {
      auto sp_copy = [&](int k) {
        return insn.ops[k].kind == OpKind::Reg && insn.ops[k].size == 8 &&
               holds_sp.count(insn.ops[k].reg) != 0;
      };
      const bool from_sp = (insn.kind == InsnKind::Mov && insn.op_count == 2 && sp_copy(1)) ||
                           (insn.kind == InsnKind::Add && insn.op_count == 3 && sp_copy(1) &&
                            is_imm(insn, 2) && insn.ops[2].imm >= 0 && insn.ops[2].imm < 4);
      if (from_sp) {
        holds_sp.insert(insn.ops[0].reg);
      } else if (insn.kind != InsnKind::Store && insn.kind != InsnKind::StorePair &&
                 insn.kind != InsnKind::Compare && insn.ops[0].reg != kA64Sp) {
        holds_sp.erase(insn.ops[0].reg);
      }
    }
    return false;
  };
  const std::optional<A64Path> unlinked = a64_path_to(f, code, index, start, true, links_cframe);
  if (!unlinked) return std::nullopt;
  lj_cfi_row ok = blanket;
  ok.hint = LJ_CFI_OK;
  add_path(f, code, unlinked->insns, "VM entry: C frame built, not yet linked in L->cframe", ok);
  if (unlinked->joined) return std::nullopt;
  return unlinked->insns.back() + 1;
}

// After the link, until the entry pushes the first Lua frame onto its frame (vm_call: `str PC,
// [BASE, FRAME_PC]` after the check that the callee is a function; vm_cpcall: the call of its C
// function and the test of what it returned), the frame is linked but holds no Lua frame of its
// own: VM_EMPTY, over the entry's own straight-line code from `start` up to and including the
// frame push or a conditional branch (vm_resume's test for a suspended coroutine, which has Lua
// frames). Never into code that other branches reach (vm_call_dispatch, shared with BC_CALL's
// metamethod path, where the frame does hold Lua frames) unless every such branch is itself in
// an entry's linked, empty window (vm_resume starting a new coroutine, vm_cpcall calling what
// its C function returned: both join vm_call there); `empty_insns` holds those found so far.
// Returns false when a shared target stopped the window before it began (try again once more
// windows are known).
bool add_a64_empty_window(Finder& f, const std::vector<Insn>& code,
                          const std::map<uint64_t, std::vector<uint64_t>>& branch_sources,
                          std::set<uint64_t>* empty_insns, size_t start,
                          const lj_cfi_row& blanket) {
  auto shared = [&](uint64_t address) {
    auto it = branch_sources.find(address);
    if (it == branch_sources.end()) return false;
    for (uint64_t from : it->second) {
      if (empty_insns->count(from) == 0) return true;
    }
    return false;
  };
  std::vector<size_t> empty;
  for (size_t i = start; i < code.size() && empty.size() < 32; ++i) {
    const Insn& insn = code[i];
    if (f.covers(insn.address) || insn.kind == InsnKind::Gap || insn.kind == InsnKind::Ret ||
        is_jmp(insn)) {
      break;
    }
    if (shared(insn.address)) {
      if (empty.empty()) return false;
      break;
    }
    empty.push_back(i);
    if (a64_stores_frame_link(insn) || (is_transfer(insn) && !is_call(insn))) break;
  }
  if (empty.empty()) return true;
  for (size_t i : empty) empty_insns->insert(code[i].address);
  lj_cfi_row no_lua_frame = blanket;
  no_lua_frame.hint = LJ_CFI_VM_EMPTY;
  add_path(f, code, empty, "VM entry: C frame linked, no Lua frame on it yet", no_lua_frame);
  return true;
}

// vm_arm64.dasc ins_call's `str PC, [BASE, FRAME_PC]` (BC_CALL, BC_CALLM, vm_call_dispatch_f,
// vmeta_call; each right after the check that the callee is a function): the callee's frame
// is complete but for its link, which is still in PC. Hint VM_LINK_PENDING with the blanket
// rule, for the store instruction itself.
void add_a64_pending_links(Finder& f, const std::vector<Insn>& code, const lj_cfi_row& blanket) {
  lj_cfi_row pending = blanket;
  pending.hint = LJ_CFI_VM_LINK_PENDING;
  for (const Insn& insn : code) {
    if (a64_stores_frame_link(insn) && !f.covers(insn.address)) {
      f.add(insn.address, insn.end(), "call: frame link still in PC (str PC, [BASE, #-8])",
            "pattern", pending);
    }
  }
}

// vm_arm64.dasc vm_return, "Return to C": `and RB, PC, #~FRAME_TYPEP; sub RB, BASE, RB` turns
// the frame link into the caller's base, which `str RB, L->base` stores before the results are
// moved down over the returning frame (BASE moves with them). From that store on L->base is
// the caller's and this C frame holds no Lua frame: VM_EMPTY, up to and including the store
// that unlinks the frame (`ldr TMP, [sp]` SAVE_CFRAME, `str TMP, L->cframe`); from there to
// the epilogue the frame is plain native code (the blanket rule, hint OK). Fall-through paths
// only; a path that does not reach both stores adds nothing.
void add_a64_return_to_c(Finder& f, const std::vector<Insn>& code,
                         const std::map<uint64_t, size_t>& index, const lj_cfi_row& blanket) {
  auto store_to = [](const Insn& insn, int src, int base) {
    return insn.kind == InsnKind::Store && insn.op_count == 2 && is_reg(insn, 0, src) &&
           insn.ops[1].kind == OpKind::Mem && insn.ops[1].base == base;
  };
  for (size_t i = 0; i + 1 < code.size(); ++i) {
    const Insn& mask = code[i];
    if (!is_kind(mask, InsnKind::And, 3) || !is_reg(mask, 1, kA64Pc) || !is_imm(mask, 2) ||
        mask.ops[0].kind != OpKind::Reg) {
      continue;
    }
    size_t j = i + 1, k = 0;
    while (j < code.size() && j < i + 4 &&
           !(is_kind(code[j], InsnKind::Sub, 3) && is_reg(code[j], 1, kA64Base) &&
             is_reg(code[j], 2, mask.ops[0].reg))) {
      ++j;
    }
    if (j >= code.size() || j >= i + 4) continue;
    const int caller_base = code[j].ops[0].reg;
    for (k = j + 1; k < code.size() && k < j + 4; ++k) {
      if (code[k].op_count == 2 && code[k].ops[1].kind == OpKind::Mem &&
          code[k].ops[1].base != kA64Sp && store_to(code[k], caller_base, code[k].ops[1].base)) {
        break;
      }
    }
    if (k >= code.size() || k >= j + 4) continue;
    const int lreg = code[k].ops[1].base;
    std::set<int> from_frame;  // registers loaded from the C frame (SAVE_CFRAME at sp)
    auto unlinks = [&](const Insn& insn) {
      if (insn.kind == InsnKind::Store && insn.op_count == 2 && insn.ops[0].kind == OpKind::Reg &&
          from_frame.count(insn.ops[0].reg) != 0 && insn.ops[1].kind == OpKind::Mem &&
          insn.ops[1].base == lreg) {
        return true;
      }
      if (insn.op_count == 2 && insn.ops[0].kind == OpKind::Reg) {
        if (insn.kind == InsnKind::Load && insn.ops[1].kind == OpKind::Mem &&
            insn.ops[1].base == kA64Sp) {
          from_frame.insert(insn.ops[0].reg);
        } else if (insn.kind != InsnKind::Store && insn.kind != InsnKind::Compare) {
          from_frame.erase(insn.ops[0].reg);
        }
      }
      return false;
    };
    const std::optional<A64Path> empty = a64_path_to(f, code, index, k + 1, false, unlinks);
    if (!empty) continue;
    const std::optional<A64Path> leaving = a64_path_to(f, code, index, empty->insns.back() + 1,
                                                       true, [](const Insn&) { return false; });
    if (!leaving || !leaving->joined) continue;
    lj_cfi_row no_lua_frame = blanket;
    no_lua_frame.hint = LJ_CFI_VM_EMPTY;
    add_path(f, code, empty->insns, "VM return to C: L->base is the caller's", no_lua_frame);
    lj_cfi_row ok = blanket;
    ok.hint = LJ_CFI_OK;
    add_path(f, code, leaving->insns, "VM return to C: C frame unlinked from L->cframe", ok);
  }
}

// The instruction word of an AArch64 instruction (little-endian), 0 for anything else.
uint32_t a64_word(const Insn& insn) {
  uint32_t word = 0;
  if (insn.size != 4 || !read_struct(insn.byte_span(), 0, &word)) return 0;
  return word;
}

// `stp x29, x30, [sp, #-S]!` (STP 64-bit pre-index, Arm ARM C6.2.273: opc 10, imm7 scaled by
// 8, Rt2 x30, Rn sp, Rt x29): S, the frame it allocates. Matched on the encoding because the
// decoder reports no writeback.
std::optional<int64_t> a64_push_fp_lr(const Insn& insn) {
  const uint32_t w = a64_word(insn);
  if ((w & 0xffc07fffu) != 0xa9807bfdu) return std::nullopt;
  const int64_t imm7 = static_cast<int64_t>((w >> 15) & 0x7f);
  const int64_t offset = (imm7 >= 64 ? imm7 - 128 : imm7) * 8;
  if (offset >= 0) return std::nullopt;
  return -offset;
}

// `ldp x29, x30, [sp], #S` (LDP 64-bit post-index, Arm ARM C6.2.130): S > 0, the frame it
// frees.
std::optional<int64_t> a64_pop_fp_lr(const Insn& insn) {
  const uint32_t w = a64_word(insn);
  if ((w & 0xffc07fffu) != 0xa8c07bfdu) return std::nullopt;
  const int64_t imm7 = static_cast<int64_t>((w >> 15) & 0x7f);
  if (imm7 == 0 || imm7 >= 64) return std::nullopt;
  return imm7 * 8;
}

// AArch64 (vm_arm64.dasc saveregs/restoreregs, two generations): the blanket rule (CFA = x29
// + 16, or sp + the frame size in Tarantool's fork) holds only once the prologue has built the
// frame. The prologue and epilogue rows are plain native rows (hint OK): before the frame is
// built and after `ldp x29, x30` it is not linked in L->cframe, and the caller's stack is as
// at the call.
void detect_arm64(Finder& f, const std::vector<Insn>& code, const std::map<uint64_t, size_t>& index,
                  const lj_cfi_row& blanket) {
  auto sub_sp = [](const Insn& i) {
    return is_kind(i, InsnKind::Sub, 3) && is_reg(i, 0, kA64Sp) && is_reg(i, 1, kA64Sp) &&
           is_imm(i, 2);
  };
  auto add_sp = [](const Insn& i) {
    return is_kind(i, InsnKind::Add, 3) && is_reg(i, 0, kA64Sp) && is_reg(i, 1, kA64Sp) &&
           is_imm(i, 2);
  };
  // stp/ldp x29, x30, [sp, #off] (no writeback: those are InsnKind::Other).
  auto fp_lr_pair = [](const Insn& i, InsnKind kind) {
    return is_kind(i, kind, 3) && is_reg(i, 0, kA64Fp) && is_reg(i, 1, kA64Lr) &&
           i.ops[2].kind == OpKind::Mem && i.ops[2].base == kA64Sp;
  };
  // The first instruction after each prologue, and whether x29 equals sp there.
  std::vector<std::pair<size_t, bool>> entries;
  for (size_t i = 0; i + 1 < code.size(); ++i) {
    // Prologue with writeback (LuaJIT's older saveregs, Tarantool's fork): stp x29, x30, [sp,
    // #-S]!; mov x29, sp. The saved pair is at the bottom of the frame.
    if (const std::optional<int64_t> size = a64_push_fp_lr(code[i]);
        size && is_kind(code[i + 1], InsnKind::Mov, 2) && is_reg(code[i + 1], 0, kA64Fp) &&
        is_reg(code[i + 1], 1, kA64Sp)) {
      std::string what = fmt::format("VM entry prologue before mov x29, sp (frame {:#x})", *size);
      lj_cfi_row pushed = a64_sp_row(static_cast<int32_t>(*size), true);
      pushed.ra_offset = static_cast<int32_t>(8 - *size);
      pushed.fp_offset = static_cast<int32_t>(-*size);
      f.add(code[i].address, code[i].end(), what, "pattern", a64_sp_row(0, false));
      f.add(code[i + 1].address, code[i + 1].end(), what, "pattern", pushed);
      entries.emplace_back(i + 2, true);
      ++i;
      continue;
    }
    // Its epilogue: ldp x29, x30, [sp], #S; ret. At the ldp sp is back at the saved pair (the
    // frame is unlinked by then: hint OK); at the ret the return address is back in x30.
    if (const std::optional<int64_t> size = a64_pop_fp_lr(code[i]);
        size && code[i + 1].kind == InsnKind::Ret) {
      lj_cfi_row before = a64_sp_row(static_cast<int32_t>(*size), true);
      before.ra_offset = static_cast<int32_t>(8 - *size);
      before.fp_offset = static_cast<int32_t>(-*size);
      f.add(code[i].address, code[i].end(), "VM exit epilogue at ldp x29, x30 (writeback)",
            "pattern", before);
      f.add(code[i + 1].address, code[i + 1].end(), "VM exit epilogue after ldp x29, x30",
            "pattern", a64_sp_row(0, false));
      ++i;
      continue;
    }
    if (i + 2 >= code.size()) continue;
    // Prologue: sub sp, sp, #S; stp x29, x30, [sp, #S-16]; add x29, sp, #S-16.
    if (sub_sp(code[i]) && fp_lr_pair(code[i + 1], InsnKind::StorePair) &&
        code[i + 2].kind == InsnKind::Add && is_reg(code[i + 2], 0, kA64Fp) &&
        is_reg(code[i + 2], 1, kA64Sp)) {
      int64_t size = code[i].ops[2].imm;
      int64_t slot = code[i + 1].ops[2].disp;
      if (slot + 16 != size || !is_imm(code[i + 2], 2) || code[i + 2].ops[2].imm != slot) continue;
      std::string what = fmt::format("VM entry prologue before add x29, sp, #{:#x}", slot);
      f.add(code[i].address, code[i].end(), what, "pattern", a64_sp_row(0, false));
      f.add(code[i + 1].address, code[i + 1].end(), what, "pattern",
            a64_sp_row(static_cast<int32_t>(size), false));
      f.add(code[i + 2].address, code[i + 2].end(), what, "pattern",
            a64_sp_row(static_cast<int32_t>(size), true));
      entries.emplace_back(i + 3, false);
      i += 2;
      continue;
    }
    // Epilogue: ldp x29, x30, [sp, #S-16]; add sp, sp, #S; ret.
    if (fp_lr_pair(code[i], InsnKind::LoadPair) && add_sp(code[i + 1]) &&
        code[i + 2].kind == InsnKind::Ret) {
      int64_t size = code[i + 1].ops[2].imm;
      if (code[i].ops[2].disp + 16 != size) continue;
      f.add(code[i + 1].address, code[i + 1].end(), "VM exit epilogue after ldp x29, x30",
            "pattern", a64_sp_row(static_cast<int32_t>(size), false));
      f.add(code[i + 2].address, code[i + 2].end(), "VM exit epilogue after ldp x29, x30",
            "pattern", a64_sp_row(0, false));
      i += 2;
    }
  }
  // Where direct branches and calls land, and from where.
  std::map<uint64_t, std::vector<uint64_t>> branch_sources;
  for (const Insn& insn : code) {
    if (insn.kind != InsnKind::Jump && insn.kind != InsnKind::Branch &&
        insn.kind != InsnKind::CallDirect) {
      continue;
    }
    if (std::optional<uint64_t> to = branch_target(elf::Arch::AArch64, insn)) {
      branch_sources[*to].push_back(insn.address);
    }
  }
  std::vector<size_t> linked;  // where each entry's linked, empty window starts
  for (auto [e, fp_is_sp] : entries) {
    if (std::optional<size_t> l = add_a64_unlinked_window(f, code, index, e, blanket, fp_is_sp)) {
      linked.push_back(*l);
    }
  }
  // A window that starts at code shared with a later entry's window waits for that one (one
  // round per entry at most).
  std::set<uint64_t> empty_insns;
  for (size_t round = 0; round <= entries.size() && !linked.empty(); ++round) {
    std::vector<size_t> waiting;
    for (size_t l : linked) {
      if (!add_a64_empty_window(f, code, branch_sources, &empty_insns, l, blanket)) {
        waiting.push_back(l);
      }
    }
    if (waiting.size() == linked.size()) break;
    linked = std::move(waiting);
  }
  add_a64_pending_links(f, code, blanket);
  add_a64_return_to_c(f, code, index, blanket);
}

// The instructions reachable from `target` when it is a leaf helper (at most kMaxHelperInsns,
// every path ending in `ret`, none disturbing the frame), else nullopt.
std::optional<std::set<size_t>> leaf_helper_body(const Finder& f, elf::Arch arch,
                                                 const std::vector<Insn>& code,
                                                 const std::map<uint64_t, size_t>& index,
                                                 uint64_t target) {
  constexpr size_t kMaxHelperInsns = 512;
  std::set<size_t> reached;
  std::vector<size_t> work;
  auto start = index.find(target);
  if (start == index.end()) return std::nullopt;
  work.push_back(start->second);
  while (!work.empty()) {
    const size_t i = work.back();
    work.pop_back();
    if (!reached.insert(i).second) continue;
    const Insn& insn = code[i];
    if (reached.size() > kMaxHelperInsns || insn.kind == InsnKind::Gap ||
        disturbs_leaf_frame(arch, insn) || f.covers(insn.address)) {
      return std::nullopt;
    }
    // AArch64 `ret` returns through x30 only when it names no other register.
    if (insn.kind == InsnKind::Ret) {
      if (arch != elf::Arch::X86_64 && insn.op_count != 0 && !is_reg(insn, 0, kA64Lr)) {
        return std::nullopt;
      }
      continue;
    }
    if (is_jmp(insn) || insn.kind == InsnKind::Branch) {
      const std::optional<uint64_t> to = branch_target(arch, insn);
      auto t = to ? index.find(*to) : index.end();
      if (t == index.end()) return std::nullopt;
      work.push_back(t->second);
      if (is_jmp(insn)) continue;
    }
    if (i + 1 >= code.size()) return std::nullopt;
    work.push_back(i + 1);
  }
  return reached;
}

// Stripped builds (Debian's luajit, OpenResty's libluajit): the math helpers without symbols.
// They are the targets of direct calls from bytecode handlers to inside the VM (vm_x64.dasc
// BC_MODVN `call ->vm_mod`, math.floor `call ->vm_floor_sse`; vm_arm64.dasc `bl ->vm_modi`),
// and JIT traces call the same helpers (lj_ircall.h lj_vm_modi), so a sample may land in one
// with the return address pointing into trace code. A target gets the leaf rule only for the
// instructions reachable from it, and only when none of them disturbs the frame and every path
// ends in `ret`; anything else keeps the blanket rule, which stops the walk with a clear reason
// rather than guessing.
void add_called_leaf_helpers(Finder& f, elf::Arch arch, const std::vector<Insn>& code,
                             const std::map<uint64_t, size_t>& index) {
  // Real VMs call a handful of such helpers (5 distinct targets in Debian's libluajit); more
  // than this means the bytes are not a LuaJIT VM, and following each target would cost
  // targets x kMaxHelperInsns. Over the cap no helper gets a row (they keep the blanket rule).
  constexpr size_t kMaxHelperTargets = 64;
  std::set<uint64_t> targets;
  for (const Insn& insn : code) {
    if (insn.kind != InsnKind::CallDirect || !is_imm(insn, 0)) continue;
    const auto target = static_cast<uint64_t>(insn.ops[0].imm);
    if (target >= f.vm.begin && target < f.vm.end && !f.covers(target)) targets.insert(target);
    if (targets.size() > kMaxHelperTargets) return;
  }
  for (uint64_t target : targets) {
    const std::optional<std::set<size_t>> reached = leaf_helper_body(f, arch, code, index, target);
    if (!reached) continue;
    bool keeps_vm_regs = true;
    for (size_t i : *reached) keeps_vm_regs &= !writes_interpreter_regs(arch, code[i]);
    const lj_cfi_row leaf = leaf_row(arch, keeps_vm_regs);
    const std::string what = fmt::format("leaf helper called from the VM at {:#x}", target);
    std::vector<cfi::Overlay> rows;
    for (size_t i : *reached) {  // std::set: ascending addresses
      if (!rows.empty() && rows.back().end == code[i].address) {
        rows.back().end = code[i].end();
      } else {
        rows.push_back({code[i].address, code[i].end(), what, "pattern", leaf});
      }
    }
    for (cfi::Overlay& r : rows) f.add(std::move(r));
  }
}

}  // namespace

std::vector<cfi::Overlay> detect_vm_subranges(const elf::ElfFile& file, const VmInterval& vm,
                                              const lj_cfi_row& blanket) {
  Finder f{file, vm, {}, {}};
  if (vm.end <= vm.begin) return {};
  // The LuaJIT VM (DynASM output of vm_x64.dasc / vm_arm64.dasc) is code only; undecodable
  // bytes are Gap instructions, which end every pattern (fail closed). A VM that cannot be
  // decoded at all (unreadable, over the disassembler's cap) keeps its blanket rule.
  auto decoded = disasm::disassemble_range(file, vm.begin, vm.end - vm.begin);
  if (!decoded.ok()) return {};
  const std::vector<Insn>& code = *decoded;
  if (file.arch() == elf::Arch::X86_64) {
    if (blanket.cfa_base != LJ_CFI_REG_SP) return {};
    // Instruction index by address, for following direct jumps and calls.
    std::map<uint64_t, size_t> index;
    for (size_t i = 0; i < code.size(); ++i) index.emplace(code[i].address, i);
    detect_x86(f, code, index, blanket.cfa_offset,
               blanket.fp_rule == LJ_CFI_RULE_AT_CFA ? blanket.fp_offset : -16);
    // C-callable leaf helpers that live inside the VM FDE (vm_x64.dasc "Math helper
    // functions", lj_vm_cpuid): called like C functions, so CFA = rsp + 8 + pushes, not the C
    // frame. Only with symbols; any rsp change other than push/pop makes the helper Invalid.
    for (const char* name :
         {"lj_vm_floor", "lj_vm_ceil", "lj_vm_trunc", "lj_vm_floor_sse", "lj_vm_ceil_sse",
          "lj_vm_trunc_sse", "lj_vm_mod", "lj_vm_powi_sse", "lj_vm_cpuid"}) {
      const elf::Symbol* s = file.find_symbol(name);
      if (s == nullptr || s->size == 0 || s->value < vm.begin || s->value + s->size > vm.end) {
        continue;
      }
      std::vector<cfi::Overlay> rows;
      int64_t depth = 8;
      bool ok = true;
      uint64_t covered = s->value;
      bool keeps_vm_regs = true;
      for (const Insn& insn : code) {
        if (insn.address >= s->value && insn.address < s->value + s->size)
          keeps_vm_regs &= !writes_vm_regs(insn);
      }
      for (const Insn& insn : code) {
        if (insn.address < s->value || insn.address >= s->value + s->size) continue;
        if (insn.address != covered || insn.kind == InsnKind::Gap) ok = false;
        covered = insn.end();
        if (!ok || x_writes_rsp(insn) || depth < 8) {
          ok = false;
          break;
        }
        lj_cfi_row r = sp_row(static_cast<int32_t>(depth), LJ_CFI_RULE_SAME, 0,
                              keeps_vm_regs ? LJ_CFI_VM_LEAF : LJ_CFI_OK);
        if (!rows.empty() && rows.back().row.cfa_offset == r.cfa_offset) {
          rows.back().end = insn.end();
        } else {
          rows.push_back({insn.address, insn.end(), fmt::format("{}: C-callable leaf helper", name),
                          "symbol", r});
        }
        if (x_push(insn)) depth += 8;
        if (x_pop(insn)) depth -= 8;
        if (insn.kind == InsnKind::Ret) depth = 8;  // a later path starts from the entry depth
      }
      if (!ok || covered != s->value + s->size) {
        f.add(s->value, s->value + s->size, fmt::format("{}: unexpected stack use", name), "symbol",
              invalid());
        continue;
      }
      for (cfi::Overlay& r : rows) f.add(std::move(r));
    }
    add_called_leaf_helpers(f, elf::Arch::X86_64, code, index);
    // A named entry symbol whose prologue did not match gets no rule at all.
    for (const char* name : {"lj_vm_resume", "lj_vm_pcall", "lj_vm_call", "lj_vm_cpcall",
                             "lj_vm_exit_handler", "lj_BC_JLOOP"}) {
      const elf::Symbol* s = file.find_symbol(name);
      if (s == nullptr || s->value < vm.begin || s->value >= vm.end) continue;
      bool found = false;
      for (const cfi::Overlay& r : f.out)
        found |= r.how == "symbol" && r.begin >= s->value &&
                 r.begin < s->value + std::max<uint64_t>(s->size, 1);
      if (!found) {
        f.add(s->value, s->value + std::max<uint64_t>(s->size, 1),
              fmt::format("{}: expected instruction pattern not found", name), "symbol", invalid());
      }
    }
  } else {
    std::map<uint64_t, size_t> index;
    for (size_t i = 0; i < code.size(); ++i) index.emplace(code[i].address, i);
    detect_arm64(f, code, index, blanket);
    add_called_leaf_helpers(f, elf::Arch::AArch64, code, index);
  }
  std::sort(f.out.begin(), f.out.end(),
            [](const cfi::Overlay& a, const cfi::Overlay& b) { return a.begin < b.begin; });
  for (cfi::Overlay& r : f.out) r.row.pc_start = r.begin;
  return f.out;
}

}  // namespace ljprof::luajit
