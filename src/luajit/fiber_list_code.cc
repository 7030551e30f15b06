// What walks the cords' fiber lists (fiber_layout.h fiber_layout_from_code), read from the
// machine code of functions every Tarantool exports in .dynsym, for an executable without debug
// information. The patterns follow data, not bytes: which register holds the cord, a fiber, a
// list node or an address inside one of them (Tracker), so another register allocation or
// displacement still matches; the values each pattern proves are checked against each other by
// the caller. x86-64 only, derived from and proven against the DWARF of Debian's build.
//
// tarantool src/lib/core/fiber.c (2.x):
//   int fiber_stat(fiber_stat_cb cb, void *ctx)  rlist_foreach_entry(f, &cord()->alive, link)
//   void fiber_wakeup(struct fiber *f)           flags test, then fiber_make_ready(f):
//                                                rlist_move_tail_entry(&cord->ready, f, state)
//   int fiber_join(struct fiber *f)              while (!fiber_is_dead(f)) fiber_yield()
//   void fiber_call(struct fiber *callee)        caller->csw++; coro_transfer(&caller->ctx,
//                                                &callee->ctx)
//   void cord_set_name(const char *name)         snprintf(cord()->name, sizeof(...), ...)
// src/lua/init.c tarantool_lua_run_script: script_fiber->storage.lua.stack = tarantool_L.
#include <fmt/format.h>

#include <bit>
#include <map>
#include <optional>

#include "luajit/fiber_code.h"
#include "luajit/fiber_code_internal.h"
#include "luajit/fiber_layout.h"
#include "luajit/matchers_internal.h"

namespace ljprof::luajit {

using namespace matchers_internal;
using namespace fiber_code_internal;

namespace {

// What a register holds, as far as the list patterns need to know.
struct Held {
  enum class What : uint8_t {
    Cord,      // the cord (cord_ptr) + offset
    Fiber,     // a fiber + offset; `fiber` says which
    Node,      // a pointer loaded from the cord (at `offset`) or from an Entry (`offset` past it)
    Entry,     // a Node minus `offset` (container_of)
    Word,      // a 4-byte member of a fiber, at `offset`
    Global,    // the value of the global variable at address `offset`
    Constant,  // the immediate `offset`
  };
  What what = What::Constant;
  int64_t offset = 0;
  int fiber = 0;
  bool node_from_entry = false;
};

constexpr int kArgFiber = 1;      // the function's fiber argument
constexpr int kRunningFiber = 2;  // cord()->fiber
constexpr int kNewFiber = 3;      // what fiber_new returned

// Follows a function's straight-line code, tracking what each register holds. Branches are not
// followed: a value is kept until an instruction or a call may change it, so a pattern proves
// what the code does on the path the source describes, and the caller cross-checks the values.
class Tracker {
 public:
  struct Setup {
    int64_t tls_offset = 0;
    int64_t cord_fiber = -1;    // cord.fiber when known: a load from it is the running fiber
    uint64_t new_fiber_fn = 0;  // a direct call to it returns a new fiber
  };
  Tracker(const Code& c, Setup setup) : c_(c), setup_(setup) {}

  std::optional<Held> at(int reg) const {
    auto it = regs_.find(reg);
    return it == regs_.end() ? std::nullopt : std::optional<Held>(it->second);
  }
  bool is(int reg, Held::What what) const {
    auto h = at(reg);
    return h && h->what == what;
  }
  void set(int reg, Held h) { regs_[reg] = h; }

  // Applies `i`: what its destination holds afterwards, everything it may clobber forgotten.
  void step(const Insn& i) {
    std::optional<std::pair<int, Held>> result = value_of(i);
    for (int reg = 0; reg <= 15; ++reg) {
      if (clobbered(c_, i, reg)) regs_.erase(reg);
    }
    if (i.kind == InsnKind::CallDirect && i.op_count == 1 && i.ops[0].kind == Operand::Kind::Imm &&
        setup_.new_fiber_fn != 0 && static_cast<uint64_t>(i.ops[0].imm) == setup_.new_fiber_fn) {
      regs_[return_reg(c_)] = Held{Held::What::Fiber, 0, kNewFiber};
    }
    if (result) regs_[result->first] = result->second;
  }

 private:
  std::optional<std::pair<int, Held>> value_of(const Insn& i) const {
    using W = Held::What;
    if (auto tls = tls_load(i); tls && tls->disp == setup_.tls_offset) {
      return std::pair{tls->dst, Held{W::Cord, 0}};
    }
    if (i.kind == InsnKind::Mov && i.op_count == 2 && i.ops[0].kind == Operand::Kind::Reg) {
      const Operand& src = i.ops[1];
      if (src.kind == Operand::Kind::Reg && i.ops[0].size == 8 && src.size == 8) {
        if (auto h = at(src.reg)) return std::pair{i.ops[0].reg, *h};
        return std::nullopt;
      }
      if (src.kind == Operand::Kind::Imm)
        return std::pair{i.ops[0].reg, Held{W::Constant, src.imm}};
      if (src.kind == Operand::Kind::Mem && src.base == kX86Rip && src.index == kNoReg &&
          i.ops[0].size == 8) {
        return std::pair{i.ops[0].reg, Held{W::Global, static_cast<int64_t>(i.end()) + src.disp}};
      }
    }
    if (auto add = as_add_imm(c_, i)) return added(*add);
    if (auto load = as_load(c_, i)) return loaded(*load);
    return std::nullopt;
  }

  std::optional<std::pair<int, Held>> added(const AddImmView& add) const {
    using W = Held::What;
    auto src = at(add.src);
    if (!src) return std::nullopt;
    if (src->what == W::Cord || src->what == W::Fiber) {
      Held h = *src;
      h.offset += add.imm;
      return std::pair{add.dst, h};
    }
    if (src->what == W::Node && add.imm < 0) return std::pair{add.dst, Held{W::Entry, -add.imm}};
    return std::nullopt;
  }

  std::optional<std::pair<int, Held>> loaded(const LoadView& load) const {
    using W = Held::What;
    auto base = at(load.base);
    if (!base) return std::nullopt;
    if (base->what == W::Fiber && base->offset == 0 && load.size == 4) {
      return std::pair{load.dst, Held{W::Word, load.disp, base->fiber}};
    }
    if (load.size != 8) return std::nullopt;
    if (base->what == W::Cord) {
      const int64_t at_offset = base->offset + load.disp;
      if (at_offset == setup_.cord_fiber) {
        return std::pair{load.dst, Held{W::Fiber, 0, kRunningFiber}};
      }
      return std::pair{load.dst, Held{W::Node, at_offset}};
    }
    if (base->what == W::Entry) {
      return std::pair{load.dst, Held{W::Node, load.disp - base->offset, 0, true}};
    }
    return std::nullopt;
  }

  const Code& c_;
  Setup setup_;
  std::map<int, Held> regs_;
};

bool stops(const Insn& i) {
  return i.kind == InsnKind::Gap || i.kind == InsnKind::Ret;
}

// A rlist is {prev, next} (src/lib/salad/rlist.h): next is at 0 or 8, prev at the other.
bool rlist_member(int64_t v) {
  return v == 0 || v == 8;
}

bool single_bit(int64_t v) {
  return v > 0 && std::has_single_bit(static_cast<uint64_t>(v));
}

}  // namespace

Result<AliveList> match_alive_list(const Code& c, int64_t tls_offset) {
  using W = Held::What;
  Tracker t(c, {tls_offset});
  std::optional<int64_t> first_next, head, link, reload;
  for (const Insn& i : c.insns) {
    if (stops(i)) break;
    if (auto load = as_load(c, i); load && load->size == 8) {
      auto base = t.at(load->base);
      if (base && base->what == W::Cord && !first_next) first_next = base->offset + load->disp;
      if (base && base->what == W::Entry && !reload) reload = load->disp - base->offset;
    }
    if (i.kind == InsnKind::Compare && i.op_count == 2 && i.ops[0].kind == Operand::Kind::Reg &&
        i.ops[1].kind == Operand::Kind::Reg) {
      for (auto [a, b] : {std::pair{i.ops[0].reg, i.ops[1].reg}, {i.ops[1].reg, i.ops[0].reg}}) {
        auto cord = t.at(b);
        if (t.is(a, W::Node) && cord && cord->what == W::Cord && !head) head = cord->offset;
      }
    }
    if (i.kind == InsnKind::CallIndirect) {
      auto arg = t.at(arg0_reg(c));
      if (arg && arg->what == W::Entry && !link) link = arg->offset;
    }
    t.step(i);
  }
  if (first_next && head && link && reload && rlist_member(*first_next - *head) &&
      *reload == *first_next - *head) {
    return AliveList{*head, *reload, *link};
  }
  return make_error(
      "{}: no walk of a list headed in the cord (cord_ptr at fs:{:#x}) whose entries are passed "
      "to the callback (rlist_foreach_entry over cord->alive)",
      c.function, tls_offset);
}

Result<ReadyList> match_ready_list(const Code& c, int64_t tls_offset, int64_t rlist_next) {
  using W = Held::What;
  Tracker t(c, {tls_offset});
  t.set(arg0_reg(c), Held{W::Fiber, 0, kArgFiber});
  const int64_t rlist_prev = rlist_next == 0 ? 8 : 0;
  std::optional<std::pair<int64_t, int64_t>> flags;  // offset, mask
  for (const Insn& i : c.insns) {
    if (stops(i)) break;
    if (!flags && i.kind == InsnKind::Compare && i.op_count == 2 &&
        i.ops[1].kind == Operand::Kind::Imm) {
      const Operand& tested = i.ops[0];
      auto reg = tested.kind == Operand::Kind::Reg ? t.at(tested.reg) : std::nullopt;
      auto base = tested.kind == Operand::Kind::Mem && tested.index == kNoReg ? t.at(tested.base)
                                                                              : std::nullopt;
      if (reg && reg->what == W::Word && reg->fiber == kArgFiber) {
        flags = {reg->offset, i.ops[1].imm};
      } else if (base && base->what == W::Fiber && base->fiber == kArgFiber && base->offset == 0) {
        flags = {tested.disp, i.ops[1].imm};
      }
    }
    if (auto store = as_store(c, i);
        store && flags && !store->is_imm && store->size == 8 && store->disp == rlist_next) {
      auto item = t.at(store->src);
      auto tail = t.at(store->base);
      if (item && item->what == W::Fiber && item->fiber == kArgFiber && tail &&
          tail->what == W::Node && !tail->node_from_entry) {
        return ReadyList{tail->offset - rlist_prev, item->offset, flags->first, flags->second};
      }
    }
    t.step(i);
  }
  return make_error(
      "{}: no test of the fiber's flags followed by its link stored into the tail of a list "
      "headed in the cord (rlist_move_tail_entry(&cord->ready, f, state))",
      c.function);
}

Result<DeadFlag> match_dead_flag(const Code& c) {
  using W = Held::What;
  Tracker t(c, {});
  t.set(arg0_reg(c), Held{W::Fiber, 0, kArgFiber});
  std::map<std::pair<int64_t, int64_t>, bool> before_call;  // (offset, bit) tested before a call
  bool called = false;
  for (const Insn& i : c.insns) {
    if (stops(i)) break;
    if (i.kind == InsnKind::Compare && i.op_count == 2 && i.ops[0].kind == Operand::Kind::Mem &&
        i.ops[0].index == kNoReg && i.ops[1].kind == Operand::Kind::Imm &&
        single_bit(i.ops[1].imm)) {
      auto base = t.at(i.ops[0].base);
      if (base && base->what == W::Fiber && base->fiber == kArgFiber && base->offset == 0) {
        const std::pair key{i.ops[0].disp, i.ops[1].imm};
        if (!called) before_call[key] = true;
        if (called && before_call.count(key)) return DeadFlag{key.first, key.second};
      }
    }
    if (is_call(i)) called = true;
    t.step(i);
  }
  return make_error(
      "{}: no one-bit test of a member of the fiber both before and after a call "
      "(while (!fiber_is_dead(f)) fiber_yield())",
      c.function);
}

Result<SwitchFields> match_switch(const Code& c, int64_t tls_offset, int64_t cord_fiber,
                                  uint64_t coro_transfer) {
  using W = Held::What;
  Tracker t(c, {tls_offset, cord_fiber});
  t.set(arg0_reg(c), Held{W::Fiber, 0, kArgFiber});
  std::optional<int64_t> csw;
  for (const Insn& i : c.insns) {
    if (i.kind == InsnKind::Gap) break;
    if (!csw && i.kind == InsnKind::Add && i.op_count == 2 && i.ops[0].kind == Operand::Kind::Mem &&
        i.ops[0].index == kNoReg && i.ops[0].size == 4 && i.ops[1].kind == Operand::Kind::Imm &&
        i.ops[1].imm == 1) {
      auto base = t.at(i.ops[0].base);
      if (base && base->what == W::Fiber && base->offset == 0 && base->fiber != kNewFiber) {
        csw = i.ops[0].disp;
      }
    }
    const bool transfer = (i.kind == InsnKind::CallDirect || i.kind == InsnKind::Jump) &&
                          i.op_count == 1 && i.ops[0].kind == Operand::Kind::Imm &&
                          static_cast<uint64_t>(i.ops[0].imm) == coro_transfer;
    if (transfer) {
      auto from = t.at(kX86Rdi), to = t.at(kX86Rsi);
      if (csw && from && to && from->what == W::Fiber && from->fiber == kRunningFiber &&
          to->what == W::Fiber && to->fiber == kArgFiber && from->offset == to->offset) {
        return SwitchFields{from->offset, *csw};
      }
      break;
    }
    if (i.kind == InsnKind::Ret) break;
    t.step(i);
  }
  return make_error(
      "{}: no switch from the running fiber (cord_ptr->fiber) to the argument through "
      "coro_transfer(&caller->ctx, &callee->ctx) after a csw++",
      c.function);
}

Result<int64_t> match_lua_stack(const Code& c, uint64_t fiber_new, uint64_t tarantool_l) {
  using W = Held::What;
  Tracker t(c, {0, -1, fiber_new});
  for (const Insn& i : c.insns) {
    if (stops(i)) break;
    if (auto store = as_store(c, i); store && !store->is_imm && store->size == 8) {
      auto value = t.at(store->src);
      auto fiber = t.at(store->base);
      if (value && value->what == W::Global &&
          static_cast<uint64_t>(value->offset) == tarantool_l && fiber && fiber->what == W::Fiber &&
          fiber->fiber == kNewFiber && fiber->offset == 0) {
        return store->disp;
      }
    }
    t.step(i);
  }
  return make_error(
      "{}: no store of tarantool_L into the fiber fiber_new returned "
      "(script_fiber->storage.lua.stack = tarantool_L)",
      c.function);
}

Result<CordName> match_cord_name(const Code& c, int64_t tls_offset) {
  using W = Held::What;
  Tracker t(c, {tls_offset});
  for (const Insn& i : c.insns) {
    if (stops(i)) break;
    if (is_call(i)) {
      auto name = t.at(arg0_reg(c));
      auto size = t.at(kX86Rsi);
      if (name && name->what == W::Cord && name->offset > 0 && size && size->what == W::Constant &&
          size->offset > 0 && size->offset <= 256) {
        return CordName{name->offset, size->offset};
      }
      break;
    }
    t.step(i);
  }
  return make_error(
      "{}: its first call is not given an address inside the cord and a size "
      "(snprintf(cord()->name, sizeof(cord()->name), ...))",
      c.function);
}

}  // namespace ljprof::luajit

namespace ljprof::luajit::fiber_code_internal {

namespace {

Result<uint64_t> symbol_address(const elf::ElfFile& elf, const char* name) {
  const elf::Symbol* sym = elf.find_symbol(name);
  if (sym == nullptr || !sym->defined() || sym->value == 0) {
    return make_error("{} exports no symbol {}", elf.path(), name);
  }
  return sym->value;
}

// The matchers' values checked against each other and against what the label patterns proved.
Status check_list_fields(const elf::ElfFile& elf, const FiberLayout& l, const ReadyList& ready,
                         const DeadFlag& dead, int64_t name_size) {
  if (ready.fiber_flags != dead.fiber_flags) {
    return make_error("fiber_wakeup tests fiber.flags at {} but fiber_join at {}",
                      ready.fiber_flags, dead.fiber_flags);
  }
  if ((ready.wake_mask & dead.flag_dead) == 0) {
    return make_error("fiber_wakeup's mask {:#x} does not hold fiber_join's FIBER_IS_DEAD {:#x}",
                      ready.wake_mask, dead.flag_dead);
  }
  if (l.cord_alive == l.cord_ready || l.fiber_link == l.fiber_state) {
    return make_error("the alive and ready lists share an offset (cord {} / {}, fiber {} / {})",
                      l.cord_alive, l.cord_ready, l.fiber_link, l.fiber_state);
  }
  // fiber.h struct cord: char name[40] in 2.x; a thread's name (pthread_setname_np) takes 16.
  if (name_size < 16) {
    return make_error("{}: cord_set_name writes {} bytes of name", elf.path(), name_size);
  }
  return Ok{};
}

}  // namespace

Status fiber_list_fields_from_code(const elf::ElfFile& elf, FiberLayout& l) {
  const int64_t tls = l.cord_ptr_tp_offset;
  auto stat = decode_export(elf, "fiber_stat");
  auto wakeup = decode_export(elf, "fiber_wakeup");
  auto join = decode_export(elf, "fiber_join");
  auto call = decode_export(elf, "fiber_call");
  auto script = decode_export(elf, "tarantool_lua_run_script");
  auto set_name = decode_export(elf, "cord_set_name");
  for (const auto* r : {&stat, &wakeup, &join, &call, &script, &set_name}) {
    if (!r->ok()) return make_error("{}", r->message());
  }
  auto coro_transfer = symbol_address(elf, "coro_transfer");
  auto fiber_new = symbol_address(elf, "fiber_new");
  auto tarantool_l = symbol_address(elf, "tarantool_L");
  for (const auto* r : {&coro_transfer, &fiber_new, &tarantool_l}) {
    if (!r->ok()) return make_error("{}", r->message());
  }
  auto alive = match_alive_list(stat->code(), tls);
  if (!alive.ok()) return make_error("{}", alive.message());
  auto ready = match_ready_list(wakeup->code(), tls, alive->rlist_next);
  if (!ready.ok()) return make_error("{}", ready.message());
  auto dead = match_dead_flag(join->code());
  if (!dead.ok()) return make_error("{}", dead.message());
  auto sw = match_switch(call->code(), tls, l.cord_fiber, *coro_transfer);
  if (!sw.ok()) return make_error("{}", sw.message());
  auto lua = match_lua_stack(script->code(), *fiber_new, *tarantool_l);
  if (!lua.ok()) return make_error("{}", lua.message());
  auto name = match_cord_name(set_name->code(), tls);
  if (!name.ok()) return make_error("{}", name.message());
  for (auto [what, offset] : {std::pair{"cord.alive", alive->cord_alive},
                              {"cord.ready", ready->cord_ready},
                              {"cord.name", name->offset},
                              {"fiber.link", alive->fiber_link},
                              {"fiber.state", ready->fiber_state},
                              {"fiber.csw", sw->fiber_csw},
                              {"fiber.flags", dead->fiber_flags},
                              {"fiber.storage.lua.stack", *lua},
                              {"fiber.ctx", sw->fiber_ctx}}) {
    if (Status s = check_offset(elf, what, offset); !s.ok()) return s;
  }
  FiberLayout out = l;
  out.cord_alive = static_cast<uint32_t>(alive->cord_alive);
  out.cord_ready = static_cast<uint32_t>(ready->cord_ready);
  out.cord_name = static_cast<uint32_t>(name->offset);
  out.rlist_next = static_cast<uint32_t>(alive->rlist_next);
  out.fiber_link = static_cast<uint32_t>(alive->fiber_link);
  out.fiber_state = static_cast<uint32_t>(ready->fiber_state);
  out.fiber_csw = static_cast<uint32_t>(sw->fiber_csw);
  out.fiber_flags = static_cast<uint32_t>(dead->fiber_flags);
  out.flag_dead = static_cast<uint64_t>(dead->flag_dead);
  out.fiber_lua_state = static_cast<uint32_t>(*lua);
  out.fiber_ctx_sp = static_cast<uint32_t>(sw->fiber_ctx);
  if (Status s = check_list_fields(elf, out, *ready, *dead, name->size); !s.ok()) return s;
  out.has_lists = true;
  l = out;
  return Ok{};
}

}  // namespace ljprof::luajit::fiber_code_internal
