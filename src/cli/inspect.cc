// `ljprof inspect BINARY [--json]`: what ljprof understands about one binary.
#include <elf.h>
#include <fmt/format.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "elf/elf_file.h"
#include "luajit/runtime.h"

namespace ljprof::cli {

namespace {

using Json = nlohmann::ordered_json;

std::string hex(uint64_t v) {
  return fmt::format("{:#x}", v);
}

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
}

}  // namespace

void add_inspect_command(CLI::App& app, int* exit_code) {
  struct Options {
    std::string binary;
    bool json = false;
    std::vector<std::string> lib_dirs;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "inspect",
      "Show what ljprof understands about a binary: architecture, build-id, unwind and debug "
      "sections, the LuaJIT runtime it is (tarantool, luajit, libluajit, nginx/openresty) and "
      "where the LuaJIT symbols ljprof relies on are.");
  cmd->add_option("BINARY", opts->binary, "ELF executable or shared object")->required();
  cmd->add_flag("--json", opts->json, "Print one JSON object with stable keys instead of text");
  cmd->add_option("--lib-path", opts->lib_dirs,
                  "Extra directory to resolve DT_NEEDED libluajit in, searched first (like "
                  "LD_LIBRARY_PATH); repeatable");
  cmd->callback([opts, exit_code]() {
    auto file = elf::ElfFile::open(opts->binary);
    if (!file.ok()) {
      std::cerr << "ljprof inspect: " << file.message() << "\n";
      *exit_code = 2;
      return;
    }
    Json report = describe(**file, opts->lib_dirs);
    if (opts->json) {
      std::cout << report.dump(2) << "\n";
    } else {
      print_text(report);
    }
    *exit_code = 0;
  });
}

}  // namespace ljprof::cli
