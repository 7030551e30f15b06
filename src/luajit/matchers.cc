#include "luajit/matchers.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

namespace ljprof::luajit {

namespace {

using Kind = Operand::Kind;

bool is_x86(const Code& c) {
  return c.arch == elf::Arch::X86_64;
}
int stack_reg(const Code& c) {
  return is_x86(c) ? kX86Rsp : kA64Sp;
}
int return_reg(const Code&) {
  return 0;
}  // rax / x0
int arg0_reg(const Code& c) {
  return is_x86(c) ? 7 : 0;
}  // rdi / x0

bool plain_mem(const Operand& m) {
  return m.kind == Kind::Mem && m.base != kNoReg && m.index == kNoReg;
}

struct LoadView {
  int dst = kNoReg;
  int base = kNoReg;
  int64_t disp = 0;
  uint8_t size = 0;
};

// dst <- [base + disp] (no index register, no writeback).
std::optional<LoadView> as_load(const Code& c, const Insn& i) {
  if (i.op_count != 2 || i.ops[0].kind != Kind::Reg || !plain_mem(i.ops[1])) return std::nullopt;
  if (is_x86(c) ? i.kind != InsnKind::Mov : i.kind != InsnKind::Load) return std::nullopt;
  if (i.ops[0].reg == kNoReg) return std::nullopt;
  return LoadView{i.ops[0].reg, i.ops[1].base, i.ops[1].disp,
                  is_x86(c) ? i.ops[0].size : i.access_size};
}

struct StoreView {
  bool is_imm = false;
  int64_t imm = 0;
  int src = kNoReg;
  int base = kNoReg;
  int64_t disp = 0;
  uint8_t size = 0;
};

// [base + disp] <- src register or immediate (AArch64 xzr/wzr is the immediate 0).
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

bool caller_saved(const Code& c, int reg) {
  if (is_x86(c))
    return reg == 0 || reg == 1 || reg == 2 || reg == 6 || reg == 7 || (reg >= 8 && reg <= 11);
  return (reg >= 0 && reg <= 18) || reg == 30;
}

bool starts_with(const std::string& s, const char* prefix) {
  return s.rfind(prefix, 0) == 0;
}

// Whether `i` may change `reg` (conservative: unknown instructions with `reg` first do, and
// undecodable bytes may hide anything).
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

// Windows of consecutive instructions never reach across a Gap: the undecodable bytes may
// hide any instruction, so a pattern that needs the instructions on both sides is unproven.
// The end (exclusive) of the forward window [from, from + len): the first Gap in it, else its
// end within the code.
size_t window_end(const Code& c, size_t from, size_t len) {
  const size_t limit = std::min(c.insns.size(), from + len);
  for (size_t i = from; i < limit; ++i) {
    if (c.insns[i].kind == InsnKind::Gap) return i;
  }
  return limit;
}

// The start of the backward window of up to `len` instructions before insns[at]: right after
// the nearest Gap in it.
size_t window_begin(const Code& c, size_t at, size_t len) {
  const size_t lo = at > len ? at - len : 0;
  for (size_t i = at; i-- > lo;) {
    if (c.insns[i].kind == InsnKind::Gap) return i + 1;
  }
  return lo;
}

// The constant held by `reg` just before insns[at], if the nearest earlier write to it
// (within `window` instructions) is a move of an immediate (or x86 `xor r, r`).
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

// Value stored by a store: its immediate, or the constant its source register holds.
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

}  // namespace

Evidence evidence_of(const Code& code, const Insn& insn, std::string role) {
  return Evidence{code.function, insn.address, hex_bytes(insn.byte_span()), insn.text,
                  std::move(role)};
}

Result<LuaCloseMatch> match_lua_close(const Code& c) {
  std::vector<int> l_alias = {arg0_reg(c)};
  auto is_l = [&](int r) {
    for (int a : l_alias)
      if (a == r) return true;
    return false;
  };
  const size_t n = window_end(c, 0, 96);  // data flow from the entry: up to a Gap
  for (size_t k = 0; k < n; ++k) {
    const Insn& i = c.insns[k];
    if (i.kind == InsnKind::Mov && i.op_count == 2 && i.ops[0].kind == Kind::Reg &&
        i.ops[1].kind == Kind::Reg && is_l(i.ops[1].reg) && i.ops[1].size == 8) {
      l_alias.push_back(i.ops[0].reg);
      continue;
    }
    auto load = as_load(c, i);
    if (!load || !is_l(load->base)) {
      if (i.kind == InsnKind::CallDirect || i.kind == InsnKind::CallIndirect) break;
      continue;
    }
    if (load->size != 4 && load->size != 8) break;
    LuaCloseMatch m;
    m.glref_offset = load->disp;
    m.ref_width = load->size;
    m.glref_load = evidence_of(c, i, "g = mref(L->glref)");
    if (m.glref_offset < 0 || m.glref_offset >= 256 || m.glref_offset % m.ref_width != 0) {
      return make_error(
          "{}: L->glref load at offset {} is out of range or misaligned (rule: "
          "lua_State.glref in [0, 256), aligned to the MRef width)",
          where(c, i), m.glref_offset);
    }
    const int g = load->dst;
    for (size_t j = k + 1; j < n; ++j) {
      const Insn& s = c.insns[j];
      auto st = as_store(c, s);
      if (st && st->base == g && st->is_imm && st->imm == 0) {
        if (st->size != m.ref_width) {
          return make_error(
              "{}: first zero store through g is {} bytes, expected the GCRef "
              "width {} of the L->glref load (setgcrefnull(g->cur_L))",
              where(c, s), st->size, m.ref_width);
        }
        if (st->disp <= 0 || st->disp >= 0x1000 || st->disp % m.ref_width != 0) {
          return make_error("{}: g->cur_L offset {} is out of range (0, 4096) or misaligned",
                            where(c, s), st->disp);
        }
        m.cur_L = st->disp;
        m.cur_L_store = evidence_of(c, s, "setgcrefnull(g->cur_L)");
        return m;
      }
      if (writes_reg(c, s, g)) {
        return make_error(
            "{}: the g register {} is overwritten before a zero store through it "
            "(expected setgcrefnull(g->cur_L))",
            where(c, s), register_name(c.arch, g));
      }
    }
    return make_error(
        "{}: no zero store through g ({}) after the L->glref load at {:#x} "
        "(expected setgcrefnull(g->cur_L))",
        c.function, register_name(c.arch, g), i.address);
  }
  return make_error(
      "{}: no load from [L + disp] through the first argument register {} "
      "(expected g = G(L), the L->glref load)",
      c.function, register_name(c.arch, arg0_reg(c)));
}

Result<ExitHandlerMatch> match_exit_handler(const Code& c) {
  std::vector<ExitHandlerMatch> found;
  std::string first_reject;
  auto reject = [&](const Insn& at, const std::string& why) {
    if (first_reject.empty()) first_reject = fmt::format("{}: {}", where(c, at), why);
  };
  const size_t n = c.insns.size();
  for (size_t k = 0; k < n; ++k) {
    const Insn& clear = c.insns[k];
    auto st = as_store(c, clear);
    if (!st || !st->is_imm || st->imm != 0 || (st->size != 4 && st->size != 8)) continue;
    if (!valid_base(c, st->base)) continue;
    size_t call = 0;
    for (size_t q = k + 1; q < window_end(c, k + 1, 3); ++q) {
      if (c.insns[q].kind == InsnKind::CallDirect) {
        call = q;
        break;
      }
    }
    if (call == 0) continue;
    const int d = st->base;
    if (!dispatch_disp_ok(c, st->disp)) {
      reject(clear, fmt::format("zero store before a call has displacement {} from {}, "
                                "expected a {} DISPATCH/GL-relative displacement",
                                st->disp, register_name(c.arch, d),
                                is_x86(c) ? "negative signed disp32" : "non-negative"));
      continue;
    }
    ExitHandlerMatch m;
    m.dispatch_reg = d;
    m.ref_width = st->size;
    m.jit_base = st->disp;
    m.site = clear.address;
    const size_t lo = window_begin(c, k, 48);
    // BASE = [D + jit_base]
    std::optional<size_t> jb_load;
    int base_reg = kNoReg;
    for (size_t j = k; j-- > lo;) {
      auto ld = as_load(c, c.insns[j]);
      if (ld && ld->base == d && ld->disp == st->disp && ld->size == st->size) {
        jb_load = j;
        base_reg = ld->dst;
        break;
      }
    }
    if (!jb_load) {
      reject(clear, fmt::format("no load of [{} {:+#x}] (jit_base) before the clear",
                                register_name(c.arch, d), st->disp));
      continue;
    }
    // L->base = BASE, where L = [D + cur_L]
    bool have_l = false;
    for (size_t j = *jb_load + 1; j < k && !have_l; ++j) {
      auto bs = as_store(c, c.insns[j]);
      if (!bs || bs->is_imm || bs->src != base_reg || bs->base == d || !valid_base(c, bs->base)) {
        continue;
      }
      for (size_t h = j; h-- > lo;) {
        auto ll = as_load(c, c.insns[h]);
        if (ll && ll->dst == bs->base && ll->base == d && ll->size == st->size &&
            ll->disp != st->disp && dispatch_disp_ok(c, ll->disp)) {
          m.cur_L = ll->disp;
          m.L_base = bs->disp;
          m.evidence.push_back(evidence_of(c, c.insns[h], "L = G->cur_L"));
          m.evidence.push_back(evidence_of(c, c.insns[*jb_load], "BASE = G->jit_base"));
          m.evidence.push_back(evidence_of(c, c.insns[j], "L->base = BASE"));
          have_l = true;
          break;
        }
        if (writes_reg(c, c.insns[h], bs->base)) break;
      }
    }
    if (!have_l) {
      reject(clear, "no `L->base = BASE` store through a register loaded from cur_L");
      continue;
    }
    // set_vmstate EXIT: the last negative constant stored as 4 bytes to [D + disp].
    bool have_state = false;
    for (size_t j = k; j-- > lo;) {
      auto vs = as_store(c, c.insns[j]);
      if (!vs || vs->base != d || vs->size != 4 || vs->disp == m.jit_base || vs->disp == m.cur_L ||
          !dispatch_disp_ok(c, vs->disp)) {
        continue;
      }
      auto v = stored_value(c, j, *vs);
      if (!v || !is_state_value(*v)) continue;
      m.vmstate = vs->disp;
      m.exit_state = static_cast<int32_t>(*v);
      m.evidence.push_back(evidence_of(c, c.insns[j], "set_vmstate EXIT"));
      have_state = true;
      break;
    }
    if (!have_state) {
      reject(clear, "no `set_vmstate EXIT` (negative constant stored to [D + disp]) before it");
      continue;
    }
    m.evidence.push_back(evidence_of(c, clear, "G->jit_base = 0"));
    m.evidence.push_back(evidence_of(c, c.insns[call], "call lj_trace_exit"));
    // After the call: rcx/x1 = L->cframe; and ..., CFRAME_RAWMASK (-4)
    const int l_reg = [&] {
      for (size_t h = k; h-- > lo;) {
        auto ll = as_load(c, c.insns[h]);
        if (ll && ll->base == d && ll->disp == m.cur_L) return ll->dst;
      }
      return kNoReg;
    }();
    bool have_cframe = false;
    for (size_t q = call + 1; q < window_end(c, call + 1, 4) && !have_cframe; ++q) {
      auto cl = as_load(c, c.insns[q]);
      if (!cl || cl->base != l_reg || cl->size != 8) continue;
      for (size_t r = q + 1; r < window_end(c, q + 1, 3); ++r) {
        const Insn& a = c.insns[r];
        if (a.kind != InsnKind::And) continue;
        const bool src_ok = is_x86(c) ? (a.op_count == 2 && a.ops[0].is_reg(cl->dst) &&
                                         a.ops[1].kind == Kind::Imm && a.ops[1].imm == -4)
                                      : (a.op_count == 3 && a.ops[1].is_reg(cl->dst) &&
                                         a.ops[2].kind == Kind::Imm && a.ops[2].imm == -4);
        if (!src_ok) continue;
        m.L_cframe = cl->disp;
        m.evidence.push_back(evidence_of(c, c.insns[q], "L->cframe"));
        m.evidence.push_back(evidence_of(c, a, "& CFRAME_RAWMASK"));
        have_cframe = true;
        const int frame = a.ops[0].reg;
        for (size_t t = r + 1; t < window_end(c, r + 1, 7); ++t) {
          const Insn& fi = c.insns[t];
          const bool via_frame = [&] {
            for (int o = 0; o < fi.op_count; ++o)
              if (fi.ops[o].kind == Kind::Mem)
                return fi.ops[o].base == frame || fi.ops[o].base == stack_reg(c);
            return false;
          }();
          if (!via_frame) {
            if (fi.kind == InsnKind::Branch || fi.kind == InsnKind::Jump ||
                fi.kind == InsnKind::JumpIndirect) {
              break;
            }
            continue;
          }
          if (auto fs = as_store(c, fi); fs && !fs->is_imm && fs->src == l_reg && m.cframe_L < 0) {
            m.cframe_L = fs->disp;
            m.evidence.push_back(evidence_of(c, fi, "SAVE_L = L"));
          } else if (auto fl = as_load(c, fi); fl && m.cframe_PC < 0 && fl->dst != l_reg) {
            m.cframe_PC = fl->disp;
            m.evidence.push_back(evidence_of(c, fi, "PC = SAVE_PC"));
          }
        }
        break;
      }
    }
    if (!have_cframe) {
      reject(c.insns[call], "no `L->cframe & ~3` (load through L, and with -4) after the call");
      continue;
    }
    found.push_back(std::move(m));
  }
  if (found.empty()) {
    if (!first_reject.empty()) {
      return make_error("exit-handler pattern not matched: {}", first_reject);
    }
    return make_error(
        "{}: exit-handler pattern not matched: no zero store to "
        "[DISPATCH/GL + disp] followed by a direct call (expected `mov "
        "[DISPATCH+GL(jit_base)], 0; call lj_trace_exit`)",
        c.function);
  }
  for (const ExitHandlerMatch& m : found) {
    const ExitHandlerMatch& f = found.front();
    if (m.dispatch_reg != f.dispatch_reg || m.jit_base != f.jit_base || m.cur_L != f.cur_L ||
        m.vmstate != f.vmstate || m.exit_state != f.exit_state || m.L_base != f.L_base ||
        m.L_cframe != f.L_cframe) {
      return make_error(
          "{}: exit-handler pattern is ambiguous: sites at {:#x} and {:#x} "
          "disagree",
          c.function, f.site, m.site);
    }
  }
  return found.front();
}

Result<StateStoreMatch> match_exit_interp(const Code& c, int d, int64_t jit_base, int64_t vmstate) {
  StateStoreMatch out;
  const size_t n = c.insns.size();
  for (size_t k = 0; k < n; ++k) {
    auto st = as_store(c, c.insns[k]);
    if (!st || st->base != d || st->disp != jit_base || !st->is_imm || st->imm != 0) continue;
    // A Gap may hide the call: such a site is not shown to be call-free.
    bool call_follows = false;
    for (size_t q = k + 1; q < std::min(n, k + 4); ++q) {
      const InsnKind kind = c.insns[q].kind;
      if (kind == InsnKind::CallDirect || kind == InsnKind::Gap) call_follows = true;
    }
    if (call_follows) continue;
    for (size_t q = k + 1; q < window_end(c, k + 1, 6); ++q) {
      auto vs = as_store(c, c.insns[q]);
      if (!vs || vs->base != d || vs->disp != vmstate || vs->size != 4) continue;
      auto v = stored_value(c, q, *vs);
      if (!v || !is_state_value(*v)) break;
      if (out.sites > 0 && out.state != *v) {
        return make_error(
            "{}: vm_exit_interp pattern is ambiguous: {:#x} stores {} after the "
            "jit_base clear, an earlier site stored {}",
            c.function, c.insns[q].address, *v, out.state);
      }
      out.state = static_cast<int32_t>(*v);
      if (out.sites == 0) {
        out.evidence.push_back(evidence_of(c, c.insns[k], "G->jit_base = 0 (vm_exit_interp)"));
        out.evidence.push_back(evidence_of(c, c.insns[q], "set_vmstate INTERP"));
      }
      ++out.sites;
      break;
    }
  }
  if (out.sites == 0) {
    return make_error(
        "{}: vm_exit_interp pattern not matched: no `[{} {:+#x}] = 0` without a "
        "following call that is followed by `set_vmstate` (a negative constant "
        "stored to [{} {:+#x}])",
        c.function, register_name(c.arch, d), jit_base, register_name(c.arch, d), vmstate);
  }
  return out;
}

Result<StateStoreMatch> match_c_call_state(const Code& c, int d, int64_t vmstate) {
  StateStoreMatch out;
  const size_t n = c.insns.size();
  for (size_t k = 0; k < n; ++k) {
    auto vs = as_store(c, c.insns[k]);
    if (!vs || vs->base != d || vs->disp != vmstate || vs->size != 4) continue;
    size_t call = 0;
    for (size_t q = k + 1; q < window_end(c, k + 1, 2); ++q) {
      if (c.insns[q].kind == InsnKind::CallIndirect) {
        call = q;
        break;
      }
    }
    if (call == 0) continue;
    auto v = stored_value(c, k, *vs);
    if (!v || !is_state_value(*v)) continue;
    if (out.sites > 0 && out.state != *v) {
      return make_error(
          "{}: C-call vmstate pattern is ambiguous: {:#x} stores {}, an earlier "
          "site stored {}",
          c.function, c.insns[k].address, *v, out.state);
    }
    out.state = static_cast<int32_t>(*v);
    if (out.sites == 0) {
      out.evidence.push_back(evidence_of(c, c.insns[k], "set_vmstate C/CFUNC"));
      out.evidence.push_back(evidence_of(c, c.insns[call], "call of the C function"));
    }
    ++out.sites;
  }
  if (out.sites == 0) {
    return make_error(
        "{}: lj_BC_FUNCC pattern not matched: no negative constant stored to "
        "[{} {:+#x}] (vmstate) right before an indirect call",
        c.function, register_name(c.arch, d), vmstate);
  }
  return out;
}

Result<DispatchSetupMatch> match_dispatch_setup(const Code& c, int64_t glref_offset,
                                                uint8_t ref_width) {
  DispatchSetupMatch out;
  const size_t n = c.insns.size();
  if (is_x86(c)) {
    for (size_t k = 0; k < n; ++k) {
      auto ld = as_load(c, c.insns[k]);
      if (!ld || ld->disp != glref_offset || ld->size != ref_width || !valid_base(c, ld->base) ||
          ld->dst == kX86Rsp) {
        continue;
      }
      for (size_t q = k + 1; q < window_end(c, k + 1, 10); ++q) {
        const Insn& a = c.insns[q];
        if (a.kind == InsnKind::Add && a.op_count == 2 && a.ops[0].is_reg(ld->dst) &&
            a.ops[1].kind == Kind::Imm) {
          const int64_t dist = a.ops[1].imm;
          if (dist <= 0 || dist >= 0x10000 || dist % 8 != 0) {
            return make_error(
                "{}: DISPATCH setup adds {:#x}, expected a positive, 8-aligned "
                "G->dispatch distance below 0x10000",
                where(c, a), dist);
          }
          if (out.sites > 0 && (out.dispatch_reg != ld->dst || out.dispatch_distance != dist)) {
            return make_error("{}: DISPATCH setup disagrees with an earlier site ({} += {:#x})",
                              where(c, a), register_name(c.arch, out.dispatch_reg),
                              out.dispatch_distance);
          }
          out.dispatch_reg = ld->dst;
          out.dispatch_distance = dist;
          if (out.sites == 0) {
            out.evidence.push_back(evidence_of(c, c.insns[k], "DISPATCH = L->glref"));
            out.evidence.push_back(evidence_of(c, a, "DISPATCH += GG_G2DISP"));
          }
          ++out.sites;
          break;
        }
        if (writes_reg(c, a, ld->dst)) break;
      }
    }
    if (out.sites == 0) {
      return make_error(
          "{}: DISPATCH setup not matched: no `mov D, [L {:+#x}]` ({}-byte "
          "L->glref) followed by `add D, imm32`",
          c.function, glref_offset, ref_width);
    }
    return out;
  }
  // AArch64: GL holds G; the dispatch table is reached as [GL + op*8 + GG_G2DISP]
  // (vm_arm64.dasc ins_next: add TMP1, GL, INS, uxtb #3; ldr TMP0, [TMP1, #GG_G2DISP]).
  // A few handlers index the static half of the table (GG_G2DISP + GG_LEN_DDISP*8), so the
  // distance is the displacement most sites use, and it must be the smallest one.
  out.register_is_g = true;
  std::vector<std::pair<int64_t, size_t>> counts;  // displacement -> sites
  for (size_t k = 0; k < n; ++k) {
    const Insn& a = c.insns[k];
    if (a.kind != InsnKind::Add || a.op_count != 3 || a.ops[0].kind != Kind::Reg ||
        a.ops[1].kind != Kind::Reg || a.ops[2].kind != Kind::Reg || a.ops[2].ext != 1 ||
        a.ops[2].shift != 3) {
      continue;
    }
    for (size_t q = k + 1; q < window_end(c, k + 1, 3); ++q) {
      auto ld = as_load(c, c.insns[q]);
      if (!ld || ld->base != a.ops[0].reg || ld->size != 8) continue;
      const int64_t dist = ld->disp;
      if (dist <= 0 || dist >= 0x10000 || dist % 8 != 0) break;
      if (out.sites > 0 && out.dispatch_reg != a.ops[1].reg) {
        return make_error(
            "{}: dispatch load through {} disagrees with an earlier site through "
            "{}",
            where(c, a), register_name(c.arch, a.ops[1].reg),
            register_name(c.arch, out.dispatch_reg));
      }
      out.dispatch_reg = a.ops[1].reg;
      auto it = std::find_if(counts.begin(), counts.end(),
                             [&](const auto& e) { return e.first == dist; });
      if (it == counts.end()) {
        counts.emplace_back(dist, 1);
        out.evidence.push_back(evidence_of(c, a, "GL + opcode*8"));
        out.evidence.push_back(evidence_of(c, c.insns[q], "load dispatch[opcode] (GG_G2DISP)"));
      } else {
        ++it->second;
      }
      ++out.sites;
      break;
    }
  }
  if (out.sites == 0) {
    return make_error(
        "{}: dispatch pattern not matched: no `add X, GL, W, uxtb #3` followed "
        "by `ldr Y, [X, #GG_G2DISP]`",
        c.function);
  }
  auto best = std::max_element(counts.begin(), counts.end(),
                               [](const auto& a, const auto& b) { return a.second < b.second; });
  for (const auto& [dist, sites] : counts) {
    if (dist < best->first) {
      return make_error(
          "{}: the most used dispatch displacement {:#x} ({} sites) is not the "
          "smallest ({:#x}, {} sites): cannot tell where the dispatch table starts",
          c.function, best->first, best->second, dist, sites);
    }
  }
  out.dispatch_distance = best->first;
  // Keep the evidence of the chosen displacement only.
  std::vector<Evidence> chosen;
  for (size_t e = 0; e + 1 < out.evidence.size(); e += 2) {
    if (out.evidence[e + 1].text.find(fmt::format("#{:#x}]", best->first)) != std::string::npos) {
      chosen = {out.evidence[e], out.evidence[e + 1]};
    }
  }
  out.evidence = std::move(chosen);
  bool glref_seen = false;
  for (size_t k = 0; k < n && !glref_seen; ++k) {
    auto ld = as_load(c, c.insns[k]);
    if (ld && ld->dst == out.dispatch_reg && ld->disp == glref_offset && ld->size == 8) {
      out.evidence.insert(out.evidence.begin(), evidence_of(c, c.insns[k], "GL = L->glref"));
      glref_seen = true;
    }
  }
  if (!glref_seen) {
    return make_error("{}: GL register {} is never loaded from L->glref [L {:+#x}]", c.function,
                      register_name(c.arch, out.dispatch_reg), glref_offset);
  }
  return out;
}

// Instructions between the frame set-up and the C-frame link in a VM entry: saveregs' stores
// (10 GPR + 8 FPR saves in pairs) and the entry's own argument set-up.
constexpr size_t kSaveregsWindow = 24;

Result<CframeLinkMatch> match_cframe_link(const Code& c, int64_t L_cframe) {
  CframeLinkMatch out;
  const size_t n = c.insns.size();
  const int sp = stack_reg(c);
  for (size_t k = 0; k < n; ++k) {
    auto ld = as_load(c, c.insns[k]);
    if (!ld || ld->disp != L_cframe || ld->size != 8 || !valid_base(c, ld->base)) continue;
    for (size_t j = k + 1; j < window_end(c, k + 1, 12); ++j) {
      auto ps = as_store(c, c.insns[j]);
      if (ps && !ps->is_imm && ps->src == ld->dst && ps->base == sp && ps->size == 8) {
        // then L->cframe = sp
        bool linked = false;
        for (size_t q = j + 1; q < window_end(c, j + 1, 12) && !linked; ++q) {
          auto cs = as_store(c, c.insns[q]);
          if (!cs || cs->is_imm || cs->disp != L_cframe || cs->size != 8 ||
              !valid_base(c, cs->base)) {
            continue;
          }
          // AArch64 stores a copy of sp: `mov x, sp` right before (vm_arm64.dasc since 2020,
          // TMP0), or the frame pointer that `saveregs` set up before the C-frame link
          // (`add fp, sp, #0`, earlier vm_arm64.dasc, e.g. Tarantool 2.6's fork); sp must not
          // move in between.
          bool src_is_sp = cs->src == sp;
          if (!src_is_sp && !is_x86(c)) {
            const size_t lowest = k > kSaveregsWindow ? k - kSaveregsWindow : 0;
            for (size_t h = q; h-- > lowest;) {
              const Insn& mv = c.insns[h];
              if (mv.kind == InsnKind::Mov && mv.op_count == 2 && mv.ops[0].is_reg(cs->src) &&
                  mv.ops[1].is_reg(kA64Sp)) {
                src_is_sp = true;
                break;
              }
              if (writes_reg(c, mv, cs->src) || writes_reg(c, mv, kA64Sp)) break;
            }
          }
          if (!src_is_sp) continue;
          if (ps->disp < 0 || ps->disp >= 256 || ps->disp % 8 != 0) {
            return make_error(
                "{}: C-frame link slot [sp {:+#x}] is out of range [0, 256) or "
                "misaligned",
                where(c, c.insns[j]), ps->disp);
          }
          if (out.sites > 0 && out.prev_offset != ps->disp) {
            return make_error(
                "{}: C-frame link slot {:#x} disagrees with an earlier VM entry "
                "({:#x})",
                where(c, c.insns[j]), ps->disp, out.prev_offset);
          }
          out.prev_offset = ps->disp;
          if (out.sites == 0) {
            out.evidence.push_back(evidence_of(c, c.insns[k], "prev = L->cframe"));
            out.evidence.push_back(evidence_of(c, c.insns[j], "SAVE_CFRAME = prev"));
            out.evidence.push_back(evidence_of(c, c.insns[q], "L->cframe = sp"));
          }
          ++out.sites;
          linked = true;
        }
        if (linked) break;
      }
      if (writes_reg(c, c.insns[j], ld->dst)) break;
    }
  }
  if (out.sites == 0) {
    return make_error(
        "{}: VM-entry C-frame link not matched: no `X = [L {:+#x}]` (L->cframe), "
        "`[sp + off] = X`, `[L {:+#x}] = sp` sequence",
        c.function, L_cframe, L_cframe);
  }
  return out;
}

Result<JloopMatch> match_jloop(const Code& c, int d) {
  std::optional<JloopMatch> out;
  const size_t n = c.insns.size();
  for (size_t k = 0; k < n; ++k) {
    auto arr = as_load(c, c.insns[k]);
    if (!arr || arr->base != d || !dispatch_disp_ok(c, arr->disp) ||
        (arr->size != 4 && arr->size != 8)) {
      continue;
    }
    for (size_t j = k + 1; j < window_end(c, k + 1, 3); ++j) {
      const Insn& el = c.insns[j];
      const bool x86_load = is_x86(c) && el.kind == InsnKind::Mov;
      const bool a64_load = !is_x86(c) && el.kind == InsnKind::Load;
      if (!(x86_load || a64_load) || el.op_count != 2 || el.ops[0].kind != Kind::Reg ||
          el.ops[1].kind != Kind::Mem || el.ops[1].base != arr->dst || el.ops[1].index == kNoReg) {
        continue;
      }
      const int trace_reg = el.ops[0].reg;
      for (size_t q = j + 1; q < window_end(c, j + 1, 3); ++q) {
        auto mc = as_load(c, c.insns[q]);
        if (!mc || mc->base != trace_reg || mc->size != 8) continue;
        for (size_t r = q + 1; r < window_end(c, q + 1, 11); ++r) {
          const Insn& jmp = c.insns[r];
          if (jmp.kind == InsnKind::JumpIndirect && jmp.op_count == 1 &&
              jmp.ops[0].is_reg(mc->dst)) {
            if (mc->disp <= 0 || mc->disp >= 256 || mc->disp % 8 != 0) {
              return make_error(
                  "{}: GCtrace.mcode offset {} out of range (0, 256) or "
                  "misaligned",
                  where(c, c.insns[q]), mc->disp);
            }
            JloopMatch m;
            m.trace_array = arr->disp;
            m.trace_mcode = mc->disp;
            m.trace_ref_width = arr->size;
            m.evidence = {
                evidence_of(c, c.insns[k], "J->trace"), evidence_of(c, el, "T = J->trace[RD]"),
                evidence_of(c, c.insns[q], "T->mcode"), evidence_of(c, jmp, "jump to the trace")};
            if (out && (out->trace_array != m.trace_array || out->trace_mcode != m.trace_mcode)) {
              return make_error(
                  "{}: BC_JLOOP pattern is ambiguous (another site reads "
                  "[{} {:+#x}] / +{:#x})",
                  where(c, c.insns[k]), register_name(c.arch, d), out->trace_array,
                  out->trace_mcode);
            }
            out = std::move(m);
            break;
          }
          if (writes_reg(c, jmp, mc->dst)) break;
        }
        break;
      }
    }
  }
  if (!out) {
    return make_error(
        "{}: BC_JLOOP pattern not matched: no `A = [{} + disp]; T = [A + "
        "index]; M = [T + off]; jmp M` chain",
        c.function, register_name(c.arch, d));
  }
  return *out;
}

namespace {

// `dst = src + imm` with an immediate (x86 `add r, imm` / `lea r, [src + disp]`, AArch64
// `add xd, xn, #imm{, lsl #12}`), the way a compiler splits a large struct displacement
// between an address computation and the load's own offset.
struct AddImmView {
  int dst = kNoReg;
  int src = kNoReg;
  int64_t imm = 0;
};
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

// The registers known to hold G + offset, in a short straight-line window.
class GPointers {
 public:
  explicit GPointers(int reg) { regs_.push_back({reg, 0}); }
  std::optional<int64_t> offset_of(int reg) const {
    for (const auto& [r, off] : regs_)
      if (r == reg) return off;
    return std::nullopt;
  }
  void set(int reg, int64_t off) {
    forget(reg);
    regs_.push_back({reg, off});
  }
  void forget(int reg) {
    std::erase_if(regs_, [&](const auto& e) { return e.first == reg; });
  }
  bool empty() const { return regs_.empty(); }
  template <class Pred>
  void forget_if(Pred written) {
    std::erase_if(regs_, [&](const auto& e) { return written(e.first); });
  }

 private:
  std::vector<std::pair<int, int64_t>> regs_;
};

// After `T = [G + disp]` at insns[j]: the `[T + index]` load within the next 3 instructions.
const Insn* trace_index_load(const Code& c, size_t j, size_t n, int t_reg) {
  for (size_t q = j + 1; q < std::min(n, j + 4); ++q) {
    const Insn& el = c.insns[q];
    const bool load = is_x86(c) ? el.kind == InsnKind::Mov : el.kind == InsnKind::Load;
    if (load && el.op_count == 2 && el.ops[0].kind == Kind::Reg && el.ops[1].kind == Kind::Mem &&
        el.ops[1].base == t_reg && el.ops[1].index != kNoReg) {
      return &el;
    }
    if (writes_reg(c, el, t_reg)) return nullptr;
  }
  return nullptr;
}

}  // namespace

Result<TraceinfoMatch> match_traceinfo(const Code& c, int64_t glref_offset, uint8_t ref_width) {
  constexpr size_t kWindow = 12;  // instructions from `G = G(L)` to `T = [G + disp]`
  std::vector<int> l_alias = {arg0_reg(c)};
  const size_t n = window_end(c, 0, 128);  // data flow from the entry: up to a Gap
  for (size_t k = 0; k < n; ++k) {
    const Insn& i = c.insns[k];
    if (i.kind == InsnKind::Mov && i.op_count == 2 && i.ops[0].kind == Kind::Reg &&
        i.ops[1].kind == Kind::Reg && i.ops[1].size == 8 &&
        std::find(l_alias.begin(), l_alias.end(), i.ops[1].reg) != l_alias.end()) {
      l_alias.push_back(i.ops[0].reg);
      continue;
    }
    auto g = as_load(c, i);
    if (!g || g->disp != glref_offset || g->size != ref_width ||
        std::find(l_alias.begin(), l_alias.end(), g->base) == l_alias.end()) {
      continue;
    }
    GPointers gp(g->dst);
    std::vector<Evidence> adds;
    for (size_t j = k + 1; j < std::min(n, k + 1 + kWindow) && !gp.empty(); ++j) {
      const Insn& insn = c.insns[j];
      if (auto add = as_add_imm(c, insn); add && gp.offset_of(add->src)) {
        gp.set(add->dst, *gp.offset_of(add->src) + add->imm);
        adds.push_back(evidence_of(c, insn, "G + part of the J->trace offset"));
        continue;
      }
      auto t = as_load(c, insn);
      if (t && t->size == 8 && gp.offset_of(t->base)) {
        const int64_t disp = *gp.offset_of(t->base) + t->disp;
        if (const Insn* el = trace_index_load(c, j, n, t->dst)) {
          if (disp <= 0 || disp >= 0x10000 || disp % 8 != 0) {
            return make_error("{}: J->trace at G{:+#x} is out of range or misaligned",
                              where(c, insn), disp);
          }
          TraceinfoMatch m;
          m.trace_array = disp;
          m.evidence = {evidence_of(c, i, "G = G(L)")};
          for (Evidence& e : adds) m.evidence.push_back(std::move(e));
          m.evidence.push_back(evidence_of(c, insn, "J->trace"));
          m.evidence.push_back(evidence_of(c, *el, "J->trace[traceno]"));
          return m;
        }
      }
      gp.forget_if([&](int reg) { return writes_reg(c, insn, reg); });
    }
  }
  return make_error(
      "{}: jit_checktrace pattern not matched: no `G = [L {:+#x}]`, `T = [G + "
      "disp]` (displacement possibly split by `add`), `[T + index]` chain",
      c.function, glref_offset);
}

Result<TolstringMatch> match_tolstring(const Code& c) {
  std::optional<TolstringMatch> out;
  const size_t n = c.insns.size();
  const int r0 = return_reg(c);
  for (size_t k = 0; k < n; ++k) {
    const Insn& a = c.insns[k];
    int src = kNoReg;
    int64_t h = 0;
    if (a.kind == InsnKind::Add && is_x86(c) && a.op_count == 2 && a.ops[0].is_reg(r0) &&
        a.ops[0].size == 8 && a.ops[1].kind == Kind::Imm) {
      src = r0;
      h = a.ops[1].imm;
    } else if (a.kind == InsnKind::Lea && a.op_count == 2 && a.ops[0].is_reg(r0) &&
               plain_mem(a.ops[1])) {
      src = a.ops[1].base;
      h = a.ops[1].disp;
    } else if (a.kind == InsnKind::Add && !is_x86(c) && a.op_count == 3 && a.ops[0].is_reg(r0) &&
               a.ops[0].size == 8 && a.ops[1].kind == Kind::Reg && a.ops[2].kind == Kind::Imm &&
               a.ops[2].shift == 0) {
      src = a.ops[1].reg;
      h = a.ops[2].imm;
    } else {
      continue;
    }
    if (h < 12 || h > 64 || h % 4 != 0) continue;
    bool returns = false;
    for (size_t q = k + 1; q < window_end(c, k + 1, 8); ++q) {
      const Insn& next = c.insns[q];
      if (next.kind == InsnKind::Ret) {
        returns = true;
        break;
      }
      if (writes_reg(c, next, r0) || next.kind == InsnKind::Branch || next.kind == InsnKind::Jump) {
        break;
      }
    }
    if (!returns) continue;
    for (size_t j = k; j-- > window_begin(c, k, 6);) {
      auto ld = as_load(c, c.insns[j]);
      if (ld && ld->base == src && ld->size == 4 && ld->disp > 0 && ld->disp < h) {
        TolstringMatch m;
        m.len_offset = ld->disp;
        m.data_offset = h;
        m.evidence = {evidence_of(c, c.insns[j], "*len = s->len"),
                      evidence_of(c, a, "return strdata(s)")};
        if (out && (out->len_offset != m.len_offset || out->data_offset != m.data_offset)) {
          return make_error(
              "{}: lua_tolstring pattern is ambiguous: len +{} data +{} vs "
              "len +{} data +{}",
              where(c, a), m.len_offset, m.data_offset, out->len_offset, out->data_offset);
        }
        out = std::move(m);
        break;
      }
      if (writes_reg(c, c.insns[j], src)) break;
    }
  }
  if (!out) {
    return make_error(
        "{}: lua_tolstring pattern not matched: no 4-byte load of [s + len] "
        "followed by `return s + sizeof(GCstr)` (12..64) and a return",
        c.function);
  }
  return *out;
}

Result<GettopMatch> match_gettop(const Code& c) {
  const int l = arg0_reg(c);
  std::vector<std::pair<int, int64_t>> loaded;  // register -> [L + disp] it holds
  auto disp_of = [&](int r) -> std::optional<int64_t> {
    for (auto it = loaded.rbegin(); it != loaded.rend(); ++it)
      if (it->first == r) return it->second;
    return std::nullopt;
  };
  const size_t n = window_end(c, 0, 8);  // data flow from the entry: up to a Gap
  for (size_t k = 0; k < n; ++k) {
    const Insn& i = c.insns[k];
    if (auto ld = as_load(c, i); ld && ld->base == l && ld->size == 8) {
      loaded.emplace_back(ld->dst, ld->disp);
      continue;
    }
    if (i.kind == InsnKind::LoadPair && i.op_count == 3 && i.ops[2].kind == Kind::Mem &&
        i.ops[2].base == l && i.access_size == 8) {
      loaded.emplace_back(i.ops[0].reg, i.ops[2].disp);
      loaded.emplace_back(i.ops[1].reg, i.ops[2].disp + 8);
      continue;
    }
    if (i.kind != InsnKind::Sub) continue;
    std::optional<int64_t> top, base;
    if (is_x86(c) && i.op_count == 2 && i.ops[0].kind == Kind::Reg && plain_mem(i.ops[1]) &&
        i.ops[1].base == l) {
      top = disp_of(i.ops[0].reg);
      base = i.ops[1].disp;
    } else if (!is_x86(c) && i.op_count == 3 && i.ops[1].kind == Kind::Reg &&
               i.ops[2].kind == Kind::Reg) {
      top = disp_of(i.ops[1].reg);
      base = disp_of(i.ops[2].reg);
    }
    if (!top || !base) continue;
    bool returns = false;
    for (size_t q = k + 1; q < window_end(c, k + 1, 3); ++q) {
      if (c.insns[q].kind == InsnKind::Ret) returns = true;
    }
    if (!returns || *top <= *base || *base <= 0 || *top >= 256 || *base % 8 || *top % 8) {
      return make_error(
          "{}: lua_gettop computes [L {:+#x}] - [L {:+#x}]; expected L->top - "
          "L->base (top after base, 8-aligned, below 256) and a return",
          where(c, i), *top, *base);
    }
    GettopMatch m;
    m.top_offset = *top;
    m.base_offset = *base;
    for (size_t j = 0; j <= k; ++j)
      m.evidence.push_back(evidence_of(c, c.insns[j], "L->top - L->base"));
    return m;
  }
  return make_error(
      "{}: lua_gettop pattern not matched: expected `L->top - L->base` from "
      "loads through the first argument {}",
      c.function, register_name(c.arch, l));
}

Result<GcRootMatch> match_gc_root(const Code& c, uint8_t ref_width) {
  constexpr size_t kWindow = 6;  // instructions between the three accesses (allocf's result, ...)
  const size_t n = std::min<size_t>(c.insns.size(), 96);
  for (size_t k = 0; k < n; ++k) {
    auto head = as_load(c, c.insns[k]);
    if (!head || head->size != ref_width || head->disp <= 0 || head->disp >= 512) continue;
    for (size_t j = k + 1; j < std::min(n, window_end(c, k + 1, kWindow)); ++j) {
      auto link = as_store(c, c.insns[j]);
      if (!link || link->is_imm || link->src != head->dst || link->disp != 0 ||
          link->size != ref_width || link->base == head->base) {
        continue;
      }
      for (size_t m = j + 1; m < std::min(n, window_end(c, j + 1, kWindow)); ++m) {
        auto set = as_store(c, c.insns[m]);
        if (!set || set->is_imm || set->base != head->base || set->disp != head->disp ||
            set->src != link->base || set->size != ref_width) {
          continue;
        }
        GcRootMatch r;
        r.root_offset = head->disp;
        r.evidence = {evidence_of(c, c.insns[k], "load g->gc.root"),
                      evidence_of(c, c.insns[j], "o->nextgc = root"),
                      evidence_of(c, c.insns[m], "g->gc.root = o")};
        return r;
      }
    }
  }
  return make_error(
      "{}: no `load [G+D]; store it to [o]; store o to [G+D]` sequence (lj_mem_newgco "
      "linking a new object into g->gc.root) in the first {} instructions",
      c.function, n);
}

}  // namespace ljprof::luajit
