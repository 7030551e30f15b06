// `ljprof core CORE [--exe PATH] [--sysroot DIR]... [--json] [--all-fibers]`: mixed native + Lua
// backtraces of every thread of a core file (and, with --all-fibers, the Lua frames of every
// other coroutine).
#include <fmt/format.h>

#include "common/hex.h"

#include <csignal>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cfi/table_cache.h"
#include "cli/commands.h"
#include "core/core_file.h"
#include "core/core_walk.h"
#include "report/backtrace.h"

namespace ljprof::cli {

namespace {

using Json = nlohmann::ordered_json;

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? fmt::format("SIG{}", abbrev) : std::to_string(sig);
}

}  // namespace

void add_core_command(CommandLine& cli) {
  struct Options {
    std::string core;
    std::string exe;
    std::vector<std::string> sysroots;
    bool json = false;
    bool all_fibers = false;
    std::string table_cache;
  };
  auto opts = std::make_shared<Options>();
  Command cmd = cli.add(
      "core",
      "Print the mixed native + Lua backtrace of every thread of a core file (kernel, gcore or "
      "qemu-user core of tarantool, luajit or nginx-lua; x86-64 and arm64).");
  cmd.option("CORE", opts->core, "The core file").required();
  cmd.option("--exe", opts->exe, "The executable, when it is not at its recorded path");
  cmd.option("--sysroot", opts->sysroots,
             "A root to look for the core's mapped files in (repeatable): each file is "
             "looked for under every root in order, then at its recorded path, and used only "
             "if its build-id equals the core's (e.g. /usr/aarch64-linux-gnu for a "
             "qemu-aarch64 core); files not found are named in the output");
  cmd.flag("--json", opts->json, "Print one JSON object (the golden format) instead of text");
  cmd.flag("--all-fibers,--all-coroutines", opts->all_fibers,
           "Also print the Lua frames of every other coroutine (Tarantool: every fiber's Lua "
           "state) found on the LuaJIT GC list: suspended ones and those inside a C call");
  add_table_cache_option(cmd, opts->table_cache);
  cmd.run([opts]() {
    core::CoreOptions options;
    options.exe = opts->exe;
    options.sysroots = opts->sysroots;
    auto core = core::CoreFile::open(opts->core, options);
    if (!core.ok()) {
      std::cerr << "ljprof core: " << core.message() << "\n";
      return 2;
    }
    cfi::TableCache tables(opts->table_cache);
    auto walker = core::CoreWalker::create(*core, &tables);
    if (!walker.ok()) {
      std::cerr << "ljprof core: " << walker.message() << "\n";
      return 2;
    }
    Json out;
    out["core"] = opts->core;
    out["arch"] = elf::arch_name(core->arch());
    out["luajit"] = (*walker)->luajit() ? Json((*walker)->luajit_file()) : Json(nullptr);
    if (!(*walker)->luajit_error().empty()) out["luajit_error"] = (*walker)->luajit_error();
    Json threads = Json::array();
    std::string text;
    // The frames of one stack, as JSON fields and as text lines under `title`.
    auto add_stack = [&text](Json& j, const core::ThreadStack& stack, const std::string& title) {
      Json frames = Json::array();
      text += title + ":\n";
      for (size_t i = 0; i < stack.frames.size(); ++i) {
        frames.push_back(report::backtrace_frame_json(stack.frames[i]));
        text += fmt::format("  #{:<3} {}\n", i, report::backtrace_frame_text(stack.frames[i]));
      }
      j["frames"] = frames;
      j["end"] = stack.end;
      j["reached_root"] = stack.reached_root;
      text += "\n";
    };
    uint64_t g = (*walker)->global_state();
    for (const core::Thread& thread : core->threads()) {
      core::ThreadStack stack = (*walker)->walk(thread);
      if (g == 0) g = stack.g;
      Json t;
      t["tid"] = stack.tid;
      t["signal"] = stack.signal;
      add_stack(t, stack,
                fmt::format("Thread {}{}", stack.tid,
                            stack.signal ? " (" + signal_name(stack.signal) + ")" : ""));
      threads.push_back(t);
    }
    out["threads"] = threads;
    if (opts->all_fibers) {
      auto list = (*walker)->walk_coroutines(g);
      if (!list.ok()) {
        out["coroutines_error"] = list.message();
        text += fmt::format("Coroutines: not walked: {}\n\n", list.message());
      } else {
        Json coroutines = Json::array();
        for (const core::CoroutineStack& co : list->coroutines) {
          Json c;
          c["lua_state"] = hex(co.lua_state);
          c["status"] = co.status;
          add_stack(c, co.stack,
                    fmt::format("Coroutine {:#x} ({}, Lua frames only)", co.lua_state, co.status));
          coroutines.push_back(c);
        }
        out["coroutines"] = coroutines;
        out["coroutines_not_started"] = list->not_started;
        out["coroutines_dead"] = list->dead;
        text += fmt::format(
            "{} coroutines walked; {} not started and {} dead have no frames ({} GC "
            "objects visited)\n",
            list->coroutines.size(), list->not_started, list->dead, list->objects);
      }
    }
    for (const std::string& d : core->diagnostics()) out["diagnostics"].push_back(d);
    // Mapped files that could not be used: the frames in them have no CFI or symbols, so the
    // user is told which file to provide (and where it was looked for).
    std::string refused_text;
    for (const core::MappedFile& f : core->files()) {
      if (f.usable() || f.check == core::FileCheck::NotOpened) continue;
      out["unusable_files"].push_back({{"path", f.path},
                                       {"check", core::file_check_name(f.check)},
                                       {"tried", f.tried},
                                       {"error", f.error}});
      refused_text += fmt::format("warning: mapped file {} not used: {}\n", f.path, f.error);
    }
    if (opts->json) {
      std::cout << out.dump(2) << "\n";
    } else {
      if (!(*walker)->luajit_error().empty()) {
        text = fmt::format("warning: no LuaJIT layout: {}\n\n", (*walker)->luajit_error()) + text;
      }
      if (!refused_text.empty()) text = refused_text + "\n" + text;
      std::cout << text;
    }
    return 0;
  });
}

}  // namespace ljprof::cli
