#include "luajit/dwarf_verify.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <functional>
#include <set>

namespace ljprof::luajit {

namespace {

constexpr std::array<const char*, 10> kStructs = {
    "global_State", "lua_State", "GG_State", "jit_State", "GCproto",
    "GCtrace",      "GCstr",     "GCfuncL",  "GCfuncC",   "GCState"};
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
    Dwarf_Attribute tattr;
    if (dwarf_attr(&type, DW_AT_type, &tattr) == nullptr) return std::nullopt;
    Dwarf_Die next;
    if (dwarf_formref_die(&tattr, &next) == nullptr) return std::nullopt;
    type = next;
  }
  return std::nullopt;
}

void read_struct(Dwarf_Die* die, const std::string& name, DwarfLayout& out) {
  if (auto size = type_size(die)) out.values["sizeof(" + name + ")"] = *size;
  Dwarf_Die child;
  if (dwarf_child(die, &child) != 0) return;
  size_t guard = 0;
  do {
    if (dwarf_tag(&child) != DW_TAG_member) continue;
    const char* member = dwarf_diename(&child);
    if (member == nullptr) continue;
    Dwarf_Attribute attr;
    Dwarf_Word off;
    if (dwarf_attr(&child, DW_AT_data_member_location, &attr) != nullptr &&
        dwarf_formudata(&attr, &off) == 0) {
      out.values[name + "." + member] = static_cast<int64_t>(off);
    }
    Dwarf_Attribute tattr;
    Dwarf_Die type;
    if (dwarf_attr(&child, DW_AT_type, &tattr) != nullptr &&
        dwarf_formref_die(&tattr, &type) != nullptr) {
      if (auto size = type_size(&type)) out.values["sizeof(" + name + "." + member + ")"] = *size;
    }
  } while (++guard < 4096 && dwarf_siblingof(&child, &child) == 0);
}

void read_enum(Dwarf_Die* die, DwarfLayout& out) {
  Dwarf_Die child;
  if (dwarf_child(die, &child) != 0) return;
  size_t guard = 0;
  do {
    if (dwarf_tag(&child) != DW_TAG_enumerator) continue;
    const char* name = dwarf_diename(&child);
    if (name == nullptr || std::strncmp(name, "LJ_VMST_", 8) != 0) continue;
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

Result<DwarfLayout> read_dwarf_layout(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return make_error("{}: cannot open: {}", path, std::strerror(errno));
  Dwarf* dbg = dwarf_begin(fd, DWARF_C_READ);
  if (dbg == nullptr) {
    close(fd);
    return make_error("{}: no DWARF debug information ({})", path, dwarf_errmsg(-1));
  }
  DwarfLayout out;
  std::set<std::string> found;
  Dwarf_Off off = 0, next = 0;
  size_t hsize = 0;
  size_t cus = 0;
  bool have_enum = false;
  // Until every struct *and* the enumerators are found: in a build of one CU per source file
  // the structs can all come before the first CU that uses the LJ_VMST_* enum.
  while (cus++ < kMaxCus && (found.size() < kStructs.size() || !have_enum) &&
         dwarf_nextcu(dbg, off, &next, &hsize, nullptr, nullptr, nullptr) == 0) {
    Dwarf_Die cu;
    if (dwarf_offdie(dbg, off + hsize, &cu) != nullptr) {
      Dwarf_Die child;
      if (dwarf_child(&cu, &child) == 0) {
        size_t guard = 0;
        do {
          const int tag = dwarf_tag(&child);
          if (tag == DW_TAG_structure_type && dwarf_hasattr(&child, DW_AT_byte_size)) {
            const char* name = dwarf_diename(&child);
            if (name == nullptr) continue;
            for (const char* s : kStructs) {
              if (std::strcmp(s, name) == 0 && !found.count(s)) {
                read_struct(&child, s, out);
                found.insert(s);
              }
            }
          } else if (tag == DW_TAG_enumeration_type && !have_enum) {
            const size_t before = out.values.size();
            read_enum(&child, out);
            have_enum = out.values.size() != before;
          }
        } while (++guard < (1u << 20) && dwarf_siblingof(&child, &child) == 0);
      }
    }
    off = next;
  }
  dwarf_end(dbg);
  close(fd);
  std::string missing;
  for (const char* s : kStructs) {
    if (!found.count(s)) missing += std::string(missing.empty() ? "" : ", ") + s;
  }
  if (!missing.empty()) {
    return make_error("{}: DWARF has no definition of {}", path, missing);
  }
  if (!have_enum) return make_error("{}: DWARF has no LJ_VMST_* enumerators", path);
  return out;
}

std::vector<DwarfCheck> verify_against_dwarf(const LuaJITProcInfo& info, const DwarfLayout& d) {
  auto member = [&](const char* s) -> std::pair<std::optional<int64_t>, std::string> {
    return {d.get(s), s};
  };
  auto diff = [&](const char* a, const char* b) -> std::pair<std::optional<int64_t>, std::string> {
    auto x = d.get(a), y = d.get(b);
    if (!x || !y) return {std::nullopt, fmt::format("{} - {}", a, b)};
    return {*x - *y, fmt::format("{} - {}", a, b)};
  };
  auto state = [&](std::initializer_list<const char*> names)
      -> std::pair<std::optional<int64_t>, std::string> {
    for (const char* n : names) {
      if (auto v = d.get(n)) return {~*v, fmt::format("~{}", n)};
    }
    return {std::nullopt, fmt::format("~{}", *names.begin())};
  };
  std::vector<DwarfCheck> out;
  for (const Field& f : info.fields) {
    std::pair<std::optional<int64_t>, std::string> ref{std::nullopt, "not in DWARF"};
    const std::string& n = f.name;
    if (n == field::kGc64) {
      auto size = d.get("sizeof(global_State.cur_L)");
      ref = {size ? std::optional<int64_t>(*size == 8 ? 1 : 0) : std::nullopt,
             "sizeof(global_State.cur_L) == 8 (GCRef width)"};
    } else if (n == field::kGDispatch) {
      ref = diff("GG_State.dispatch", "GG_State.g");
    } else if (n == field::kGJitTrace) {
      auto j = d.get("GG_State.J"), g = d.get("GG_State.g"), t = d.get("jit_State.trace");
      ref = {j && g && t ? std::optional<int64_t>(*j - *g + *t) : std::nullopt,
             "GG_State.J - GG_State.g + jit_State.trace"};
    } else if (n == field::kGGcRoot) {
      auto gc = d.get("global_State.gc"), root = d.get("GCState.root");
      ref = {gc && root ? std::optional<int64_t>(*gc + *root) : std::nullopt,
             "global_State.gc + GCState.root"};
    } else if (n == field::kVmstInterp) {
      ref = state({"LJ_VMST_INTERP"});
    } else if (n == field::kVmstLfunc) {
      ref = state({"LJ_VMST_LFUNC"});
    } else if (n == field::kVmstFfunc) {
      ref = state({"LJ_VMST_FFUNC"});
    } else if (n == field::kVmstC) {
      ref = state({"LJ_VMST_C", "LJ_VMST_CFUNC"});
    } else if (n == field::kVmstGc) {
      ref = state({"LJ_VMST_GC"});
    } else if (n == field::kVmstExit) {
      ref = state({"LJ_VMST_EXIT"});
    } else if (n == field::kStrData) {
      ref = member("sizeof(GCstr)");
    } else if (n == field::kPtSize) {
      ref = member("sizeof(GCproto)");
    } else if (n == field::kFnFfid) {
      ref = member("GCfuncL.ffid");
    } else if (n == field::kFnPc) {
      ref = member("GCfuncL.pc");
    } else if (n.rfind("CFRAME_", 0) == 0) {
      ref = {std::nullopt, "lj_frame.h macro, not in DWARF"};
    } else {
      ref = member(n.c_str());
    }
    DwarfCheck c;
    c.field = n;
    c.extracted = f.value;
    c.dwarf = ref.first;
    c.dwarf_rule = ref.second;
    c.pass = c.dwarf && *c.dwarf == f.value;
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace ljprof::luajit
