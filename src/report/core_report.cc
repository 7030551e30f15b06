#include "report/core_report.h"

#include <fmt/format.h>

#include <csignal>
#include <cstring>
#include <map>
#include <optional>

#include "common/hex.h"
#include "common/printable.h"
#include "report/backtrace.h"
#include "report/json_text.h"

namespace ljprof::report {

namespace {

using Json = nlohmann::ordered_json;
using core::CoreFile;
using core::CoreWalker;
using core::CoroutineStack;
using core::MappedFile;
using core::Thread;
using core::ThreadStack;

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? fmt::format("SIG{}", abbrev) : std::to_string(sig);
}

// The frames of one stack, as JSON fields of `j` and as text lines under `title`.
void add_stack(Json& j, std::string& text, const ThreadStack& stack, const std::string& title) {
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
}

Json fiber_json(const core::FiberName& f) {
  return {{"id", f.id}, {"name", f.name}};
}

// `Fiber 103 "name"` (the name is printable already: core::FiberName).
std::string fiber_title(const core::FiberName& f) {
  return fmt::format("Fiber {} \"{}\"", f.id, f.name);
}

// The thread that runs Tarantool's main cord: the process's main thread (tarantool's main()
// creates main_cord, src/lib/core/fiber.c fiber_init), else the first that proved a G.
bool runs_main_cord(const CoreFile& core, const ThreadStack& stack, bool first_with_g) {
  const auto& process = core.process();
  if (process && process->pid > 0) return stack.tid == static_cast<uint32_t>(process->pid);
  return first_with_g;
}

// The fibers' names, or the one line saying why they are not named (--all-fibers).
const core::FiberList* add_fibers(Json& out, std::string& text,
                                  const Result<core::FiberList>& fibers) {
  if (fibers.ok()) return &*fibers;
  const std::string why = printable_text(fibers.message());
  out["fibers_error"] = why;
  text += fmt::format("Fibers: not named: {}\n\n", why);
  return nullptr;
}

// Every other lua_State on the GC list of `g` with its Lua frames (--all-fibers); those that are
// a fiber's lua_State are titled by the fiber.
void add_coroutines(Json& out, std::string& text, const CoreWalker& walker, uint64_t g,
                    const core::FiberList* fibers) {
  std::map<uint64_t, const core::FiberName*> by_state;
  if (fibers != nullptr) {
    for (const core::FiberName& f : fibers->fibers) {
      if (f.lua_state != 0) by_state[f.lua_state] = &f;
    }
  }
  auto list = walker.walk_coroutines(g);
  if (!list.ok()) {
    // The message may quote the LuaJIT file's path.
    const std::string why = printable_text(list.message());
    out["coroutines_error"] = why;
    text += fmt::format("Coroutines: not walked: {}\n\n", why);
    return;
  }
  Json coroutines = Json::array();
  for (const CoroutineStack& co : list->coroutines) {
    Json c;
    c["lua_state"] = hex(co.lua_state);
    c["status"] = co.status;
    auto fiber = by_state.find(co.lua_state);
    if (fiber != by_state.end()) {
      const core::FiberName& f = *fiber->second;
      c["fiber"] = fiber_json(f);
      // A switched-out fiber's full stack, from the registers coro_transfer saved; else its Lua
      // frames, with the one line saying why.
      auto full = f.fiber != fibers->running.fiber
                      ? walker.walk_fiber(f)
                      : Result<ThreadStack>(make_error("fiber {} is the running one", f.id));
      if (full.ok()) {
        add_stack(c, text, *full, fmt::format("{} (suspended)", fiber_title(f)));
      } else {
        const std::string why = printable_text(full.message());
        c["full_stack_error"] = why;
        text += fmt::format("{}: Lua frames only: {}\n", fiber_title(f), why);
        add_stack(c, text, co.stack,
                  fmt::format("{} ({}, Lua frames only)", fiber_title(f), co.status));
      }
    } else {
      add_stack(c, text, co.stack,
                fmt::format("Coroutine {:#x} ({}, Lua frames only)", co.lua_state, co.status));
    }
    coroutines.push_back(c);
  }
  out["coroutines"] = coroutines;
  out["coroutines_not_started"] = list->not_started;
  out["coroutines_dead"] = list->dead;
  text += fmt::format(
      "{} coroutines walked; {} not started and {} dead have no frames ({} GC objects "
      "visited)\n",
      list->coroutines.size(), list->not_started, list->dead, list->objects);
}

// The state of a fiber that is not its cord's running one.
const char* switched_out_state(const core::FiberList& list, const core::FiberName& f) {
  if (f.dead) return "dead";
  return list.ready.count(f.fiber) != 0 ? "ready" : "suspended";
}

// The switched-out fibers of `list` that the coroutine section does not show (those without a
// lua_State: Tarantool's C fibers, and every fiber of a cord other than the main one), each with
// its full stack from its saved context, or the one line saying why it has none.
void add_native_fibers(Json& out, std::string& text, const CoreWalker& walker,
                       const core::FiberList& list, uint32_t tid, bool main_cord) {
  for (const core::FiberName& f : list.fibers) {
    if (f.fiber == list.running.fiber || (main_cord && f.lua_state != 0)) continue;
    const char* state = switched_out_state(list, f);
    Json j;
    j["cord"] = list.cord;
    j["tid"] = tid;
    j["fiber"] = fiber_json(f);
    j["state"] = state;
    const std::string title = fmt::format("{} ({}, cord \"{}\")", fiber_title(f), state, list.cord);
    auto full =
        f.dead ? Result<ThreadStack>(make_error("fiber {} is dead", f.id)) : walker.walk_fiber(f);
    if (full.ok()) {
      add_stack(j, text, *full, title);
    } else {
      const std::string why = printable_text(full.message());
      j["full_stack_error"] = why;
      text += fmt::format("{}: not walked: {}\n\n", title, why);
    }
    out["native_fibers"].push_back(j);
  }
}

// The fiber list of the cord `thread` runs when it is not the main cord (a cord of its own:
// Tarantool's wal and iproto threads); nullopt for the main cord or a thread with none, and
// the reason, said once, when the cord cannot be known.
std::optional<core::FiberList> other_cord(Json& out, std::string& text, const CoreWalker& walker,
                                          const Thread& thread) {
  auto cord = walker.thread_cord(thread);
  if (cord.ok() && (*cord == 0 || *cord == walker.main_cord())) return std::nullopt;
  auto list = cord.ok() ? walker.walk_cord_fibers(*cord) : Result<core::FiberList>(cord.error());
  if (list.ok()) return std::move(*list);
  const std::string why = printable_text(list.message());
  if (!out.contains("cords_error")) {
    out["cords_error"] = why;
    text += fmt::format("Other cords' fibers: not listed: {}\n\n", why);
  }
  return std::nullopt;
}

// Mapped files that could not be used: the frames in them have no CFI or symbols, so the user
// is told which file to provide (and where it was looked for). Files left unopened
// (CoreOptions::open_mapped_files false: tests, the fuzzer) are listed too. Returns the text
// warnings.
std::string add_unusable_files(Json& out, const CoreFile& core) {
  std::string warnings;
  for (const MappedFile& f : core.files()) {
    if (f.usable()) continue;
    out["unusable_files"].push_back({{"path", f.path},
                                     {"check", file_check_name(f.check)},
                                     {"tried", f.tried},
                                     {"error", f.error}});
    warnings += fmt::format("warning: mapped file {} not used: {}\n", printable_text(f.path),
                            printable_text(f.error));
  }
  return warnings;
}

}  // namespace

CoreReport core_report(const CoreFile& core, const CoreWalker& walker,
                       const CoreReportOptions& options) {
  CoreReport r;
  Json& out = r.json;
  out["core"] = options.core_name;
  out["arch"] = elf::arch_name(core.arch());
  out["luajit"] = walker.luajit() ? Json(walker.luajit_file()) : Json(nullptr);
  const std::string luajit_error = printable_text(walker.luajit_error());
  if (!luajit_error.empty()) out["luajit_error"] = luajit_error;
  Json threads = Json::array();
  std::string stacks;
  // Only Tarantool has fibers: elsewhere there is nothing to name and nothing to explain.
  const bool fibers_wanted = options.all_fibers && walker.tarantool();
  const Result<core::FiberList> fibers =
      fibers_wanted ? walker.walk_fibers() : Result<core::FiberList>(core::FiberList{});
  const core::FiberList* named = fibers_wanted ? add_fibers(out, stacks, fibers) : nullptr;
  uint64_t g = walker.global_state();
  bool main_cord_named = false;
  uint32_t main_cord_tid = 0;  // the thread that runs the main cord, 0 when none was found
  std::string cord_fibers;     // the other cords' switched-out fibers, after the threads
  for (const Thread& thread : core.threads()) {
    ThreadStack stack = walker.walk(thread);
    if (g == 0) g = stack.g;
    Json t;
    t["tid"] = stack.tid;
    t["signal"] = stack.signal;
    std::string title = fmt::format("Thread {}{}", stack.tid,
                                    stack.signal ? " (" + signal_name(stack.signal) + ")" : "");
    std::optional<core::FiberList> cord;
    if (named != nullptr && !main_cord_named &&
        runs_main_cord(core, stack, stack.g != 0 && stack.g == g)) {
      main_cord_named = true;
      main_cord_tid = stack.tid;
      t["cord"] = named->cord;
      t["fiber"] = fiber_json(named->running);
      title += fmt::format(", {} (running)", fiber_title(named->running));
    } else if (named != nullptr) {
      cord = other_cord(out, stacks, walker, thread);
    }
    if (cord) {
      t["cord"] = cord->cord;
      if (cord->running.fiber != 0) {
        t["fiber"] = fiber_json(cord->running);
        title += fmt::format(", cord \"{}\", {} (running)", cord->cord, fiber_title(cord->running));
      }
      add_native_fibers(out, cord_fibers, walker, *cord, stack.tid, false);
    }
    add_stack(t, stacks, stack, title);
    threads.push_back(t);
  }
  out["threads"] = threads;
  stacks += cord_fibers;
  if (named != nullptr) add_native_fibers(out, stacks, walker, *named, main_cord_tid, true);
  if (options.all_fibers) add_coroutines(out, stacks, walker, g, named);
  for (const std::string& d : core.diagnostics()) out["diagnostics"].push_back(d);
  const std::string refused = add_unusable_files(out, core);
  // The core's own paths and messages in the document (the frames are printable already).
  report::make_json_printable(out);

  if (!refused.empty()) r.text = refused + "\n";
  if (!luajit_error.empty()) {
    r.text += fmt::format("warning: no LuaJIT layout: {}\n\n", luajit_error);
  }
  r.text += stacks;
  return r;
}

}  // namespace ljprof::report
