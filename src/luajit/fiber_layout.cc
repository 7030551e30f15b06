#include "luajit/fiber_layout.h"

#include <elf.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "luajit/dwarf_verify.h"

namespace ljprof::luajit {

namespace {

// One member the fiber walk reads: its DWARF key and the byte sizes it may have (0: any).
struct FiberMember {
  const char* strct;
  const char* member;  // dotted path inside the struct for nested members
  uint32_t FiberLayout::*offset;
  std::vector<int64_t> sizes;
};

std::vector<FiberMember> fiber_members() {
  // tarantool src/lib/core/fiber.h: struct cord { struct fiber *fiber; ... struct rlist alive; },
  // struct fiber { ... fid; ... struct rlist link; ... storage.lua.stack; char *name; };
  // src/lib/salad/rlist.h: struct rlist { struct rlist *prev, *next; }.
  // third_party/coro/coro.h (CORO_ASM): struct fiber { coro_context ctx; ... }, coro_context
  // { void **sp; }.
  return {
      {"cord", "fiber", &FiberLayout::cord_fiber, {8}},
      {"cord", "alive", &FiberLayout::cord_alive, {16}},
      {"cord", "ready", &FiberLayout::cord_ready, {16}},
      // char name[40]: the size read for an array member is its element's (char).
      {"cord", "name", &FiberLayout::cord_name, {1}},
      {"rlist", "next", &FiberLayout::rlist_next, {8}},
      {"fiber", "link", &FiberLayout::fiber_link, {16}},
      {"fiber", "fid", &FiberLayout::fiber_fid, {4, 8}},
      {"fiber", "name", &FiberLayout::fiber_name, {8}},
      {"fiber", "state", &FiberLayout::fiber_state, {16}},
      {"fiber", "csw", &FiberLayout::fiber_csw, {4}},
      {"fiber", "flags", &FiberLayout::fiber_flags, {4}},
      {"fiber", "storage.lua.stack", &FiberLayout::fiber_lua_state, {8}},
      {"fiber", "ctx.sp", &FiberLayout::fiber_ctx_sp, {8}},
  };
}

// cord_ptr's TLS offset and the executable's PT_TLS. A block whose start is not aligned to its
// p_align (glibc's l_tls_firstbyte_offset != 0, which no linker emits for an executable) is taken
// as having no cord_ptr rather than placed by a rule not checked here.
void read_cord_ptr(const elf::ElfFile& elf, FiberLayout& out) {
  const elf::Symbol* sym = elf.find_symbol("cord_ptr");
  if (sym == nullptr || sym->type != STT_TLS || !sym->defined()) return;
  for (const elf::Segment& seg : elf.segments()) {
    if (seg.type != PT_TLS) continue;
    const uint64_t align = seg.align == 0 ? 1 : seg.align;
    if ((align & (align - 1)) != 0 || align > 4096 || seg.vaddr % align != 0 ||
        seg.memsz > (1u << 24) || sym->value + 8 > seg.memsz) {
      return;
    }
    out.has_cord_ptr = true;
    out.cord_ptr = sym->value;
    out.tls_size = seg.memsz;
    out.tls_align = align;
    return;
  }
}

// The layout from `elf`'s own .symtab and DWARF.
Result<FiberLayout> layout_of(const elf::ElfFile& elf) {
  FiberLayout out;
  const elf::Symbol* cord = elf.find_symbol("main_cord");
  if (cord == nullptr || cord->table != elf::SymbolTable::Symtab || cord->type != STT_OBJECT) {
    return make_error("no fiber layout: {} has no .symtab OBJECT symbol main_cord", elf.path());
  }
  out.main_cord = cord->value;
  read_cord_ptr(elf, out);
  // The fiber flags are an anonymous enum of FIBER_IS_* in fiber.h; their values moved between
  // versions (FIBER_IS_CANCELLABLE went away), so they come from the DWARF too.
  auto dwarf = read_dwarf_structs(elf.path(), {"cord", "fiber", "rlist"}, 3, "FIBER_IS_");
  if (!dwarf.ok()) return make_error("no fiber layout: {}", dwarf.message());
  const auto dead = dwarf->layout.get("FIBER_IS_DEAD");
  if (!dead || *dead <= 0 || (*dead & (*dead - 1)) != 0) {
    return make_error("no fiber layout: DWARF of {} has no FIBER_IS_DEAD flag bit", elf.path());
  }
  out.flag_dead = static_cast<uint64_t>(*dead);
  for (const FiberMember& m : fiber_members()) {
    if (!dwarf->found.count(m.strct)) {
      return make_error("no fiber layout: DWARF of {} has no struct {}", elf.path(), m.strct);
    }
    const std::string key = fmt::format("{}.{}", m.strct, m.member);
    auto offset = dwarf->layout.get(key);
    auto size = dwarf->layout.get("sizeof(" + key + ")");
    if (!offset || !size) {
      return make_error("no fiber layout: DWARF of {} has no struct {} member {}", elf.path(),
                        m.strct, m.member);
    }
    bool size_ok = false;
    for (int64_t s : m.sizes) size_ok = size_ok || s == *size;
    if (!size_ok) {
      return make_error("no fiber layout: struct {} member {} of {} is {} bytes, expected {}",
                        m.strct, m.member, elf.path(), *size, fmt::join(m.sizes, " or "));
    }
    if (*offset < 0 || *offset > (1 << 16)) {
      return make_error("no fiber layout: struct {} member {} of {} is at offset {} (over 64 KiB)",
                        m.strct, m.member, elf.path(), *offset);
    }
    out.*m.offset = static_cast<uint32_t>(*offset);
    if (m.offset == &FiberLayout::fiber_fid) out.fid_size = static_cast<uint32_t>(*size);
  }
  return out;
}

}  // namespace

Result<FiberLayout> read_fiber_layout_dwarf(const elf::ElfFile& elf, const std::string& debug_dir) {
  auto own = layout_of(elf);
  if (own.ok()) return own;
  // A stripped executable: its separate debug file (Debian's -dbgsym package, tarantool-dbg)
  // keeps the .symtab and the DWARF, at the same link-time addresses.
  std::unique_ptr<elf::ElfFile> debug = elf::separate_debug_file(elf, debug_dir);
  if (debug == nullptr) {
    const std::optional<std::string>& id = elf.build_id();
    return make_error(
        "{}; no separate debug file {} either (install the executable's debug symbols)",
        own.message(),
        id && id->size() > 2
            ? fmt::format("{}/.build-id/{}/{}.debug", debug_dir, id->substr(0, 2), id->substr(2))
            : fmt::format("under {} (it has no build-id)", debug_dir));
  }
  return layout_of(*debug);
}

Result<FiberLayout> read_fiber_layout(const elf::ElfFile& elf, const std::string& debug_dir) {
  auto dwarf = read_fiber_layout_dwarf(elf, debug_dir);
  if (dwarf.ok()) return dwarf;
  auto from_code = fiber_layout_from_code(elf);
  if (!from_code.ok()) return make_error("{}; {}", dwarf.message(), from_code.message());
  if (!from_code->has_lists) {
    return make_error("{}; no fiber lists from machine code: {}", dwarf.message(),
                      from_code->lists_error);
  }
  return from_code;
}

Result<FiberLayout> read_fiber_label_layout(const elf::ElfFile& elf, const std::string& debug_dir) {
  auto dwarf = read_fiber_layout_dwarf(elf, debug_dir);
  if (dwarf.ok()) return dwarf;
  auto from_code = fiber_layout_from_code(elf);
  if (from_code.ok()) return from_code;
  return make_error("{}; {}", dwarf.message(), from_code.message());
}

std::optional<int64_t> cord_ptr_from_tp(const FiberLayout& l, elf::Arch arch) {
  // From machine code: the offset the x86-64 code itself reads cord_ptr at.
  if (l.source == FiberLayoutSource::MachineCode) {
    if (arch == elf::Arch::X86_64 && l.cord_ptr_tp_offset != 0) return l.cord_ptr_tp_offset;
    return std::nullopt;
  }
  if (!l.has_cord_ptr) return std::nullopt;
  const auto round_up = [&](uint64_t v) { return (v + l.tls_align - 1) & ~(l.tls_align - 1); };
  if (arch == elf::Arch::X86_64) {
    return static_cast<int64_t>(l.cord_ptr) - static_cast<int64_t>(round_up(l.tls_size));
  }
  constexpr uint64_t kAarch64TcbSize = 16;  // sysdeps/aarch64/nptl/tls.h TLS_TCB_SIZE
  return static_cast<int64_t>(round_up(kAarch64TcbSize) + l.cord_ptr);
}

std::vector<std::pair<std::string, uint64_t>> fiber_layout_rows(const FiberLayout& l) {
  if (l.source == FiberLayoutSource::MachineCode && !l.has_lists) {
    return {{"main_cord", l.main_cord},
            {"cord.fiber", l.cord_fiber},
            {"fiber.fid", l.fiber_fid},
            {"sizeof(fiber.fid)", l.fid_size},
            {"fiber.name", l.fiber_name},
            {"tp - &cord_ptr", static_cast<uint64_t>(-l.cord_ptr_tp_offset)}};
  }
  std::vector<std::pair<std::string, uint64_t>> rows = {
      {"main_cord", l.main_cord},
      {"cord.fiber", l.cord_fiber},
      {"cord.alive", l.cord_alive},
      {"cord.ready", l.cord_ready},
      {"cord.name", l.cord_name},
      {"rlist.next", l.rlist_next},
      {"fiber.link", l.fiber_link},
      {"fiber.fid", l.fiber_fid},
      {"sizeof(fiber.fid)", l.fid_size},
      {"fiber.name", l.fiber_name},
      {"fiber.state", l.fiber_state},
      {"fiber.csw", l.fiber_csw},
      {"fiber.flags", l.fiber_flags},
      {"FIBER_IS_DEAD", l.flag_dead},
      {"fiber.storage.lua.stack", l.fiber_lua_state},
      {"fiber.ctx.sp", l.fiber_ctx_sp}};
  if (l.source == FiberLayoutSource::MachineCode) {
    rows.emplace_back("tp - &cord_ptr", static_cast<uint64_t>(-l.cord_ptr_tp_offset));
  } else if (l.has_cord_ptr) {
    rows.insert(
        rows.end(),
        {{"cord_ptr", l.cord_ptr}, {"PT_TLS.memsz", l.tls_size}, {"PT_TLS.align", l.tls_align}});
  }
  return rows;
}

}  // namespace ljprof::luajit
