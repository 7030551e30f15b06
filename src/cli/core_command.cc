// `ljprof core CORE [--exe PATH] [--sysroot DIR]... [--json] [--all-fibers]`: mixed native + Lua
// backtraces of every thread of a core file (and, with --all-fibers, the Lua frames of every
// other coroutine).
#include <iostream>

#include "cfi/table_cache.h"
#include "cli/commands.h"
#include "cli/recording.h"
#include "common/printable.h"
#include "core/core_file.h"
#include "core/core_walk.h"
#include "report/core_report.h"
#include "report/json_text.h"

namespace ljprof::cli {

namespace {

// `ljprof core`'s options as given.
struct CoreFlags {
  std::string core;
  std::string exe;
  std::vector<std::string> sysroots;
  bool json = false;
  bool all_fibers = false;
  std::string table_cache;
};

int run_core_command(const CoreFlags& f) {
  core::CoreOptions options;
  options.exe = f.exe;
  options.sysroots = f.sysroots;
  auto core = core::CoreFile::open(f.core, options);
  if (!core.ok()) {
    std::cerr << "ljprof core: " << printable_text(core.message()) << "\n";
    return 2;
  }
  cfi::TableCache tables(f.table_cache);
  auto walker = core::CoreWalker::create(*core, &tables);
  if (!walker.ok()) {
    std::cerr << "ljprof core: " << printable_text(walker.message()) << "\n";
    return 2;
  }
  report::CoreReport printed =
      report::core_report(*core, **walker, {.core_name = f.core, .all_fibers = f.all_fibers});
  if (f.json) {
    std::cout << report::json_text(std::move(printed.json)) << "\n";
  } else {
    std::cout << printed.text;
  }
  return 0;
}

}  // namespace

void add_core_command(CommandLine& cli) {
  auto f = std::make_shared<CoreFlags>();
  Command cmd = cli.add(
      "core",
      "Print the mixed native + Lua backtrace of every thread of a core file (kernel, gcore or "
      "qemu-user core of tarantool, luajit or nginx-lua; x86-64 and arm64).");
  cmd.option("CORE", f->core, "The core file").required();
  cmd.option("--exe", f->exe, "The executable, when it is not at its recorded path");
  cmd.option("--sysroot", f->sysroots,
             "A root to look for the core's mapped files in (repeatable): each file is "
             "looked for under every root in order, then at its recorded path, and used only "
             "if its build-id equals the core's (e.g. /usr/aarch64-linux-gnu for a "
             "qemu-aarch64 core); files not found are named in the output");
  cmd.flag("--json", f->json, "Print one JSON object (the golden format) instead of text");
  cmd.flag("--all-fibers,--all-coroutines", f->all_fibers,
           "Also print the Lua frames of every other coroutine found on the LuaJIT GC list: "
           "suspended ones and those inside a C call. Tarantool: every fiber of every cord (tx, "
           "iproto, WAL, ...) by id and name, with its full native and Lua stack on x86-64");
  add_table_cache_option(cmd, f->table_cache);
  cmd.run([f] { return run_core_command(*f); });
}

}  // namespace ljprof::cli
