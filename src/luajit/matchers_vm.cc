// The matchers of the VM's own code (vm_x64.dasc / vm_x86.dasc / vm_arm64.dasc): the trace exit
// handler, vm_exit_interp, lj_BC_FUNCC, the VM entries' DISPATCH set-up and C-frame link, BC_JLOOP.
#include "luajit/matchers.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "luajit/matchers_internal.h"

namespace ljprof::luajit {

using matchers_internal::as_load;
using matchers_internal::as_store;
using matchers_internal::dispatch_disp_ok;
using matchers_internal::is_state_value;
using matchers_internal::is_x86;
using matchers_internal::Kind;
using matchers_internal::stack_reg;
using matchers_internal::stored_value;
using matchers_internal::StoreView;
using matchers_internal::valid_base;
using matchers_internal::where;
using matchers_internal::window_begin;
using matchers_internal::window_end;
using matchers_internal::writes_reg;

namespace {

// Keeps the first reason a candidate exit-handler site was rejected (the error names it when no
// site matches).
void note_exit_reject(std::string& first_reject, const Code& c, const Insn& at,
                      const std::string& why) {
  if (first_reject.empty()) first_reject = fmt::format("{}: {}", where(c, at), why);
}

// The first direct call within the 3 instructions after insns[k] (up to a Gap), 0 when there is
// none.
size_t direct_call_after(const Code& c, size_t k) {
  for (size_t q = k + 1; q < window_end(c, k + 1, 3); ++q) {
    if (c.insns[q].kind == InsnKind::CallDirect) return q;
  }
  return 0;
}

// BASE = [D + jit_base]: the nearest such load in [lo, k), its BASE register in `base_reg`.
std::optional<size_t> find_jit_base_load(const Code& c, size_t lo, size_t k, const StoreView& st,
                                         int& base_reg) {
  for (size_t j = k; j-- > lo;) {
    auto ld = as_load(c, c.insns[j]);
    if (ld && ld->base == st.base && ld->disp == st.disp && ld->size == st.size) {
      base_reg = ld->dst;
      return j;
    }
  }
  return std::nullopt;
}

// L->base = BASE, where L = [D + cur_L], between the jit_base load and the clear at k.
bool match_exit_l_base(const Code& c, ExitHandlerMatch& m, size_t lo, size_t jb_load, size_t k,
                       int base_reg, const StoreView& st) {
  const int d = st.base;
  for (size_t j = jb_load + 1; j < k; ++j) {
    auto bs = as_store(c, c.insns[j]);
    if (!bs || bs->is_imm || bs->src != base_reg || bs->base == d || !valid_base(c, bs->base)) {
      continue;
    }
    for (size_t h = j; h-- > lo;) {
      auto ll = as_load(c, c.insns[h]);
      if (ll && ll->dst == bs->base && ll->base == d && ll->size == st.size &&
          ll->disp != st.disp && dispatch_disp_ok(c, ll->disp)) {
        m.cur_L = ll->disp;
        m.L_base = bs->disp;
        m.evidence.push_back(evidence_of(c, c.insns[h], "L = G->cur_L"));
        m.evidence.push_back(evidence_of(c, c.insns[jb_load], "BASE = G->jit_base"));
        m.evidence.push_back(evidence_of(c, c.insns[j], "L->base = BASE"));
        return true;
      }
      if (writes_reg(c, c.insns[h], bs->base)) break;
    }
  }
  return false;
}

// set_vmstate EXIT: the last negative constant stored as 4 bytes to [D + disp] before the clear.
bool match_exit_vmstate(const Code& c, ExitHandlerMatch& m, size_t lo, size_t k, int d) {
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
    return true;
  }
  return false;
}

// After `sp = L->cframe & ~3` at insns[and_at] (the C frame in register `frame`): `SAVE_L = L`
// and `PC = SAVE_PC` through the restored frame.
void read_restored_frame(const Code& c, ExitHandlerMatch& m, size_t and_at, int frame, int l_reg) {
  for (size_t t = and_at + 1; t < window_end(c, and_at + 1, 7); ++t) {
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
}

// After the call at insns[call]: rcx/x1 = L->cframe; and ..., CFRAME_RAWMASK (-4), L being the
// register loaded from [D + cur_L] in [lo, k).
bool match_exit_cframe(const Code& c, ExitHandlerMatch& m, size_t lo, size_t k, size_t call,
                       int d) {
  const int l_reg = [&] {
    for (size_t h = k; h-- > lo;) {
      auto ll = as_load(c, c.insns[h]);
      if (ll && ll->base == d && ll->disp == m.cur_L) return ll->dst;
    }
    return kNoReg;
  }();
  for (size_t q = call + 1; q < window_end(c, call + 1, 4); ++q) {
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
      read_restored_frame(c, m, r, a.ops[0].reg, l_reg);
      return true;
    }
  }
  return false;
}

// One candidate site: the zero store `st` at insns[k] (the jit_base clear) and the direct call
// at insns[call] (lj_trace_exit). Returns the match, or nullopt after noting why not.
std::optional<ExitHandlerMatch> match_exit_site(const Code& c, size_t k, size_t call,
                                                const StoreView& st, std::string& first_reject) {
  const Insn& clear = c.insns[k];
  const int d = st.base;
  if (!dispatch_disp_ok(c, st.disp)) {
    note_exit_reject(first_reject, c, clear,
                     fmt::format("zero store before a call has displacement {} from {}, "
                                 "expected a {} DISPATCH/GL-relative displacement",
                                 st.disp, register_name(c.arch, d),
                                 is_x86(c) ? "negative signed disp32" : "non-negative"));
    return std::nullopt;
  }
  ExitHandlerMatch m;
  m.dispatch_reg = d;
  m.ref_width = st.size;
  m.jit_base = st.disp;
  m.site = clear.address;
  const size_t lo = window_begin(c, k, 48);
  int base_reg = kNoReg;
  const std::optional<size_t> jb_load = find_jit_base_load(c, lo, k, st, base_reg);
  if (!jb_load) {
    note_exit_reject(first_reject, c, clear,
                     fmt::format("no load of [{} {:+#x}] (jit_base) before the clear",
                                 register_name(c.arch, d), st.disp));
    return std::nullopt;
  }
  if (!match_exit_l_base(c, m, lo, *jb_load, k, base_reg, st)) {
    note_exit_reject(first_reject, c, clear,
                     "no `L->base = BASE` store through a register loaded from cur_L");
    return std::nullopt;
  }
  if (!match_exit_vmstate(c, m, lo, k, d)) {
    note_exit_reject(first_reject, c, clear,
                     "no `set_vmstate EXIT` (negative constant stored to [D + disp]) before it");
    return std::nullopt;
  }
  m.evidence.push_back(evidence_of(c, clear, "G->jit_base = 0"));
  m.evidence.push_back(evidence_of(c, c.insns[call], "call lj_trace_exit"));
  if (!match_exit_cframe(c, m, lo, k, call, d)) {
    note_exit_reject(first_reject, c, c.insns[call],
                     "no `L->cframe & ~3` (load through L, and with -4) after the call");
    return std::nullopt;
  }
  return m;
}

}  // namespace

Result<ExitHandlerMatch> match_exit_handler(const Code& c) {
  std::vector<ExitHandlerMatch> found;
  std::string first_reject;
  const size_t n = c.insns.size();
  for (size_t k = 0; k < n; ++k) {
    auto st = as_store(c, c.insns[k]);
    if (!st || !st->is_imm || st->imm != 0 || (st->size != 4 && st->size != 8)) continue;
    if (!valid_base(c, st->base)) continue;
    const size_t call = direct_call_after(c, k);
    if (call == 0) continue;
    if (std::optional<ExitHandlerMatch> m = match_exit_site(c, k, call, *st, first_reject)) {
      found.push_back(std::move(*m));
    }
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

namespace {

// x86-64: `mov D, [L + glref]` then `add D, GG_G2DISP` within 10 instructions, at every entry.
Result<DispatchSetupMatch> match_x86_dispatch_setup(const Code& c, int64_t glref_offset,
                                                    uint8_t ref_width) {
  DispatchSetupMatch out;
  const size_t n = c.insns.size();
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

// AArch64: every `add X, GL, W, uxtb #3` followed by `ldr Y, [X, #disp]` adds a site to `out`
// (GL in out.dispatch_reg, the evidence of each displacement's first site) and counts its
// displacement in `counts`. Fails when two sites index through different registers.
Status count_a64_dispatch_sites(const Code& c, DispatchSetupMatch& out,
                                std::vector<std::pair<int64_t, size_t>>& counts) {
  const size_t n = c.insns.size();
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
  return Ok{};
}

// AArch64: GL holds G; the dispatch table is reached as [GL + op*8 + GG_G2DISP]
// (vm_arm64.dasc ins_next: add TMP1, GL, INS, uxtb #3; ldr TMP0, [TMP1, #GG_G2DISP]).
// A few handlers index the static half of the table (GG_G2DISP + GG_LEN_DDISP*8), so the
// distance is the displacement most sites use, and it must be the smallest one.
Result<DispatchSetupMatch> match_a64_dispatch_setup(const Code& c, int64_t glref_offset) {
  DispatchSetupMatch out;
  const size_t n = c.insns.size();
  out.register_is_g = true;
  std::vector<std::pair<int64_t, size_t>> counts;  // displacement -> sites
  LJ_TRY(count_a64_dispatch_sites(c, out, counts));
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

}  // namespace

Result<DispatchSetupMatch> match_dispatch_setup(const Code& c, int64_t glref_offset,
                                                uint8_t ref_width) {
  if (is_x86(c)) return match_x86_dispatch_setup(c, glref_offset, ref_width);
  return match_a64_dispatch_setup(c, glref_offset);
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

}  // namespace ljprof::luajit
