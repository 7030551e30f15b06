// `ljprof inspect BINARY [--json]`: what ljprof understands about one binary.
#include <elf.h>

#include <fmt/format.h>
#include "common/hex.h"

#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "cfi/cfi.h"
#include "cli/commands.h"
#include "common/printable.h"
#include "elf/elf_file.h"
#include "luajit/dwarf_verify.h"
#include "luajit/fiber_layout.h"
#include "luajit/live_verify.h"
#include "luajit/proc_info.h"
#include "luajit/runtime.h"
#include "report/json_text.h"

namespace ljprof::cli {

namespace {

using Json = nlohmann::ordered_json;

const char* elf_type_name(uint16_t type) {
  switch (type) {
    case ET_REL:
      return "REL";
    case ET_EXEC:
      return "EXEC";
    case ET_DYN:
      return "DYN";
    case ET_CORE:
      return "CORE";
    default:
      return "UNKNOWN";
  }
}

const char* bind_name(uint8_t bind) {
  switch (bind) {
    case STB_LOCAL:
      return "LOCAL";
    case STB_GLOBAL:
      return "GLOBAL";
    case STB_WEAK:
      return "WEAK";
    case STB_GNU_UNIQUE:
      return "UNIQUE";
    default:
      return "OTHER";
  }
}

const char* type_name(uint8_t type) {
  switch (type) {
    case STT_NOTYPE:
      return "NOTYPE";
    case STT_OBJECT:
      return "OBJECT";
    case STT_FUNC:
      return "FUNC";
    case STT_GNU_IFUNC:
      return "IFUNC";
    default:
      return "OTHER";
  }
}

Json evidence_json(const luajit::Evidence& e) {
  return {{"function", e.function},
          {"address", hex(e.address)},
          {"bytes", e.bytes},
          {"text", e.text},
          {"role", e.role}};
}

Json proc_info_json(const luajit::LuaJITProcInfo& info) {
  Json j;
  j["module"] = info.path;
  j["runtime"] = luajit::runtime_name(info.runtime);
  j["arch"] = elf::arch_name(info.arch);
  j["gc64"] = info.gc64;
  j["vm"] = {{"begin", hex(info.vm.begin)}, {"end", hex(info.vm.end)}, {"source", info.vm.source}};
  j["dispatch_register"] = luajit::register_name(info.arch, info.dispatch_reg);
  j["dispatch_register_holds"] = info.dispatch_is_g ? "G" : "G + GG_State.dispatch-g";
  j["vmstate_numbering"] = luajit::vmstate_numbering_name(info.numbering);
  Json fields = Json::object();
  for (const luajit::Field& f : info.fields) {
    Json ev = Json::array();
    for (const luajit::Evidence& e : f.evidence) ev.push_back(evidence_json(e));
    fields[f.name] = {{"value", f.value}, {"source", f.source}, {"evidence", ev}};
    if (!f.not_cross_checked.empty()) fields[f.name]["not_cross_checked"] = f.not_cross_checked;
  }
  j["fields"] = fields;
  return j;
}

// The file whose LuaJIT the proc info describes: the binary itself when LuaJIT is linked in,
// else the libluajit it needs (resolved like the loader would).
std::optional<std::string> luajit_module(const luajit::RuntimeInfo& rt, const std::string& path) {
  if (rt.source == luajit::LuaJITSource::LinkedIn) return path;
  if (rt.source == luajit::LuaJITSource::NeededLib && rt.libluajit && rt.libluajit->path) {
    return *rt.libluajit->path;
  }
  return std::nullopt;
}

void add_proc_info(Json& j, const luajit::RuntimeInfo& rt, const std::string& path) {
  std::optional<std::string> module = luajit_module(rt, path);
  if (!module) {
    j["luajit_proc_info"] = nullptr;
    j["vm_cframe"] = nullptr;
    return;
  }
  auto file = elf::ElfFile::open(*module);
  if (!file.ok()) {
    j["luajit_proc_info"] = {{"error", file.message()}};
    j["vm_cframe"] = nullptr;
    return;
  }
  // A needed libluajit is classified by its own name (libluajit), so its jit_base policy is
  // the non-Tarantool one; a Tarantool binary always links LuaJIT in.
  const luajit::Runtime runtime =
      *module == path ? rt.runtime : luajit::detect_runtime(**file, {}).runtime;
  auto info = luajit::extract_proc_info(**file, runtime);
  if (!info.ok()) {
    j["luajit_proc_info"] = {{"module", *module}, {"error", info.message()}};
    j["vm_cframe"] = nullptr;
    return;
  }
  j["luajit_proc_info"] = proc_info_json(*info);
  j["vm_cframe"] = info->vm_cframe ? Json(luajit::to_json(*info->vm_cframe)) : Json(nullptr);
}

// A Tarantool executable's fiber layout (luajit/fiber_layout.h), or why it has none; null for
// other runtimes.
Json fiber_layout_json(const elf::ElfFile& file, luajit::Runtime runtime) {
  if (runtime != luajit::Runtime::Tarantool) return nullptr;
  auto layout = luajit::read_fiber_label_layout(file);
  if (!layout.ok()) return {{"error", layout.message()}};
  Json j = Json::object();
  j["source"] = layout->source == luajit::FiberLayoutSource::Dwarf ? "DWARF" : "machine code";
  if (!layout->has_lists) j["lists_error"] = layout->lists_error;
  for (const auto& [name, value] : luajit::fiber_layout_rows(*layout)) {
    j[name] = name == "main_cord" || name == "cord_ptr" ? Json(hex(value)) : Json(value);
  }
  return j;
}

void print_fiber_layout(const Json& layout) {
  if (layout.is_null()) return;
  if (layout.contains("error")) {
    fmt::print("fibers:     {}\n", layout["error"].get<std::string>());
    return;
  }
  if (layout["source"] == "DWARF") {
    fmt::print("fibers:     every cord's fibers (tarantool src/lib/core/fiber.h, from DWARF)\n");
  } else if (!layout.contains("lists_error")) {
    fmt::print(
        "fibers:     every cord's fibers (tarantool src/lib/core/fiber.h, from the machine code of "
        "cord_is_main, fiber_self, fiber_set_name, fiber_new_ex, fiber_stat, fiber_wakeup, "
        "fiber_join, fiber_call, cord_set_name and tarantool_lua_run_script)\n");
  } else {
    fmt::print(
        "fibers:     the fiber of each sample (tarantool src/lib/core/fiber.h, from the machine "
        "code of cord_is_main, fiber_self, fiber_set_name and fiber_new_ex); no fiber lists: {}\n",
        layout["lists_error"].get<std::string>());
  }
  for (const auto& [name, value] : layout.items()) {
    if (name == "source" || name == "lists_error") continue;
    fmt::print(
        "  {:<26} {:>12}\n", name,
        value.is_string() ? value.get<std::string>() : std::to_string(value.get<uint64_t>()));
  }
}

Json describe(const elf::ElfFile& file, const std::vector<std::string>& lib_dirs) {
  Json j;
  j["path"] = file.path();
  j["arch"] = elf::arch_name(file.arch());
  j["elf_type"] = elf_type_name(file.type());
  j["build_id"] = file.build_id() ? Json(*file.build_id()) : Json(nullptr);
  j["has_symtab"] = file.has_symbol_table(elf::SymbolTable::Symtab);
  j["has_dynsym"] = file.has_symbol_table(elf::SymbolTable::Dynsym);
  j["has_eh_frame"] = file.section(".eh_frame") != nullptr;
  j["has_eh_frame_hdr"] = file.section(".eh_frame_hdr") != nullptr;
  j["has_debug_frame"] = file.section(".debug_frame") != nullptr;
  j["has_debug_info"] = file.section(".debug_info") != nullptr;

  luajit::RuntimeInfo rt = luajit::detect_runtime(file, lib_dirs);
  Json runtime;
  runtime["kind"] = luajit::runtime_name(rt.runtime);
  runtime["luajit"] = luajit::luajit_source_name(rt.source);
  if (rt.libluajit) {
    runtime["needed_libluajit"] = {
        {"name", rt.libluajit->name},
        {"path", rt.libluajit->path ? Json(*rt.libluajit->path) : Json(nullptr)}};
  } else {
    runtime["needed_libluajit"] = nullptr;
  }
  runtime["reason"] = rt.reason;
  j["runtime"] = runtime;

  Json symbols = Json::object();
  for (const char* name : luajit::reported_symbols()) {
    const elf::Symbol* sym = file.find_symbol(name);
    if (sym == nullptr) {
      symbols[name] = nullptr;
      continue;
    }
    symbols[name] = {{"address", hex(sym->value)},
                     {"size", sym->size},
                     {"table", elf::symbol_table_name(sym->table)},
                     {"bind", bind_name(sym->bind)},
                     {"type", type_name(sym->type)}};
  }
  j["symbols"] = symbols;
  j["fiber_layout"] = fiber_layout_json(file, rt.runtime);
  add_proc_info(j, rt, file.path());
  return j;
}

void print_text(const Json& j) {
  auto yes = [](const Json& v) { return v.get<bool>() ? "yes" : "no"; };
  fmt::print("path:       {}\n", j["path"].get<std::string>());
  fmt::print("arch:       {}\n", j["arch"].get<std::string>());
  fmt::print("elf type:   {}\n", j["elf_type"].get<std::string>());
  fmt::print("build-id:   {}\n",
             j["build_id"].is_null() ? "(none)" : j["build_id"].get<std::string>());
  fmt::print(
      "sections:   .symtab {}, .dynsym {}, .eh_frame {}, .eh_frame_hdr {}, "
      ".debug_frame {}, .debug_info {}\n",
      yes(j["has_symtab"]), yes(j["has_dynsym"]), yes(j["has_eh_frame"]),
      yes(j["has_eh_frame_hdr"]), yes(j["has_debug_frame"]), yes(j["has_debug_info"]));
  const Json& rt = j["runtime"];
  fmt::print("runtime:    {} (LuaJIT: {})\n", rt["kind"].get<std::string>(),
             rt["luajit"].get<std::string>());
  fmt::print("            {}\n", rt["reason"].get<std::string>());
  if (!rt["needed_libluajit"].is_null()) {
    const Json& lib = rt["needed_libluajit"];
    fmt::print("libluajit:  {} -> {}\n", lib["name"].get<std::string>(),
               lib["path"].is_null() ? "(not found)" : lib["path"].get<std::string>());
  }
  fmt::print("symbols:\n");
  for (const auto& [name, sym] : j["symbols"].items()) {
    if (sym.is_null()) {
      fmt::print("  {:<26} -\n", name);
    } else {
      fmt::print("  {:<26} {:>12}  size {:<6} {:<8} {} {}\n", name,
                 sym["address"].get<std::string>(), sym["size"].get<uint64_t>(),
                 sym["table"].get<std::string>(), sym["bind"].get<std::string>(),
                 sym["type"].get<std::string>());
    }
  }
  print_fiber_layout(j["fiber_layout"]);
  const Json& pi = j["luajit_proc_info"];
  if (pi.is_null()) return;
  if (pi.contains("error")) {
    fmt::print("luajit:     extraction FAILED: {}\n", pi["error"].get<std::string>());
    return;
  }
  fmt::print("luajit:     {} ({}, {}, GC64 {})\n", pi["module"].get<std::string>(),
             pi["runtime"].get<std::string>(), pi["arch"].get<std::string>(),
             pi["gc64"].get<bool>() ? "yes" : "no");
  fmt::print("vm:         [{}, {})  {}\n", pi["vm"]["begin"].get<std::string>(),
             pi["vm"]["end"].get<std::string>(), pi["vm"]["source"].get<std::string>());
  fmt::print(
      "dispatch:   {} holds {}; vmstate numbering {}\n", pi["dispatch_register"].get<std::string>(),
      pi["dispatch_register_holds"].get<std::string>(), pi["vmstate_numbering"].get<std::string>());
  if (!j["vm_cframe"].is_null() && j["vm_cframe"].contains("cfa")) {
    fmt::print("vm cframe:  CFA {}\n", j["vm_cframe"]["cfa"].get<std::string>());
  }
  fmt::print("offsets:\n");
  for (const auto& [name, f] : pi["fields"].items()) {
    std::string where;
    if (!f["evidence"].empty()) {
      const Json& e = f["evidence"].front();
      where = fmt::format("  [{} {} {}: {}]", e["function"].get<std::string>(),
                          e["address"].get<std::string>(), e["bytes"].get<std::string>(),
                          e["text"].get<std::string>());
    }
    fmt::print("  {:<24} {:>6}  {}{}\n", name, f["value"].get<int64_t>(),
               f["source"].get<std::string>(), where);
    if (f.contains("not_cross_checked")) {
      fmt::print("  {:<24} {:>6}  not cross-checked: {}\n", "", "",
                 f["not_cross_checked"].get<std::string>());
    }
  }
}

int verify_dwarf(const std::string& binary, bool json) {
  auto file = elf::ElfFile::open(binary);
  if (!file.ok()) {
    std::cerr << "ljprof inspect: " << file.message() << "\n";
    return 2;
  }
  auto info = luajit::extract_proc_info(**file);
  if (!info.ok()) {
    std::cerr << "ljprof inspect: " << info.message() << "\n";
    return 2;
  }
  auto dwarf = luajit::read_dwarf_layout(binary);
  if (!dwarf.ok()) {
    std::cerr << "ljprof inspect: " << dwarf.message() << "\n";
    return 2;
  }
  bool all = true;
  Json rows = Json::array();
  std::vector<luajit::DwarfCheck> checks = luajit::verify_against_dwarf(*info, *dwarf);
  for (luajit::DwarfCheck& c : luajit::verify_fiber_layout_against_dwarf(**file)) {
    checks.push_back(std::move(c));
  }
  for (const luajit::DwarfCheck& c : checks) {
    const char* verdict = !c.dwarf ? "N/A" : c.pass ? "PASS" : "FAIL";
    if (c.dwarf && !c.pass) all = false;
    if (json) {
      rows.push_back({{"field", c.field},
                      {"extracted", c.extracted},
                      {"dwarf", c.dwarf ? Json(*c.dwarf) : Json(nullptr)},
                      {"dwarf_rule", c.dwarf_rule},
                      {"width_problem", c.width_problem},
                      {"result", verdict}});
    } else {
      fmt::print("{:<4}  {:<24} extracted {:>6}  dwarf {:>6}  ({}){}\n", verdict, c.field,
                 c.extracted, c.dwarf ? fmt::format("{}", *c.dwarf) : "-", c.dwarf_rule,
                 c.width_problem.empty() ? "" : "; " + c.width_problem);
    }
  }
  if (json) {
    std::cout << report::json_text(Json{{"binary", binary}, {"checks", rows}, {"pass", all}})
              << "\n";
  } else {
    fmt::print("{}\n", all ? "verify-dwarf: all PASS" : "verify-dwarf: FAIL");
  }
  return all ? 0 : 1;
}

int verify_live(int pid, bool json) {
  auto live = luajit::verify_live(pid);
  if (!live.ok()) {
    std::cerr << "ljprof inspect: " << live.message() << "\n";
    return 2;
  }
  const bool all = live->all_pass();
  if (json) {
    Json checks = Json::array();
    for (const luajit::VmCheck& c : live->checks) {
      checks.push_back(
          {{"check", c.name}, {"result", c.pass ? "PASS" : "FAIL"}, {"detail", c.detail}});
    }
    std::cout << report::json_text(Json{{"pid", pid},
                                        {"module", live->module},
                                        {"bias", hex(live->bias)},
                                        {"attempts", live->attempts},
                                        {"pc", hex(live->snapshot.pc)},
                                        {"g", hex(live->snapshot.g)},
                                        {"checks", checks},
                                        {"pass", all}})
              << "\n";
  } else {
    // The module's path is the process's, a check's detail may quote its chunk name.
    fmt::print("pid {} module {} bias {:#x}: stop {} at pc {:#x}, G {:#x}\n", pid,
               printable_text(live->module), live->bias, live->attempts, live->snapshot.pc,
               live->snapshot.g);
    for (const luajit::VmCheck& c : live->checks) {
      fmt::print("{:<4}  {}  ({})\n", c.pass ? "PASS" : "FAIL", c.name, printable_text(c.detail));
    }
    fmt::print("{}\n", all ? "verify-live: all PASS" : "verify-live: FAIL");
  }
  return all ? 0 : 1;
}

// `ljprof inspect`'s options as given.
struct InspectFlags {
  std::string binary;
  bool json = false;
  std::vector<std::string> lib_dirs;
  bool verify_dwarf = false;
  int verify_live_pid = 0;
};

int run_inspect_command(const InspectFlags& f) {
  if (f.verify_live_pid > 0) {
    return verify_live(f.verify_live_pid, f.json);
  }
  if (f.binary.empty()) {
    std::cerr << "ljprof inspect: BINARY is required (or --verify-live PID)\n";
    return 2;
  }
  if (f.verify_dwarf) {
    return verify_dwarf(f.binary, f.json);
  }
  auto file = elf::ElfFile::open(f.binary);
  if (!file.ok()) {
    std::cerr << "ljprof inspect: " << file.message() << "\n";
    return 2;
  }
  // Both views read one printable model: its names and paths are the binary's bytes.
  Json described = describe(**file, f.lib_dirs);
  report::make_json_printable(described);
  if (f.json) {
    std::cout << report::json_text(std::move(described)) << "\n";
  } else {
    print_text(described);
  }
  return 0;
}

}  // namespace

void add_inspect_command(CommandLine& cli) {
  auto f = std::make_shared<InspectFlags>();
  Command cmd = cli.add(
      "inspect",
      "Show what ljprof understands about a binary: architecture, build-id, unwind and debug "
      "sections, the LuaJIT runtime it is (tarantool, luajit, libluajit, nginx/openresty) and "
      "where the LuaJIT symbols ljprof relies on are.");
  cmd.option("BINARY", f->binary,
             "ELF executable or shared object (required unless --verify-live)");
  cmd.flag("--json", f->json, "Print one JSON object with stable keys instead of text");
  cmd.option("--lib-path", f->lib_dirs,
             "Extra directory to resolve DT_NEEDED libluajit in, searched first (like "
             "LD_LIBRARY_PATH); repeatable");
  cmd.flag("--verify-dwarf", f->verify_dwarf,
           "Compare every extracted LuaJIT offset with the binary's DWARF (libdw) and "
           "print PASS/FAIL per field; exit 1 on any FAIL");
  cmd.option("--verify-live", f->verify_live_pid,
             "Check the extracted offsets against running process PID: briefly stops it "
             "(ptrace) until a stop lands in the LuaJIT VM, then reads G, cur_L, the Lua "
             "stack, jit_base, vmstate and a chunk name; exit 1 on any FAIL");
  cmd.run([f] { return run_inspect_command(*f); });
}

}  // namespace ljprof::cli
