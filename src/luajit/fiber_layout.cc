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

// The layout from `elf`'s own .symtab and DWARF.
Result<FiberLayout> layout_of(const elf::ElfFile& elf) {
  FiberLayout out;
  const elf::Symbol* cord = elf.find_symbol("main_cord");
  if (cord == nullptr || cord->table != elf::SymbolTable::Symtab || cord->type != STT_OBJECT) {
    return make_error("no fiber layout: {} has no .symtab OBJECT symbol main_cord", elf.path());
  }
  out.main_cord = cord->value;
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

Result<FiberLayout> read_fiber_layout(const elf::ElfFile& elf, const std::string& debug_dir) {
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

std::vector<std::pair<std::string, uint64_t>> fiber_layout_rows(const FiberLayout& l) {
  return {{"main_cord", l.main_cord},
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
}

}  // namespace ljprof::luajit
