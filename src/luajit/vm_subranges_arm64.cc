// AArch64 VM sub-ranges (vm_arm64.dasc, two saveregs generations): entry prologues and their
// unlinked and empty windows, epilogues, pending frame links, the return to C and the trace
// exit handler.
#include <fmt/format.h>

#include <set>

#include "common/bounds.h"
#include "luajit/vm_subranges_internal.h"

namespace ljprof::luajit::vm_subranges_internal {

namespace {

// vm_arm64.dasc ins_call's `str PC, [BASE, FRAME_PC]`: a call storing its frame's link.
bool a64_stores_frame_link(const Insn& insn) {
  return insn.kind == InsnKind::Store && insn.op_count == 2 && is_reg(insn, 0, kA64Pc) &&
         insn.ops[1].kind == OpKind::Mem && insn.ops[1].base == kA64Base &&
         insn.ops[1].index == disasm::kNoReg && insn.ops[1].disp == -8;
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
std::optional<A64Path> a64_path_to(const Finder& f, VmCode code,
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
void add_path(Finder& f, VmCode code, const std::vector<size_t>& path, const std::string& what,
              const lj_cfi_row& row) {
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
std::optional<size_t> add_a64_unlinked_window(Finder& f, VmCode code,
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
bool add_a64_empty_window(Finder& f, VmCode code,
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
void add_a64_pending_links(Finder& f, VmCode code, const lj_cfi_row& blanket) {
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
void add_a64_return_to_c(Finder& f, VmCode code, const std::map<uint64_t, size_t>& index,
                         const lj_cfi_row& blanket) {
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

// The prologues and epilogues of the AArch64 entries and exits (plain native rows, see
// detect_arm64). Returns the first instruction after each prologue, and whether x29 equals sp
// there.
std::vector<std::pair<size_t, bool>> add_a64_prologues_and_epilogues(Finder& f, VmCode code) {
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
  std::vector<std::pair<size_t, bool>> entries;
  for (size_t i = 0; i + 1 < code.size(); ++i) {
    // Prologue with writeback (LuaJIT's older saveregs, Tarantool's fork): stp x29, x30, [sp,
    // #-S]!; mov x29, sp. The saved pair is at the bottom of the frame.
    if (const std::optional<int64_t> size = a64_push_fp_lr(code[i]);
        size && is_kind(code[i + 1], InsnKind::Mov, 2) && is_reg(code[i + 1], 0, kA64Fp) &&
        is_reg(code[i + 1], 1, kA64Sp)) {
      std::string what = fmt::format("VM entry prologue before mov x29, sp (frame {:#x})", *size);
      lj_cfi_row pushed = a64_sp_row(static_cast<int32_t>(*size), true);
      pushed.ra_offset = static_cast<int16_t>(8 - *size);
      pushed.fp_offset = static_cast<int16_t>(-*size);
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
      before.ra_offset = static_cast<int16_t>(8 - *size);
      before.fp_offset = static_cast<int16_t>(-*size);
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
  return entries;
}

// Where direct branches and calls land, and from where.
std::map<uint64_t, std::vector<uint64_t>> a64_branch_sources(VmCode code) {
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
  return branch_sources;
}

// Each entry's unlinked window from the first instruction after its prologue (`entries`, see
// add_a64_prologues_and_epilogues), then the linked, empty window after its link.
void add_a64_entry_windows(Finder& f, VmCode code, const std::map<uint64_t, size_t>& index,
                           const std::map<uint64_t, std::vector<uint64_t>>& branch_sources,
                           const std::vector<std::pair<size_t, bool>>& entries,
                           const lj_cfi_row& blanket) {
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
}

// vm_arm64.dasc vm_cpcall: `blr` the C function, then `cbnz x19, vm_call` (call what it
// returned) and, falling through with nothing to call, `b ->vm_leave_cp`. The entry's empty
// window ends at the cbnz; the `b` after it still runs on a linked C frame with no Lua frame
// (BASE holds the C function's NULL), and so does vm_leave_cp, whose rows are VM_EMPTY up to
// its unlink. So a direct `b` that only that window falls into (no branch lands on it) and that
// jumps to the start of a VM_EMPTY row is VM_EMPTY too.
void add_a64_empty_fallthrough_jumps(
    Finder& f, VmCode code, const std::map<uint64_t, std::vector<uint64_t>>& branch_sources,
    const lj_cfi_row& blanket) {
  std::map<uint64_t, std::pair<uint64_t, uint8_t>> rows;  // begin -> (end, hint)
  for (const cfi::Overlay& o : f.out) rows[o.begin] = {o.end, o.row.hint};
  auto empty_at = [&](uint64_t pc) {
    auto it = rows.upper_bound(pc);
    if (it == rows.begin()) return false;
    --it;
    return pc < it->second.first && it->second.second == LJ_CFI_VM_EMPTY;
  };
  lj_cfi_row no_lua_frame = blanket;
  no_lua_frame.hint = LJ_CFI_VM_EMPTY;
  for (size_t i = 1; i < code.size(); ++i) {
    const Insn& b = code[i];
    if (b.kind != InsnKind::Jump || f.covers(b.address) || branch_sources.count(b.address) != 0) {
      continue;
    }
    const Insn& before = code[i - 1];
    const std::optional<uint64_t> to = branch_target(elf::Arch::AArch64, b);
    if (before.kind != InsnKind::Branch || !to || !empty_at(before.address) || !empty_at(*to)) {
      continue;
    }
    f.add(b.address, b.end(), "VM entry: jump to the return to C, no Lua frame on the C frame",
          "pattern", no_lua_frame);
  }
}

// The trace exit handler (vm_arm64.dasc vm_exit_handler, the same in every generation here):
// entered from a trace's exit stub, `sub sp, sp, #(64*8)` and 31 `stp` (x0..x29, d0..d31) below
// the trace's sp; L = G->cur_L, BASE = G->jit_base stored into L->base before jit_base is cleared;
// `bl lj_trace_exit`. On return: `ldr CARG2, L->cframe; ldr BASE, L->base; and sp, CARG2,
// #CFRAME_RAWMASK; ldr PC, SAVE_PC; str L, SAVE_L; b >1` into vm_exit_interp, where BASE and PC
// are in their registers and sp is the C frame's again. Rows as on x86-64
// (vm_subranges_x86.cc add_exit_handler): VM_EXIT up to the bl's first byte (sampled pcs; the
// C frame is found through G->cur_L, not sp), VM_CUR_L for the rest of the bl (its return
// address), VM_CUR_L_SAVED from the return to the `b` included. A handler of another shape
// after its `sub` is Invalid up to its call.
void add_a64_exit_handler(Finder& f, VmCode code, const lj_cfi_row& blanket) {
  constexpr int64_t kSavedBytes = 64 * 8;
  constexpr size_t kMinPairs = 31, kMaxHandlerInsns = 64, kMaxAfterCall = 8;
  const char* what = "trace exit handler (every register stored, sp from the trace)";
  auto row = [&](uint8_t hint) {
    lj_cfi_row r = blanket;
    r.hint = hint;
    return r;
  };
  for (size_t i = 0; i < code.size(); ++i) {
    const Insn& sub = code[i];
    if (!is_kind(sub, InsnKind::Sub, 3) || !is_reg(sub, 0, kA64Sp) || !is_reg(sub, 1, kA64Sp) ||
        !is_imm(sub, 2) || sub.ops[2].imm != kSavedBytes || f.covers(sub.address)) {
      continue;
    }
    size_t pairs = 0, call = code.size(), k = i + 1;
    for (; k < code.size() && k <= i + kMaxHandlerInsns && !is_transfer(code[k]); ++k) {
      pairs += code[k].kind == InsnKind::StorePair ? 1 : 0;
    }
    if (k < code.size() && code[k].kind == InsnKind::CallDirect) call = k;
    if (pairs < kMinPairs) continue;  // not the handler: some other frame of 512 bytes
    const std::string how = f.how(sub.address, "lj_vm_exit_handler");
    size_t jmp = call + 1;
    bool sp_from_cframe = false;
    for (; call < code.size() && jmp < code.size() && jmp <= call + kMaxAfterCall &&
           !is_transfer(code[jmp]);
         ++jmp) {
      const Insn& a = code[jmp];
      sp_from_cframe |= is_kind(a, InsnKind::And, 3) && is_reg(a, 0, kA64Sp) && is_imm(a, 2) &&
                        a.ops[2].imm == -4;  // lj_frame.h CFRAME_RAWMASK
    }
    if (call == code.size() || jmp >= code.size() || code[jmp].kind != InsnKind::Jump ||
        !sp_from_cframe) {
      f.add(sub.address, code[std::min(k, code.size() - 1)].end(), what, how, invalid());
      continue;
    }
    f.add(sub.address, code[call].address + 1, what, how, row(LJ_CFI_VM_EXIT));
    f.add(code[call].address + 1, code[call].end(), "trace exit handler: return from lj_trace_exit",
          how, row(LJ_CFI_VM_CUR_L));
    f.add(code[call].end(), code[jmp].end(),
          "trace exit handler: BASE and PC in L->base and the C frame", how,
          row(LJ_CFI_VM_CUR_L_SAVED));
    i = jmp;
  }
}

}  // namespace

// AArch64 (vm_arm64.dasc saveregs/restoreregs, two generations): the blanket rule (CFA = x29
// + 16, or sp + the frame size in Tarantool's fork) holds only once the prologue has built the
// frame. The prologue and epilogue rows are plain native rows (hint OK): before the frame is
// built and after `ldp x29, x30` it is not linked in L->cframe, and the caller's stack is as
// at the call.
void detect_arm64(Finder& f, VmCode code, const std::map<uint64_t, size_t>& index,
                  const lj_cfi_row& blanket) {
  const std::vector<std::pair<size_t, bool>> entries = add_a64_prologues_and_epilogues(f, code);
  // Where direct branches land, from where: asked by two patterns, computed once.
  const std::map<uint64_t, std::vector<uint64_t>> branch_sources = a64_branch_sources(code);
  add_a64_entry_windows(f, code, index, branch_sources, entries, blanket);
  add_a64_pending_links(f, code, blanket);
  add_a64_return_to_c(f, code, index, blanket);
  add_a64_empty_fallthrough_jumps(f, code, branch_sources, blanket);
  add_a64_exit_handler(f, code, blanket);
}

}  // namespace ljprof::luajit::vm_subranges_internal
