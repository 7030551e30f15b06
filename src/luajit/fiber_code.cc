// What a CPU sample's fiber label needs (fiber_layout.h fiber_layout_from_code), read from
// the machine code of four functions every Tarantool exports in .dynsym, which strip keeps:
// Tarantool packages outside Debian ship the executable stripped, its DWARF in a separate
// package that is rarely installed. x86-64 only: the patterns were derived from, and are proven
// against the DWARF of, Debian's x86-64 build; an AArch64 build without debug information fails
// closed.
//
// tarantool src/lib/core/fiber.c (2.x):
//   bool cord_is_main(void) { return cord() == &main_cord; }    cord() = cord_ptr, a __thread
//   struct fiber *fiber_self(void) { return fiber(); }          fiber() = cord()->fiber
//   void fiber_set_name(struct fiber *f, const char *name)      frees f->name unless it is
//       f->inline_name, then copies the name
//   struct fiber *fiber_new_ex(...)                             if (++cord->max_fid <= 100)
//       cord->max_fid = 101; fiber->fid = cord->max_fid;        (FIBER_ID_MAX_RESERVED)
#include <elf.h>
#include <fmt/format.h>

#include <array>
#include <map>
#include <optional>
#include <set>

#include "luajit/fiber_code.h"
#include "luajit/fiber_code_internal.h"
#include "luajit/fiber_layout.h"
#include "luajit/matchers_internal.h"

namespace ljprof::luajit {

using namespace matchers_internal;
using namespace fiber_code_internal;

namespace fiber_code_internal {

Result<DecodedFunction> decode_export(const elf::ElfFile& elf, const char* name) {
  const elf::Symbol* sym = elf.find_symbol(name);
  if (sym == nullptr || !sym->defined()) {
    return make_error("{} exports no function {}", elf.path(), name);
  }
  return decode_symbol(elf, name);
}

// The x86 segment-override prefix 0x64 among the legacy prefixes (the disassembler's operands
// keep no segment).
bool fs_relative(const Insn& i) {
  for (uint8_t b : i.byte_span()) {
    if (b == 0x64) return true;
    const bool legacy = b == 0x26 || b == 0x2e || b == 0x36 || b == 0x3e || b == 0x65 ||
                        b == 0x66 || b == 0x67 || b == 0xf0 || b == 0xf2 || b == 0xf3;
    if (!legacy) return false;
  }
  return false;
}

bool tls_operand(const Insn& i, const Operand& op) {
  return op.kind == Kind::Mem && op.base == kNoReg && op.index == kNoReg && fs_relative(i);
}

std::optional<LoadView> tls_load(const Insn& i) {
  if (i.kind != InsnKind::Mov || i.op_count != 2 || i.ops[0].kind != Kind::Reg ||
      i.ops[0].size != 8 || !tls_operand(i, i.ops[1])) {
    return std::nullopt;
  }
  return LoadView{i.ops[0].reg, kNoReg, i.ops[1].disp, 8};
}

namespace {

bool caller_saved(int reg) {
  return reg == 0 || reg == 1 || reg == 2 || reg == 6 || reg == 7 || (reg >= 8 && reg <= 11);
}

}  // namespace

bool is_call(const Insn& i) {
  return i.kind == InsnKind::CallDirect || i.kind == InsnKind::CallIndirect;
}

bool clobbered(const Code& c, const Insn& i, int reg) {
  return (is_call(i) && caller_saved(reg)) || writes_reg(c, i, reg);
}

Status check_offset(const elf::ElfFile& elf, const char* what, int64_t offset) {
  if (offset < 0 || offset >= kMaxMemberOffset) {
    return make_error("{}: {} at {} is not a member offset (0..64 KiB)", elf.path(), what, offset);
  }
  return Ok{};
}

}  // namespace fiber_code_internal

namespace {

// FIBER_ID_MAX_RESERVED (fiber.h): the compare that keeps new fids above the reserved ones.
constexpr std::array<int64_t, 2> kReservedFidCompare = {99, 100};

// What a register is known to hold while a function's straight-line code is followed.
struct RegFacts {
  std::map<int, int64_t> cord;      // reg -> the TLS offset it was loaded from (a cord pointer)
  std::map<int, int64_t> constant;  // reg -> an immediate or a rip-relative address
  void forget(int reg) {
    cord.erase(reg);
    constant.erase(reg);
  }
  void after(const Code& c, const Insn& i) {
    for (int reg = 0; reg <= 15; ++reg) {
      if (clobbered(c, i, reg)) forget(reg);
    }
    if (is_call(i)) return;
    if (auto load = tls_load(i)) {
      cord[load->dst] = load->disp;
    } else if (i.kind == InsnKind::Lea && i.ops[0].kind == Kind::Reg && i.ops[1].base == kX86Rip &&
               i.ops[1].index == kNoReg) {
      constant[i.ops[0].reg] = static_cast<int64_t>(i.end()) + i.ops[1].disp;
    } else if (i.kind == InsnKind::Mov && i.ops[0].kind == Kind::Reg &&
               i.ops[1].kind == Kind::Imm) {
      constant[i.ops[0].reg] = i.ops[1].imm;
    }
  }
};

}  // namespace

// cord_is_main: the compare of cord_ptr (fs:[D], or a register loaded from it) with main_cord's
// address (an immediate, or a register a rip-relative lea set).
Result<MainCord> match_cord_is_main(const Code& c) {
  RegFacts facts;
  for (const Insn& i : c.insns) {
    if (i.kind == InsnKind::Gap || i.kind == InsnKind::Ret) break;
    if (i.kind == InsnKind::Compare && i.op_count == 2) {
      std::optional<int64_t> tls, address;
      for (const Operand& op : {i.ops[0], i.ops[1]}) {
        if (tls_operand(i, op)) {
          tls = op.disp;
        } else if (op.kind == Kind::Reg && facts.cord.count(op.reg)) {
          tls = facts.cord.at(op.reg);
        } else if (op.kind == Kind::Imm) {
          address = op.imm;
        } else if (op.kind == Kind::Reg && facts.constant.count(op.reg)) {
          address = facts.constant.at(op.reg);
        }
      }
      if (tls && address && *tls < 0 && *address > 0) {
        return MainCord{static_cast<uint64_t>(*address), *tls};
      }
    }
    facts.after(c, i);
  }
  return make_error("{}: no compare of the __thread cord_ptr with an address (main_cord)",
                    c.function);
}

// fiber_self: the cord pointer loaded from cord_ptr, then the 8 bytes at [cord + X] returned.
Result<int64_t> match_fiber_self(const Code& c, int64_t tls_offset) {
  RegFacts facts;
  for (size_t n = 0; n < c.insns.size(); ++n) {
    const Insn& i = c.insns[n];
    if (i.kind == InsnKind::Gap || i.kind == InsnKind::Ret) break;
    auto load = as_load(c, i);
    if (load && load->size == 8 && facts.cord.count(load->base) &&
        facts.cord.at(load->base) == tls_offset && load->dst == return_reg(c) &&
        n + 1 < c.insns.size() && c.insns[n + 1].kind == InsnKind::Ret) {
      return load->disp;
    }
    facts.after(c, i);
  }
  return make_error("{}: no load of cord_ptr->fiber returned (cord_ptr at fs:{:#x})", c.function,
                    tls_offset);
}

// fiber_set_name: `f->name != f->inline_name`, a load through the first argument (or a copy of
// it) compared with an address computed from it. The name pointer is the loaded member.
Result<int64_t> match_fiber_name(const Code& c) {
  std::set<int> fiber_regs = {arg0_reg(c)};
  std::map<int, int64_t> loaded;    // reg -> member it holds, loaded through the fiber
  std::map<int, int64_t> computed;  // reg -> fiber + offset (lea)
  for (const Insn& i : c.insns) {
    if (i.kind == InsnKind::Gap || i.kind == InsnKind::Ret) break;
    if (i.kind == InsnKind::Compare && i.op_count == 2 && i.ops[0].kind == Kind::Reg &&
        i.ops[1].kind == Kind::Reg) {
      for (auto [a, b] : {std::pair{i.ops[0].reg, i.ops[1].reg}, {i.ops[1].reg, i.ops[0].reg}}) {
        if (loaded.count(a) && computed.count(b) && computed.at(b) > loaded.at(a)) {
          return loaded.at(a);
        }
      }
    }
    std::optional<std::pair<int, int64_t>> new_load, new_lea;
    std::optional<int> new_copy;
    if (auto load = as_load(c, i); load && load->size == 8 && fiber_regs.count(load->base)) {
      new_load = {load->dst, load->disp};
    } else if (i.kind == InsnKind::Lea && i.ops[0].kind == Kind::Reg &&
               fiber_regs.count(i.ops[1].base) && i.ops[1].index == kNoReg) {
      new_lea = {i.ops[0].reg, i.ops[1].disp};
    } else if (i.kind == InsnKind::Mov && i.ops[0].kind == Kind::Reg && i.ops[0].size == 8 &&
               i.ops[1].kind == Kind::Reg && fiber_regs.count(i.ops[1].reg)) {
      new_copy = i.ops[0].reg;
    }
    for (int reg = 0; reg <= 15; ++reg) {
      if (clobbered(c, i, reg)) {
        fiber_regs.erase(reg);
        loaded.erase(reg);
        computed.erase(reg);
      }
    }
    if (new_load) loaded[new_load->first] = new_load->second;
    if (new_lea) computed[new_lea->first] = new_lea->second;
    if (new_copy) fiber_regs.insert(*new_copy);
  }
  return make_error(
      "{}: no load through the fiber compared with an address inside it (f->name != "
      "f->inline_name)",
      c.function);
}

// fiber_new_ex: after the compare with FIBER_ID_MAX_RESERVED, the new id is stored twice from
// one register: into the cord (a register loaded from cord_ptr) and into the new fiber.
Result<FidStore> match_fiber_fid(const Code& c, int64_t tls_offset) {
  RegFacts facts;
  for (size_t n = 0; n < c.insns.size(); ++n) {
    const Insn& i = c.insns[n];
    if (i.kind == InsnKind::Gap) break;
    const bool reserved_compare =
        i.kind == InsnKind::Compare && i.op_count == 2 && i.ops[0].kind == Kind::Reg &&
        i.ops[1].kind == Kind::Imm &&
        (i.ops[1].imm == kReservedFidCompare[0] || i.ops[1].imm == kReservedFidCompare[1]);
    if (reserved_compare) {
      const int id = i.ops[0].reg;
      RegFacts after = facts;
      bool into_cord = false;
      std::vector<FidStore> into_other;
      for (size_t k = n + 1; k < window_end(c, n + 1, 8); ++k) {
        const Insn& s = c.insns[k];
        auto store = as_store(c, s);
        if (store && !store->is_imm && store->src == id) {
          const bool cord =
              after.cord.count(store->base) && after.cord.at(store->base) == tls_offset;
          if (cord) {
            into_cord = true;
          } else {
            into_other.push_back({store->disp, store->size});
          }
        }
        if (is_call(s)) break;
        after.after(c, s);
      }
      if (into_cord && into_other.size() == 1) return into_other.front();
    }
    facts.after(c, i);
  }
  return make_error(
      "{}: no new fiber id stored into both the cord and the fiber after a compare with "
      "FIBER_ID_MAX_RESERVED",
      c.function);
}

namespace {

// main_cord is a static variable: inside a writable PT_LOAD segment.
bool writable_data(const elf::ElfFile& elf, uint64_t address) {
  for (const elf::Segment& seg : elf.segments()) {
    if (seg.type == PT_LOAD && (seg.flags & PF_W) != 0 && address >= seg.vaddr &&
        address - seg.vaddr < seg.memsz) {
      return true;
    }
  }
  return false;
}

}  // namespace

Result<FiberLayout> fiber_layout_from_code(const elf::ElfFile& elf) {
  if (elf.arch() != elf::Arch::X86_64) {
    return make_error("no fiber layout from machine code: {} is not x86-64", elf.path());
  }
  auto fail = [&](const std::string& why) {
    return make_error("no fiber layout from machine code: {}", why);
  };
  auto main_code = decode_export(elf, "cord_is_main");
  auto self_code = decode_export(elf, "fiber_self");
  auto name_code = decode_export(elf, "fiber_set_name");
  auto new_code = decode_export(elf, "fiber_new_ex");
  for (const auto* r : {&main_code, &self_code, &name_code, &new_code}) {
    if (!r->ok()) return fail(r->message());
  }
  auto main_cord = match_cord_is_main(main_code->code());
  if (!main_cord.ok()) return fail(main_cord.message());
  auto cord_fiber = match_fiber_self(self_code->code(), main_cord->tls_offset);
  if (!cord_fiber.ok()) return fail(cord_fiber.message());
  auto name = match_fiber_name(name_code->code());
  if (!name.ok()) return fail(name.message());
  auto fid = match_fiber_fid(new_code->code(), main_cord->tls_offset);
  if (!fid.ok()) return fail(fid.message());
  if (fid->size != 4 && fid->size != 8) {
    return fail(fmt::format("fiber_new_ex stores a {}-byte fiber id", fid->size));
  }
  for (auto [what, offset] :
       {std::pair{"cord.fiber", *cord_fiber}, {"fiber.name", *name}, {"fiber.fid", fid->offset}}) {
    if (Status s = check_offset(elf, what, offset); !s.ok()) return fail(s.message());
  }
  if (!writable_data(elf, main_cord->address)) {
    return fail(fmt::format("main_cord at {:#x} is outside every writable segment of {}",
                            main_cord->address, elf.path()));
  }
  FiberLayout out;
  out.source = FiberLayoutSource::MachineCode;
  out.main_cord = main_cord->address;
  out.cord_fiber = static_cast<uint32_t>(*cord_fiber);
  out.fiber_name = static_cast<uint32_t>(*name);
  out.fiber_fid = static_cast<uint32_t>(fid->offset);
  out.fid_size = fid->size;
  out.cord_ptr_tp_offset = main_cord->tls_offset;
  out.has_lists = false;
  if (Status lists = fiber_list_fields_from_code(elf, out); !lists.ok()) {
    out.lists_error = lists.message();
  }
  return out;
}

}  // namespace ljprof::luajit
