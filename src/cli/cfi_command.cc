// `ljprof cfi BINARY [--at ADDR] [--json]`: the walker's unwind rows of one binary (the whole
// table, or the row covering ADDR), with hints, FDE errors and the VM C-frame rule.
#include <fmt/format.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "cfi/cfi.h"
#include "cli/commands.h"
#include "elf/elf_file.h"
#include "luajit/proc_info.h"
#include "luajit/vm_cfi.h"
#include "report/json_text.h"

namespace ljprof::cli {

namespace {

using Json = nlohmann::ordered_json;

// `ljprof cfi`'s options as given.
struct CfiFlags {
  std::string binary;
  std::string at;
  bool json = false;
};

Json row_json(const lj_cfi_row& row, uint64_t end, uint64_t fde, elf::Arch arch) {
  Json j;
  j["pc_start"] = fmt::format("{:#x}", row.pc_start);
  j["pc_end"] = end ? Json(fmt::format("{:#x}", end)) : Json(nullptr);
  j["hint"] = cfi::hint_name(row.hint);
  j["rule"] = cfi::describe_row(row, arch);
  j["fde_offset"] = fde == UINT64_MAX ? Json(nullptr) : Json(fmt::format("{:#x}", fde));
  return j;
}

// The VM interval's entries of the model: its bounds, the sub-ranges that replace the blanket
// rule inside it, and the C frame rule derived for it.
void add_vm_json(Json& j, const cfi::UnwindTable& table, const luajit::VmInterval& vm,
                 elf::Arch arch) {
  j["vm"] = {{"begin", fmt::format("{:#x}", vm.begin)}, {"end", fmt::format("{:#x}", vm.end)}};
  Json subs = Json::array();
  for (const cfi::Overlay& s : table.overlays()) {
    // The VM's sub-ranges: what replaced the blanket rule inside the interval.
    if (s.kind != cfi::Overlay::Kind::Replace || s.begin < vm.begin || s.begin >= vm.end) {
      continue;
    }
    subs.push_back({{"begin", fmt::format("{:#x}", s.begin)},
                    {"end", fmt::format("{:#x}", s.end)},
                    {"what", s.what},
                    {"how", s.how},
                    {"hint", cfi::hint_name(s.row.hint)},
                    {"rule", cfi::describe_row(s.row, arch)}});
  }
  j["vm_subranges"] = subs;
  auto cframe = luajit::derive_vm_cframe(table, vm.begin, vm.end);
  j["vm_cframe"] = cframe.ok() ? luajit::to_json(*cframe) : Json({{"error", cframe.message()}});
}

// The rows of the table, or only the one covering `at` (a placeholder row when none does).
Json rows_json(const cfi::UnwindTable& table, elf::Arch arch, std::optional<uint64_t> at) {
  auto rows = table.rows();
  auto origins = table.row_fde_offsets();
  Json out_rows = Json::array();
  for (size_t i = 0; i < rows.size(); ++i) {
    uint64_t end = i + 1 < rows.size() ? rows[i + 1].pc_start : 0;
    if (at && !(rows[i].pc_start <= *at && (end == 0 || *at < end))) continue;
    out_rows.push_back(row_json(rows[i], end, origins[i], arch));
  }
  if (at && out_rows.empty()) {
    Json none = Json::object();
    none["pc_start"] = nullptr;
    none["hint"] = "invalid";
    none["rule"] = "no rule (before the first FDE)";
    out_rows.push_back(none);
  }
  return out_rows;
}

// The one model both views print: the table's summary, its FDE errors, the VM interval and the
// rows (all, or the one covering `at`).
Json cfi_json(const std::string& path, const cfi::UnwindTable& table,
              const luajit::UnwindOverlays& overlays, elf::Arch arch, std::optional<uint64_t> at) {
  Json j;
  j["path"] = path;
  j["arch"] = elf::arch_name(arch);
  j["section"] = cfi::cfi_section_name(table.section());
  j["fde_count"] = table.fde_count();
  j["row_count"] = table.rows().size();
  Json errors = Json::array();
  for (const cfi::FdeError& e : table.fde_errors()) errors.push_back(e.message);
  j["fde_errors"] = errors;
  if (const auto& vm = overlays.vm) add_vm_json(j, table, *vm, arch);
  j["rows"] = rows_json(table, arch, at);
  return j;
}

// Whether the JSON range [begin, end) (hex strings this command wrote) holds `at`; every range
// does when no address was asked for.
bool range_holds(const Json& range, std::optional<uint64_t> at) {
  if (!at) return true;
  return std::stoull(range["begin"].get<std::string>(), nullptr, 16) <= *at &&
         *at < std::stoull(range["end"].get<std::string>(), nullptr, 16);
}

// With --at, only the sub-range holding the address (if any) and its row: the rest of the VM's
// sub-ranges say nothing about that address.
void print_cfi_text(const Json& j, const cfi::UnwindTable& table, elf::Arch arch,
                    std::optional<uint64_t> at) {
  std::cout << fmt::format("{} ({}): {} {} FDEs, {} rows, {} FDE errors\n",
                           j["path"].get<std::string>(), elf::arch_name(arch),
                           cfi::cfi_section_name(table.section()), table.fde_count(),
                           table.rows().size(), table.fde_errors().size());
  for (const auto& e : j["fde_errors"]) std::cout << "  error: " << e.get<std::string>() << "\n";
  if (j.contains("vm")) {
    std::cout << fmt::format("vm {}..{}\n", j["vm"]["begin"].get<std::string>(),
                             j["vm"]["end"].get<std::string>());
    for (const auto& s : j["vm_subranges"]) {
      if (!range_holds(s, at)) continue;
      std::cout << fmt::format("  sub-range {}..{} {} ({}): {} {}\n", s["begin"].get<std::string>(),
                               s["end"].get<std::string>(), s["what"].get<std::string>(),
                               s["how"].get<std::string>(), s["hint"].get<std::string>(),
                               s["rule"].get<std::string>());
    }
    if (j.contains("vm_cframe") && j["vm_cframe"].is_object()) {
      const Json& c = j["vm_cframe"];
      std::cout << fmt::format("vm C frame: cfa={} ra={} fp={} (FDE at {}, {} bytes)\n",
                               c["cfa"].get<std::string>(), c["ra"].get<std::string>(),
                               c["fp"].get<std::string>(), c["fde_offset"].get<std::string>(),
                               c["covered_bytes"].get<int64_t>());
    }
  }
  for (const auto& r : j["rows"]) {
    std::cout << fmt::format(
        "{:>18} {:>18} {:<7} {}\n",
        r["pc_start"].is_null() ? "-" : r["pc_start"].get<std::string>(),
        !r.contains("pc_end") || r["pc_end"].is_null() ? "-" : r["pc_end"].get<std::string>(),
        r["hint"].get<std::string>(), r["rule"].get<std::string>());
  }
}

int run_cfi_command(const CfiFlags& opt) {
  auto file = elf::ElfFile::open(opt.binary);
  if (!file.ok()) {
    std::cerr << "ljprof cfi: " << file.message() << "\n";
    return 2;
  }
  std::optional<uint64_t> at;
  if (!opt.at.empty()) {
    try {
      size_t used = 0;
      at = std::stoull(opt.at, &used, 0);
      if (used != opt.at.size()) throw std::invalid_argument("trailing characters");
    } catch (const std::exception&) {
      std::cerr << "ljprof cfi: --at: not an address: " << opt.at << "\n";
      return 2;
    }
  }
  // The overlays core and record use (luajit/): the rows shown are the rows the walker gets.
  const luajit::UnwindOverlays overlays = luajit::unwind_overlays(**file);
  auto table = cfi::build_unwind_table(**file, overlays.overlays);
  if (!table.ok()) {
    std::cerr << "ljprof cfi: " << table.message() << "\n";
    return 2;
  }
  const elf::Arch arch = (*file)->arch();
  Json j = cfi_json(opt.binary, *table, overlays, arch, at);
  // Both views read one printable model: the path and the FDE errors may quote odd bytes.
  report::make_json_printable(j);
  if (opt.json) {
    std::cout << report::json_text(std::move(j)) << "\n";
    return 0;
  }
  print_cfi_text(j, *table, arch, at);
  return 0;
}

}  // namespace

void add_cfi_command(CommandLine& cli) {
  auto opt = std::make_shared<CfiFlags>();
  Command cmd = cli.add("cfi", "Show the unwind rows (CFI) the walker uses for a binary");
  cmd.option("BINARY", opt->binary, "ELF executable or shared library").required();
  cmd.option("--at", opt->at, "Only the row covering this link-time address (0x...)");
  cmd.flag("--json", opt->json, "Machine-readable output");
  cmd.run([opt]() { return run_cfi_command(*opt); });
}

}  // namespace ljprof::cli
