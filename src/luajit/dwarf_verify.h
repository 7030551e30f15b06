// `ljprof inspect --verify-dwarf`: compares every extracted LuaJITProcInfo value with the
// struct layouts and enumerators in the binary's own DWARF (libdw), for builds that ship it
// (Debian's /usr/bin/tarantool).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/result.h"
#include "elf/elf_file.h"
#include "luajit/proc_info.h"

namespace ljprof::luajit {

// What the DWARF says: "struct.member" -> byte offset, "sizeof(struct)" -> size,
// "sizeof(struct.member)" -> size of the member's type, enumerator name -> value.
struct DwarfLayout {
  std::map<std::string, int64_t> values;
  std::optional<int64_t> get(const std::string& key) const;
};

// Reads the layouts of global_State, lua_State, GG_State, jit_State, GCproto, GCtrace, GCstr,
// GCfuncL, GCfuncC and the LJ_VMST_* enumerators. Fails when the file has no DWARF or a
// struct is missing.
Result<DwarfLayout> read_dwarf_layout(const std::string& path);

// Any structs by name (first definition in CU order), with the members of named struct or
// union members `depth` levels down ("fiber.storage.lua.stack"), and with a non-empty
// `enum_prefix` the enumerators of the first enumeration that has some of that prefix. Fails
// when the file has no DWARF or no such enumerators; `found` names the structs that were defined.
struct DwarfStructs {
  DwarfLayout layout;
  std::set<std::string> found;
};
Result<DwarfStructs> read_dwarf_structs(const std::string& path,
                                        const std::vector<std::string>& structs, int depth,
                                        const std::string& enum_prefix = {});

struct DwarfCheck {
  std::string field;
  int64_t extracted = 0;
  std::optional<int64_t> dwarf;  // nullopt: DWARF cannot express it (e.g. lj_frame.h macros)
  std::string dwarf_rule;        // "global_State.cur_L", "GG_State.dispatch - GG_State.g"
  std::string width_problem;     // the member's DWARF size differs from the layout list's width
  bool pass = false;
};

// One row per extracted field, each computed by its luajit_info.h DWARF expression.
std::vector<DwarfCheck> verify_against_dwarf(const LuaJITProcInfo& info, const DwarfLayout& dwarf);

// The fiber layout of a Tarantool executable from its machine code (fiber_layout_from_code)
// against the one from its DWARF (read_fiber_layout_dwarf), one row per field ("fiber.link",
// "tp - &cord_ptr" against cord_ptr_from_tp). Empty when the executable has no DWARF fiber
// layout (not a Tarantool); one row without a DWARF value, saying why, when the machine code
// proves no layout (nothing was extracted, so nothing is wrong).
std::vector<DwarfCheck> verify_fiber_layout_against_dwarf(const elf::ElfFile& elf);

}  // namespace ljprof::luajit
