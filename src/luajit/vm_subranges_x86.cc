// x86-64 VM sub-ranges (vm_x64.dasc / vm_x86.dasc): entry prologues and their windows,
// epilogues, the trace exit handler, JLOOP, vm_return, pending links and named leaf helpers.
#include <fmt/format.h>

#include <set>

#include "luajit/vm_subranges_internal.h"

namespace ljprof::luajit::vm_subranges_internal {

namespace {

// x86-64 instruction shapes only this file tests (the shared ones: vm_subranges_internal.h).
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

// Right after an entry links its C frame into L->cframe, and before it pushes the first Lua
// frame onto that C frame (vm_call: up to the check that the callee is a function; vm_cpcall:
// through the call of its C function, lj_frame.h "cframe w/o frame"), the frame holds no Lua
// frame: hint VM_EMPTY. Straight-line code only, up to (not including) the first branch, ret
// or jmp; a call ends the window after it.
void add_linked_empty_window(Finder& f, VmCode code, size_t start, const std::string& who,
                             int64_t frame, int32_t blanket_fp) {
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
void add_unlinked_entry_window(Finder& f, VmCode code, const std::map<uint64_t, size_t>& index,
                               size_t start, const std::string& who, int64_t frame,
                               int32_t blanket_fp) {
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
// After the call, up to its `jmp >1`, BASE and PC are read from L->base and the C frame's saved
// PC: VM_CUR_L_SAVED. Where the code joins vm_exit_interp's `1:` label before `mov rsp, reg`
// (GC64: `lea rcx, [rsp+16]` / `1: mov r13, [rcx-8]; mov r12, [rcx]; mov rsp, rcx`), the loads
// there run with BASE and PC in their registers on both paths: VM_CUR_L, and so does the `lea`,
// which only traces jump to. Code of any other shape stays Invalid.
void add_exit_handler(Finder& f, VmCode code, const std::map<uint64_t, size_t>& index, size_t first,
                      size_t mov_rsp, uint64_t stop, int64_t frame, int32_t blanket_fp) {
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
  // From lj_trace_exit's return to the handler's `jmp >1`, straight-line code loads BASE and PC
  // from L->base and the C frame's saved PC, where lj_trace_exit left them (non-GC64 moves rsp
  // to the C frame first): VM_CUR_L_SAVED.
  constexpr size_t kMaxLoads = 16;
  size_t jmp = call + 1;
  while (jmp < code.size() && jmp <= call + kMaxLoads && !is_transfer(code[jmp])) ++jmp;
  if (jmp >= code.size() || code[jmp].kind != InsnKind::Jump || !is_imm(code[jmp], 0)) {
    f.add(code[call].end(), stop, what, how, invalid());
    return;
  }
  f.add(code[call].end(), code[jmp].end(),
        "trace exit handler: BASE and PC in L->base and the C frame", how,
        sp_row(static_cast<int32_t>(frame), LJ_CFI_RULE_AT_CFA, blanket_fp, LJ_CFI_VM_CUR_L_SAVED));
  // Non-GC64: rsp is at the C frame before the jmp, and vm_exit_interp (`add rsp, 16` then the
  // label) has rows of its own.
  if (code[jmp].end() >= stop) return;
  // GC64: the jmp's target is the `1:` label; from there to `mov rsp, reg` only register loads.
  auto target = index.find(static_cast<uint64_t>(code[jmp].ops[0].imm));
  const size_t label = target != index.end() && target->second > jmp && target->second <= mov_rsp
                           ? target->second
                           : code.size();
  bool loads_only = label < code.size();
  for (size_t k = label; loads_only && k < mov_rsp; ++k) {
    loads_only = is_kind(code[k], InsnKind::Mov, 2) && code[k].ops[0].kind == OpKind::Reg &&
                 code[k].ops[1].kind == OpKind::Mem;
  }
  if (!loads_only) {
    f.add(code[jmp].end(), stop, what, how, invalid());
    return;
  }
  // GC64's vm_exit_interp entry, `lea reg, [rsp+N]` between the jmp and the label: reached only
  // from a trace's tail, with BASE and PC in their registers and the C frame at rsp + N (the
  // loads after the label take it from `reg`, `mov rsp, reg` moves there).
  const Insn& entry = code[jmp + 1];
  if (label == jmp + 2 && entry.kind == InsnKind::Lea && entry.op_count == 2 &&
      entry.ops[0].kind == OpKind::Reg && entry.ops[0].size == 8 &&
      entry.ops[1].kind == OpKind::Mem && entry.ops[1].base == kX86Rsp &&
      entry.ops[1].index == disasm::kNoReg && entry.ops[1].disp > 0 && entry.ops[1].disp <= 4096 &&
      is_reg(code[mov_rsp], 1, entry.ops[0].reg)) {
    f.add(entry.address, entry.end(), "trace exit to interpreter (vm_exit_interp entry)", how,
          sp_row(static_cast<int32_t>(frame + entry.ops[1].disp), LJ_CFI_RULE_AT_CFA, blanket_fp,
                 LJ_CFI_VM_CUR_L));
  } else {
    f.add(code[jmp].end(), code[label].address, what, how, invalid());
  }
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
void add_return_to_c_window(Finder& f, VmCode code, int64_t frame, int32_t blanket_fp) {
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

// x86-64 ins_call (BC_CALL, BC_CALLM, vm_call_dispatch_f, vmeta_call and the iterator calls):
// at the store of the callee's frame link BASE is already the callee's and its function slot
// written, but the link is still in PC. Hint VM_LINK_PENDING on the blanket rule, for the store
// itself (the walker takes that frame's link from PC): before, a sample there read the slot's
// stale contents as the link.
void add_x86_pending_links(Finder& f, VmCode code, int64_t frame, int32_t blanket_fp) {
  for (const Insn& insn : code) {
    if (x_stores_frame_link(insn) && !f.covers(insn.address)) {
      f.add(insn.address, insn.end(), "call: frame link still in PC (mov [BASE-8], PC)", "pattern",
            sp_row(static_cast<int32_t>(frame), LJ_CFI_RULE_AT_CFA, blanket_fp,
                   LJ_CFI_VM_LINK_PENDING));
    }
  }
}

// Exit handler: >= 8 GPR pushes (with `lea rbp, [rsp+N]` in between), then state saves, until
// `mov rsp, reg` restores the C frame from L->cframe. Entered from trace exit stubs with an rsp
// only the trace knows: no static rule. `pushes_end` is the first instruction after the pushes
// that start at `i`. Returns the index of its last instruction before its end (`stop`).
size_t add_x86_exit_handler_at(Finder& f, VmCode code, const std::map<uint64_t, size_t>& index,
                               size_t i, size_t pushes_end, int64_t frame, int32_t blanket_fp) {
  const size_t j = pushes_end;
  // Up to `mov rsp, reg`; undecodable bytes before it leave the end unknown (no rule from the
  // handler's start to the VM's end, as when the move is not found at all).
  size_t k = j;
  while (k < code.size() && k < j + 256 && code[k].kind != InsnKind::Gap &&
         !x_mov_rsp_reg(code[k])) {
    ++k;
  }
  uint64_t stop = k < code.size() && x_mov_rsp_reg(code[k]) ? code[k].end() : f.vm.end;
  add_exit_handler(f, code, index, i, k, stop, frame, blanket_fp);
  while (i + 1 < code.size() && code[i + 1].address < stop) ++i;
  return i;
}

// Entry prologue: the pushes [i, j) then `sub rsp, imm` at j completing the C frame. Returns
// whether its shape is an entry's (then rows for it and its unlinked window are added).
bool add_x86_entry_prologue(Finder& f, VmCode code, const std::map<uint64_t, size_t>& index,
                            size_t i, size_t j, int64_t frame, int32_t blanket_fp) {
  int n = static_cast<int>(j - i);
  int64_t d0 = frame - code[j].ops[1].imm - 8 * n;
  bool pushes_rbp = false;
  for (size_t k = i; k < j; ++k) pushes_rbp |= is_reg(code[k], 0, kX86Rbp);
  // d0 == 8: called (RA only). d0 == 16 without push rbp: the FFI callback stub pushed
  // rbp before jumping here (vm_ffi_callback's saveregs_).
  if (!((d0 == 8) || (d0 == 16 && !pushes_rbp))) return false;
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
  return true;
}

// A run of pushes at i: the exit handler's (>= 8) or an entry prologue's. Returns the index of
// the last instruction matched, or nullopt when the pushes start neither.
std::optional<size_t> add_x86_pushes(Finder& f, VmCode code,
                                     const std::map<uint64_t, size_t>& index, size_t i,
                                     int64_t frame, int32_t blanket_fp) {
  size_t j = i;
  int pushes = 0;
  while (j < code.size() && (x_push(code[j]) || code[j].kind == InsnKind::Lea)) {
    pushes += x_push(code[j]) ? 1 : 0;
    ++j;
  }
  if (pushes >= 8) return add_x86_exit_handler_at(f, code, index, i, j, frame, blanket_fp);
  if (j < code.size() && x_rsp_imm(code[j], InsnKind::Sub) && j > i &&
      add_x86_entry_prologue(f, code, index, i, j, frame, blanket_fp)) {
    return j;
  }
  return std::nullopt;
}

// vm_leave_cp: `mov reg, [rsp+SAVE_CFRAME]; mov [L+cframe], reg; (no store or branch)*` right
// before the epilogue's `add rsp` at i: the frame is unlinked after that store too.
void add_x86_leave_cp(Finder& f, VmCode code, size_t i, const char* what, int64_t frame,
                      int32_t blanket_fp) {
  for (size_t k = i; k-- > 1 && k + 4 > i;) {
    if (is_transfer(code[k]) || code[k].kind == InsnKind::Push) break;
    if (x_store_heap(code[k]) && x_load_rsp(code[k - 1]) &&
        code[k - 1].ops[0].reg == code[k].ops[1].reg) {
      // vm_leave_cp itself, up to its store: still linked, but it is reached only when
      // the frame holds no Lua frame any more (vm_return after moving the results and
      // setting L->base/L->top, vm_cpcall with no function to call): VM_EMPTY.
      f.add(code[k - 1].address, code[k].end(), "vm_leave_cp: C frame linked, no Lua frame",
            f.how(code[k - 1].address, "lj_vm_leave_cp"),
            sp_row(static_cast<int32_t>(frame), LJ_CFI_RULE_AT_CFA, blanket_fp, LJ_CFI_VM_EMPTY));
      f.add(code[k].end(), code[i].address, what, "pattern",
            sp_row(static_cast<int32_t>(frame), LJ_CFI_RULE_AT_CFA, blanket_fp, LJ_CFI_OK));
      break;
    }
    if (code[k].op_count > 0 && code[k].ops[0].kind == OpKind::Mem) break;
  }
}

// Epilogue: `add rsp, imm; pop...; ret` unwinding the C frame (vm_leave_*), the `add rsp` at i.
// Returns the index of its `ret`, or nullopt when the shape does not match.
std::optional<size_t> add_x86_epilogue(Finder& f, VmCode code, size_t i, int64_t frame,
                                       int32_t blanket_fp) {
  size_t j = i + 1;
  while (j < code.size() && x_pop(code[j])) ++j;
  int n = static_cast<int>(j - i - 1);
  if (!(j < code.size() && code[j].kind == InsnKind::Ret &&
        frame - code[i].ops[1].imm - 8 * n == 8)) {
    return std::nullopt;
  }
  // Every path into `add rsp` (vm_leave_unw) has already unlinked this C frame from
  // L->cframe: vm_leave_cp restores SAVE_CFRAME just before, the error unwinder
  // (lj_err.c) and lj_ccallback_leave in C. From here on the frame is plain native code
  // for the walker: Ok rows, not Keep (the Lua walk would attach this L's frames to a
  // C frame that no longer holds them).
  const char* what = "VM exit epilogue (C frame unlinked)";
  f.add(code[i].address, code[i].end(), what, "pattern",
        sp_row(static_cast<int32_t>(frame), LJ_CFI_RULE_AT_CFA, blanket_fp, LJ_CFI_OK));
  add_x86_leave_cp(f, code, i, what, frame, blanket_fp);
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
  return j;
}

// JLOOP: `sub rsp, imm; (mov [rsp+N], reg)*; jmp reg` enters a trace with the JIT frame, the
// `sub rsp` at i. Sets `jit_extra` (CFRAME_SIZE_JIT - CFRAME_SIZE) and returns the index of the
// `jmp`, or nullopt when the shape does not match.
std::optional<size_t> add_x86_jloop(Finder& f, VmCode code, size_t i, int64_t frame,
                                    int32_t blanket_fp, int64_t& jit_extra) {
  size_t j = i + 1;
  while (j < code.size() && j < i + 4 && x_store_rsp(code[j])) ++j;
  if (!(j < code.size() && x_jmp_reg(code[j]))) return std::nullopt;
  jit_extra = code[i].ops[1].imm;
  f.add(code[i].end(), code[j].end(),
        fmt::format("JLOOP after sub rsp,{:#x} (trace entry)", jit_extra),
        f.how(code[i].address, "lj_BC_JLOOP"),
        sp_row(static_cast<int32_t>(frame + jit_extra), LJ_CFI_RULE_AT_CFA, blanket_fp,
               LJ_CFI_VM_CUR_L));
  return j;
}

// vm_exit_interp entry: `add rsp, <JIT extra>` right after an unconditional jmp (it is a
// label reached from traces, which run with the JIT frame).
void add_x86_exit_interp_entry(Finder& f, VmCode code, int64_t frame, int32_t blanket_fp,
                               int64_t jit_extra) {
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

}  // namespace

// x86-64 (lj_frame.h CFRAME_SIZE; vm_x64.dasc saveregs/restoreregs, BC_JLOOP, vm_exit_handler,
// vm_exit_interp). `cfa` is the blanket rule's rsp offset (the C frame size).
void detect_x86(Finder& f, VmCode code, const std::map<uint64_t, size_t>& index, int32_t cfa,
                int32_t blanket_fp) {
  const int64_t frame = cfa;
  int64_t jit_extra = 0;  // CFRAME_SIZE_JIT - CFRAME_SIZE, from JLOOP's `sub rsp, imm`
  for (size_t i = 0; i < code.size(); ++i) {
    std::optional<size_t> last;
    if (x_push(code[i])) last = add_x86_pushes(f, code, index, i, frame, blanket_fp);
    if (!last && x_rsp_imm(code[i], InsnKind::Add)) {
      last = add_x86_epilogue(f, code, i, frame, blanket_fp);
    }
    if (!last && x_rsp_imm(code[i], InsnKind::Sub)) {
      last = add_x86_jloop(f, code, i, frame, blanket_fp, jit_extra);
    }
    if (last) i = *last;
  }
  add_return_to_c_window(f, code, frame, blanket_fp);
  add_x86_pending_links(f, code, frame, blanket_fp);
  if (jit_extra > 0) add_x86_exit_interp_entry(f, code, frame, blanket_fp, jit_extra);
}

namespace {

// The rows of a C-callable leaf helper at [begin, end): called like a C function, so CFA = rsp
// + 8 + pushes, not the C frame. Any rsp change other than push/pop makes the helper Invalid.
void add_x86_leaf_helper(Finder& f, VmCode code, const std::string& name, uint64_t begin,
                         uint64_t end, const char* how) {
  std::vector<cfi::Overlay> rows;
  int64_t depth = 8;
  bool ok = true;
  uint64_t covered = begin;
  bool keeps_vm_regs = true;
  for (const Insn& insn : code) {
    if (insn.address >= begin && insn.address < end) keeps_vm_regs &= !writes_vm_regs(insn);
  }
  for (const Insn& insn : code) {
    if (insn.address < begin || insn.address >= end) continue;
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
      rows.push_back(
          {insn.address, insn.end(), fmt::format("{}: C-callable leaf helper", name), how, r});
    }
    if (x_push(insn)) depth += 8;
    if (x_pop(insn)) depth -= 8;
    if (insn.kind == InsnKind::Ret) depth = 8;  // a later path starts from the entry depth
  }
  if (!ok || covered != end) {
    f.add(begin, end, fmt::format("{}: unexpected stack use", name), how, invalid());
    return;
  }
  for (cfi::Overlay& r : rows) f.add(std::move(r));
}

// vm_x64.dasc ->lj_vm_cpuid, byte for byte as DynASM encodes it for every non-Windows x86-64
// build (`mov eax, CARG1d; push rbx; xor ecx, ecx; cpuid; mov [rsi], eax; mov [rsi+4], ebx;
// mov [rsi+8], ecx; mov [rsi+12], edx; pop rbx; ret`). lj_jit.c's CPU detection calls it from
// C at start-up, where `cpuid` traps to the hypervisor on a virtual machine and so draws
// samples; stripped builds (Debian's luajit, libluajit) name it nowhere. The sequence holds the
// VM's only `cpuid`: matched whole, at instruction boundaries, or not at all.
constexpr uint8_t kCpuidHelper[] = {0x89, 0xf8, 0x53, 0x31, 0xc9, 0x0f, 0xa2, 0x89, 0x06, 0x89,
                                    0x5e, 0x04, 0x89, 0x4e, 0x08, 0x89, 0x56, 0x0c, 0x5b, 0xc3};

std::optional<uint64_t> find_cpuid_helper(VmCode code) {
  for (size_t i = 0; i < code.size(); ++i) {
    size_t matched = 0, k = i;
    while (k < code.size() && matched < sizeof kCpuidHelper) {
      const std::span<const uint8_t> b = code[k].byte_span();
      if (matched + b.size() > sizeof kCpuidHelper ||
          !std::equal(b.begin(), b.end(), kCpuidHelper + matched)) {
        break;
      }
      matched += b.size();
      ++k;
    }
    if (matched == sizeof kCpuidHelper) return code[i].address;
  }
  return std::nullopt;
}

}  // namespace

// C-callable leaf helpers that live inside the VM FDE (vm_x64.dasc "Math helper functions",
// lj_vm_cpuid), by symbol; lj_vm_cpuid also by its bytes when no symbol names it.
void add_x86_symbol_leaf_helpers(Finder& f, VmCode code) {
  for (const char* name :
       {"lj_vm_floor", "lj_vm_ceil", "lj_vm_trunc", "lj_vm_floor_sse", "lj_vm_ceil_sse",
        "lj_vm_trunc_sse", "lj_vm_mod", "lj_vm_powi_sse", "lj_vm_cpuid"}) {
    const elf::Symbol* s = f.file.find_symbol(name);
    if (s == nullptr || s->size == 0 || s->value < f.vm.begin || s->value + s->size > f.vm.end) {
      continue;
    }
    add_x86_leaf_helper(f, code, name, s->value, s->value + s->size, "symbol");
  }
  if (f.file.find_symbol("lj_vm_cpuid") != nullptr) return;
  if (const std::optional<uint64_t> at = find_cpuid_helper(code); at && !f.covers(*at)) {
    add_x86_leaf_helper(f, code, "lj_vm_cpuid", *at, *at + sizeof kCpuidHelper, "pattern");
  }
}

// A named entry symbol whose prologue did not match gets no rule at all.
void add_x86_unmatched_entry_symbols(Finder& f) {
  for (const char* name : {"lj_vm_resume", "lj_vm_pcall", "lj_vm_call", "lj_vm_cpcall",
                           "lj_vm_exit_handler", "lj_BC_JLOOP"}) {
    const elf::Symbol* s = f.file.find_symbol(name);
    if (s == nullptr || s->value < f.vm.begin || s->value >= f.vm.end) continue;
    bool found = false;
    for (const cfi::Overlay& r : f.out)
      found |= r.how == "symbol" && r.begin >= s->value &&
               r.begin < s->value + std::max<uint64_t>(s->size, 1);
    if (!found) {
      f.add(s->value, s->value + std::max<uint64_t>(s->size, 1),
            fmt::format("{}: expected instruction pattern not found", name), "symbol", invalid());
    }
  }
}

}  // namespace ljprof::luajit::vm_subranges_internal
