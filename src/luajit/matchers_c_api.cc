// The matchers of LuaJIT's C functions (lj_api.c lua_close, lua_tolstring, lua_gettop; lib_jit.c
// lj_cf_jit_util_traceinfo; lj_gc.c lj_mem_newgco): offsets read from compiled C code.
#include "luajit/matchers.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "luajit/matchers_internal.h"

namespace ljprof::luajit {

using matchers_internal::arg0_reg;
using matchers_internal::as_add_imm;
using matchers_internal::as_load;
using matchers_internal::as_store;
using matchers_internal::is_x86;
using matchers_internal::Kind;
using matchers_internal::plain_mem;
using matchers_internal::return_reg;
using matchers_internal::where;
using matchers_internal::window_begin;
using matchers_internal::window_end;
using matchers_internal::writes_reg;

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

namespace {

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
