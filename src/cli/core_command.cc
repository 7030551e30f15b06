// `ljprof core CORE [--exe PATH] [--sysroot DIR]... [--json] [--all-fibers]`: mixed native + Lua
// backtraces of every thread of a core file (and, with --all-fibers, the Lua frames of every
// other coroutine).
#include <fmt/format.h>

#include <csignal>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/core_file.h"
#include "core/core_walk.h"

namespace ljprof::cli {

namespace {

using Json = nlohmann::ordered_json;

std::string hex(uint64_t v) {
  return fmt::format("{:#x}", v);
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? fmt::format("SIG{}", abbrev) : std::to_string(sig);
}

std::string basename_of(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The call-site name of a Lua or C function frame, as JSON fields.
void add_call_name(Json& j, const core::StackFrame& f) {
  j["name"] = f.call_name ? Json(f.call_name->name) : Json(nullptr);
  j["namewhat"] = f.call_name ? Json(f.call_name->what) : Json(nullptr);
  if (!f.name_error.empty()) j["name_error"] = f.name_error;
}

Json frame_json(const core::StackFrame& f) {
  Json j;
  j["kind"] = core::frame_kind_name(f.kind);
  switch (f.kind) {
    case core::FrameKind::Lua:
      j["function"] = hex(f.gcfunc);
      j["bcpc"] = f.bcpc ? Json(hex(f.bcpc)) : Json(nullptr);
      if (f.lua) {
        j["chunk"] = f.lua->chunk;
        j["source"] = f.lua->short_src;
        j["line"] = f.lua->line >= 0 ? Json(f.lua->line) : Json(nullptr);
        j["firstline"] = f.lua->firstline;
        j["main_chunk"] = f.lua->main_chunk;
        add_call_name(j, f);
      } else {
        j["error"] = f.reason;
      }
      j["lua_state"] = f.lua_state;
      break;
    case core::FrameKind::Unknown:
      j["pc"] = hex(f.pc);
      j["reason"] = f.reason;
      break;
    case core::FrameKind::Trace:
      j["pc"] = hex(f.pc);
      j["gctrace"] = hex(f.gctrace);
      if (f.trace) {
        j["trace"] = f.trace->traceno;
        j["start_chunk"] = f.trace->start.chunk;
        j["start_source"] = f.trace->start.short_src;
        j["start_line"] = f.trace->start.line >= 0 ? Json(f.trace->start.line) : Json(nullptr);
      } else {
        j["error"] = f.reason;
      }
      j["lua_state"] = f.lua_state;
      break;
    default:
      if (f.kind == core::FrameKind::CFunc) {
        j["function"] = hex(f.gcfunc);
        j["lua_state"] = f.lua_state;
        add_call_name(j, f);
      }
      j["pc"] = hex(f.pc);
      j["module"] = f.module.empty() ? Json(nullptr) : Json(f.module);
      j["module_offset"] = f.module.empty() ? Json(nullptr) : Json(hex(f.module_offset));
      j["symbol"] = f.symbol.empty() ? Json(nullptr) : Json(f.symbol);
      j["symbol_offset"] = f.symbol_offset;
      j["file"] = f.source ? Json(f.source->file) : Json(nullptr);
      j["line"] = f.source ? Json(f.source->line) : Json(nullptr);
      break;
  }
  return j;
}

std::string native_text(const core::StackFrame& f) {
  std::string where =
      f.symbol.empty() ? std::string("??") : fmt::format("{}+{:#x}", f.symbol, f.symbol_offset);
  std::string module = f.module.empty()
                           ? std::string("?")
                           : fmt::format("{}+{:#x}", basename_of(f.module), f.module_offset);
  std::string at = f.source ? fmt::format(" at {}:{}", f.source->file, f.source->line) : "";
  return fmt::format("{:#018x} in {} ({}){}", f.pc, where, module, at);
}

std::string frame_text(const core::StackFrame& f) {
  switch (f.kind) {
    case core::FrameKind::Lua: {
      if (!f.lua) return fmt::format("lua     [unknown: {}]", f.reason);
      std::string line = f.lua->line >= 0 ? std::to_string(f.lua->line) : "?";
      // As luaL_traceback words it: a call-site name first, then the main chunk.
      std::string what = f.call_name ? fmt::format("function '{}'", f.call_name->name)
                         : f.lua->main_chunk
                             ? std::string("main chunk")
                             : fmt::format("function <{}:{}>", f.lua->short_src, f.lua->firstline);
      return fmt::format("lua     {}:{} in {}", f.lua->short_src, line, what);
    }
    case core::FrameKind::CFunc:
      if (f.call_name) {
        return fmt::format("cfunc   {} as '{}'", native_text(f), f.call_name->name);
      }
      return "cfunc   " + native_text(f);
    case core::FrameKind::Root:
      return "root    " + native_text(f);
    case core::FrameKind::Ffi:
      return "ffi     " + native_text(f);
    case core::FrameKind::Unknown:
      return fmt::format("[unknown: {}]", f.reason);
    case core::FrameKind::Trace:
      if (!f.trace) return fmt::format("trace   {:#018x} [unknown: {}]", f.pc, f.reason);
      return fmt::format("trace   {:#018x} in trace {} (starts at {}:{})", f.pc, f.trace->traceno,
                         f.trace->start.short_src, f.trace->start.line);
    case core::FrameKind::Native:
      break;
  }
  return "native  " + native_text(f);
}

}  // namespace

void add_core_command(CLI::App& app, int* exit_code) {
  struct Options {
    std::string core;
    std::string exe;
    std::vector<std::string> sysroots;
    bool json = false;
    bool all_fibers = false;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "core",
      "Print the mixed native + Lua backtrace of every thread of a core file (kernel, gcore or "
      "qemu-user core of tarantool, luajit or nginx-lua; x86-64 and arm64).");
  cmd->add_option("CORE", opts->core, "The core file")->required();
  cmd->add_option("--exe", opts->exe, "The executable, when it is not at its recorded path");
  cmd->add_option("--sysroot", opts->sysroots,
                  "A root to look for the core's mapped files in (repeatable): each file is "
                  "looked for under every root in order, then at its recorded path, and used only "
                  "if its build-id equals the core's (e.g. /usr/aarch64-linux-gnu for a "
                  "qemu-aarch64 core); files not found are named in the output");
  cmd->add_flag("--json", opts->json, "Print one JSON object (the golden format) instead of text");
  cmd->add_flag("--all-fibers,--all-coroutines", opts->all_fibers,
                "Also print the Lua frames of every other coroutine (Tarantool: every fiber's Lua "
                "state) found on the LuaJIT GC list: suspended ones and those inside a C call");
  cmd->callback([opts, exit_code]() {
    core::CoreOptions options;
    options.exe = opts->exe;
    options.sysroots = opts->sysroots;
    auto core = core::CoreFile::open(opts->core, options);
    if (!core.ok()) {
      std::cerr << "ljprof core: " << core.message() << "\n";
      *exit_code = 2;
      return;
    }
    auto walker = core::CoreWalker::create(*core);
    if (!walker.ok()) {
      std::cerr << "ljprof core: " << walker.message() << "\n";
      *exit_code = 2;
      return;
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
        frames.push_back(frame_json(stack.frames[i]));
        text += fmt::format("  #{:<3} {}\n", i, frame_text(stack.frames[i]));
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
    *exit_code = 0;
  });
}

}  // namespace ljprof::cli
