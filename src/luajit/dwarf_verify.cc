#include "luajit/dwarf_verify.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <charconv>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <string_view>

#include "luajit/fiber_layout.h"

namespace ljprof::luajit {

namespace {

constexpr std::array<const char*, 17> kStructs = {
    "global_State", "lua_State", "GG_State", "jit_State", "GCproto", "GCtrace",
    "GCstr",        "GCfuncL",   "GCfuncC",  "GCState",   "GCtab",   "GCudata",
    "GCupval",      "Node",      "GCcdata",  "GChead",    "CType"};
// Structs only some forks define: upstream's string interning state since 2020 (lj_obj.h
// StrInternState); Tarantool's fork keeps global_State.strhash/strmask instead.
constexpr std::array<const char*, 1> kForkStructs = {"StrInternState"};
// Bound on the CUs scanned (a C++ binary with thousands of CUs still has LuaJIT's few).
constexpr size_t kMaxCus = 1u << 16;

std::optional<int64_t> type_size(Dwarf_Die* die) {
  Dwarf_Die type = *die;
  for (int depth = 0; depth < 16; ++depth) {
    Dwarf_Attribute attr;
    Dwarf_Word size;
    if (dwarf_attr(&type, DW_AT_byte_size, &attr) != nullptr &&
        dwarf_formudata(&attr, &size) == 0) {
      return static_cast<int64_t>(size);
    }
    // A pointer's size is its CU's address size: clang omits DW_AT_byte_size on pointer types
    // (DWARF 5 7.5: implied), and following DW_AT_type would measure the pointee.
    const int tag = dwarf_tag(&type);
    if (tag == DW_TAG_pointer_type || tag == DW_TAG_reference_type ||
        tag == DW_TAG_rvalue_reference_type) {
      Dwarf_Die cu;
      uint8_t address_size = 0;
      if (dwarf_diecu(&type, &cu, &address_size, nullptr) == nullptr) return std::nullopt;
      return address_size;
    }
    Dwarf_Attribute tattr;
    if (dwarf_attr(&type, DW_AT_type, &tattr) == nullptr) return std::nullopt;
    Dwarf_Die next;
    if (dwarf_formref_die(&tattr, &next) == nullptr) return std::nullopt;
    type = next;
  }
  return std::nullopt;
}

// `die` with typedefs and cv-qualifiers peeled off (bounded), for deciding whether a member is
// itself a struct or union.
Dwarf_Die strip_type(Dwarf_Die die) {
  for (int depth = 0; depth < 16; ++depth) {
    const int tag = dwarf_tag(&die);
    if (tag != DW_TAG_typedef && tag != DW_TAG_const_type && tag != DW_TAG_volatile_type) break;
    Dwarf_Attribute attr;
    Dwarf_Die next;
    if (dwarf_attr(&die, DW_AT_type, &attr) == nullptr ||
        dwarf_formref_die(&attr, &next) == nullptr) {
      break;
    }
    die = next;
  }
  return die;
}

// Members of `die` as "name.member" (offset `base` + DW_AT_data_member_location) and
// "sizeof(name.member)"; a named member that is itself a struct or union is read the same way
// to `depth` more levels ("fiber.storage.lua.stack": member-of-member offsets, summed).
void read_members(Dwarf_Die* die, const std::string& name, int64_t base, int depth,
                  DwarfLayout& out) {
  Dwarf_Die child;
  if (dwarf_child(die, &child) != 0) return;
  size_t guard = 0;
  do {
    if (dwarf_tag(&child) != DW_TAG_member) continue;
    const char* member = dwarf_diename(&child);
    if (member == nullptr) continue;
    const std::string key = name + "." + member;
    Dwarf_Attribute attr;
    Dwarf_Word off = 0;
    // A union's members carry no location: they are at the union's start.
    const bool located = dwarf_attr(&child, DW_AT_data_member_location, &attr) != nullptr &&
                         dwarf_formudata(&attr, &off) == 0;
    if (located || dwarf_tag(die) == DW_TAG_union_type) {
      out.values[key] = base + static_cast<int64_t>(off);
    }
    Dwarf_Attribute tattr;
    Dwarf_Die type;
    if (dwarf_attr(&child, DW_AT_type, &tattr) == nullptr ||
        dwarf_formref_die(&tattr, &type) == nullptr) {
      continue;
    }
    if (auto size = type_size(&type)) out.values["sizeof(" + key + ")"] = *size;
    Dwarf_Die inner = strip_type(type);
    const int tag = dwarf_tag(&inner);
    if (depth > 0 && out.values.count(key) &&
        (tag == DW_TAG_structure_type || tag == DW_TAG_union_type)) {
      read_members(&inner, key, out.values[key], depth - 1, out);
    }
  } while (++guard < 4096 && dwarf_siblingof(&child, &child) == 0);
}

void read_struct(Dwarf_Die* die, const std::string& name, int depth, DwarfLayout& out) {
  if (auto size = type_size(die)) out.values["sizeof(" + name + ")"] = *size;
  read_members(die, name, 0, depth, out);
}

// The enumerators of `die` whose names start with `prefix` ("LJ_VMST_", "FIBER_IS_").
void read_enum(Dwarf_Die* die, const std::string& prefix, DwarfLayout& out) {
  Dwarf_Die child;
  if (dwarf_child(die, &child) != 0) return;
  size_t guard = 0;
  do {
    if (dwarf_tag(&child) != DW_TAG_enumerator) continue;
    const char* name = dwarf_diename(&child);
    if (name == nullptr || std::strncmp(name, prefix.c_str(), prefix.size()) != 0) continue;
    Dwarf_Attribute attr;
    Dwarf_Sword value;
    if (dwarf_attr(&child, DW_AT_const_value, &attr) != nullptr &&
        dwarf_formsdata(&attr, &value) == 0) {
      out.values[name] = value;
    }
  } while (++guard < 4096 && dwarf_siblingof(&child, &child) == 0);
}

}  // namespace

std::optional<int64_t> DwarfLayout::get(const std::string& key) const {
  auto it = values.find(key);
  if (it == values.end()) return std::nullopt;
  return it->second;
}

namespace {

// Scans the CUs of `path` for the definitions of `structs` (and, with a non-empty `enum_prefix`,
// the first enumeration type with enumerators of that prefix) until every one is found. `found`
// names the structs that were.
Result<DwarfLayout> scan_dwarf(const std::string& path, const std::vector<std::string>& structs,
                               int depth, const std::string& enum_prefix,
                               std::set<std::string>& found) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return make_error("{}: cannot open: {}", path, std::strerror(errno));
  Dwarf* dbg = dwarf_begin(fd, DWARF_C_READ);
  if (dbg == nullptr) {
    close(fd);
    return make_error("{}: no DWARF debug information ({})", path, dwarf_errmsg(-1));
  }
  DwarfLayout out;
  Dwarf_Off off = 0, next = 0;
  size_t hsize = 0;
  size_t cus = 0;
  bool have_enum = enum_prefix.empty();
  // Until every struct *and* the enumerators are found: in a build of one CU per source file
  // the structs can all come before the first CU that uses the LJ_VMST_* enum.
  while (cus++ < kMaxCus && (found.size() < structs.size() || !have_enum) &&
         dwarf_nextcu(dbg, off, &next, &hsize, nullptr, nullptr, nullptr) == 0) {
    Dwarf_Die cu;
    Dwarf_Die child;
    if (dwarf_offdie(dbg, off + hsize, &cu) != nullptr && dwarf_child(&cu, &child) == 0) {
      size_t guard = 0;
      do {
        const int tag = dwarf_tag(&child);
        if (tag == DW_TAG_structure_type && dwarf_hasattr(&child, DW_AT_byte_size)) {
          const char* name = dwarf_diename(&child);
          if (name == nullptr) continue;
          for (const std::string& s : structs) {
            if (s == name && !found.count(s)) {
              read_struct(&child, s, depth, out);
              found.insert(s);
            }
          }
        } else if (tag == DW_TAG_enumeration_type && !have_enum) {
          const size_t before = out.values.size();
          read_enum(&child, enum_prefix, out);
          have_enum = out.values.size() != before;
        }
      } while (++guard < (1u << 20) && dwarf_siblingof(&child, &child) == 0);
    }
    off = next;
  }
  dwarf_end(dbg);
  close(fd);
  if (!have_enum) return make_error("{}: DWARF has no {}* enumerators", path, enum_prefix);
  return out;
}

}  // namespace

Result<DwarfLayout> read_dwarf_layout(const std::string& path) {
  std::set<std::string> found;
  std::vector<std::string> structs(kStructs.begin(), kStructs.end());
  structs.insert(structs.end(), kForkStructs.begin(), kForkStructs.end());
  LJ_ASSIGN_OR_RETURN(DwarfLayout out, scan_dwarf(path, structs, 0, "LJ_VMST_", found));
  std::string missing;
  for (const char* s : kStructs) {
    if (!found.count(s)) missing += std::string(missing.empty() ? "" : ", ") + s;
  }
  if (!missing.empty()) {
    return make_error("{}: DWARF has no definition of {}", path, missing);
  }
  return out;
}

Result<DwarfStructs> read_dwarf_structs(const std::string& path,
                                        const std::vector<std::string>& structs, int depth,
                                        const std::string& enum_prefix) {
  DwarfStructs out;
  LJ_ASSIGN_OR_RETURN(out.layout, scan_dwarf(path, structs, depth, enum_prefix, out.found));
  return out;
}

namespace {

// One term of a luajit_info.h DWARF expression: `struct.member`, `sizeof(x)` or an enumerator,
// optionally complemented (`~LJ_VMST_EXIT`, the stored vmstate).
std::optional<int64_t> dwarf_term(const DwarfLayout& d, std::string_view term) {
  const bool complement = !term.empty() && term[0] == '~';
  if (complement) term.remove_prefix(1);
  auto v = d.get(std::string(term));
  if (!v) return std::nullopt;
  return complement ? ~*v : *v;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  while (true) {
    while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
    const size_t at = s.find(sep);
    std::string_view part = s.substr(0, at);
    while (!part.empty() && part.back() == ' ') part.remove_suffix(1);
    if (!part.empty()) out.push_back(part);
    if (at == std::string_view::npos) return out;
    s.remove_prefix(at + 1);
  }
}

// `term (+|-) term ... [/ N]`; nullopt when a term is absent from the DWARF.
std::optional<int64_t> dwarf_sum(const DwarfLayout& d, std::string_view expr) {
  const std::vector<std::string_view> tokens = split(expr, ' ');
  if (tokens.empty()) return std::nullopt;
  auto value = dwarf_term(d, tokens[0]);
  for (size_t i = 1; value && i + 1 < tokens.size(); i += 2) {
    if (tokens[i] == "/") {
      int64_t divisor = 0;
      const std::string_view n = tokens[i + 1];
      std::from_chars(n.data(), n.data() + n.size(), divisor);
      value = divisor != 0 ? std::optional<int64_t>(*value / divisor) : std::nullopt;
      continue;
    }
    auto rhs = dwarf_term(d, tokens[i + 1]);
    if (!rhs) return std::nullopt;
    value = tokens[i] == "-" ? *value - *rhs : *value + *rhs;
  }
  return value;
}

// The first alternative whose terms the DWARF has (`~LJ_VMST_C | ~LJ_VMST_CFUNC`).
std::optional<int64_t> dwarf_value(const DwarfLayout& d, std::string_view expr) {
  for (std::string_view alternative : split(expr, '|')) {
    if (auto v = dwarf_sum(d, alternative)) return v;
  }
  return std::nullopt;
}

// The width check of a member field: the last term's DWARF type size against the list's WIDTH
// (so a uint8 read of a field that became uint16 cannot pass). Empty when it agrees.
std::string width_problem(const DwarfLayout& d, const FieldSpec& spec, uint8_t ref_size) {
  if (spec.width == 0) return {};
  const std::vector<std::string_view> terms = split(split(spec.dwarf, '|').front(), ' ');
  if (terms.empty()) return {};
  const std::string member(terms.back());
  if (member.find('.') == std::string::npos || member.rfind("sizeof(", 0) == 0) return {};
  const int expect = spec.width == kRefWidth ? ref_size : spec.width;
  auto size = d.get("sizeof(" + member + ")");
  if (!size) return fmt::format("DWARF has no type size for {}", member);
  if (*size != expect)
    return fmt::format("{} is {} bytes in DWARF, {} expected", member, *size, expect);
  return {};
}

}  // namespace

std::vector<DwarfCheck> verify_against_dwarf(const LuaJITProcInfo& info, const DwarfLayout& d) {
  std::vector<DwarfCheck> out;
  for (const Field& f : info.fields) {
    const FieldSpec& spec = field_spec(f.id);
    DwarfCheck c;
    c.field = f.name;
    c.extracted = f.value;
    if (spec.dwarf.empty()) {
      c.dwarf_rule = fmt::format("{} macro, not in DWARF", spec.header);
    } else {
      c.dwarf = dwarf_value(d, spec.dwarf);
      c.dwarf_rule = std::string(spec.dwarf);
      c.width_problem = width_problem(d, spec, info.ref_size);
    }
    c.pass = c.dwarf && *c.dwarf == f.value && c.width_problem.empty();
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<DwarfCheck> verify_fiber_layout_against_dwarf(const elf::ElfFile& elf) {
  auto dwarf = read_fiber_layout_dwarf(elf);
  if (!dwarf.ok()) return {};
  auto unproven = [](std::string field, const std::string& why) {
    DwarfCheck c;
    c.field = std::move(field);
    c.dwarf_rule = "not from machine code: " + why;
    return c;
  };
  auto code = fiber_layout_from_code(elf);
  if (!code.ok()) return {unproven("fiber layout", code.message())};
  std::map<std::string, uint64_t> want;
  for (const auto& [name, value] : fiber_layout_rows(*dwarf)) want[name] = value;
  if (auto tp = cord_ptr_from_tp(*dwarf, elf.arch())) {
    want["tp - &cord_ptr"] = static_cast<uint64_t>(-*tp);
  }
  std::vector<DwarfCheck> checks;
  for (const auto& [name, value] : fiber_layout_rows(*code)) {
    DwarfCheck c;
    c.field = name;
    c.extracted = static_cast<int64_t>(value);
    c.dwarf_rule = name == "tp - &cord_ptr" ? "cord_ptr and PT_TLS" : name;
    if (auto w = want.find(name); w != want.end()) {
      c.dwarf = static_cast<int64_t>(w->second);
      c.pass = w->second == value;
    }
    checks.push_back(std::move(c));
  }
  if (!code->has_lists) checks.push_back(unproven("fiber lists", code->lists_error));
  return checks;
}

}  // namespace ljprof::luajit
