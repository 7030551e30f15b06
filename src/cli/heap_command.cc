// `ljprof heap (CORE [--exe BIN] [--sysroot DIR]... | -p PID) [--json] [--top N] [-o FILE.pb.gz]
// [--base OLD.pb.gz]`: what holds the Lua heap — every GC object by type, and the biggest
// retainers by their path from the GC roots.
#include <fmt/format.h>
#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <fstream>
#include <iostream>
#include <optional>
#include <string_view>
#include <thread>

#include "cfi/table_cache.h"
#include "cli/commands.h"
#include "common/printable.h"
#include "core/core_file.h"
#include "core/core_walk.h"
#include "heap/heap_census.h"
#include "heap/heap_graph.h"
#include "heap/heap_profile.h"
#include "luajit/proc_info.h"
#include "report/heap_report.h"
#include "report/json_text.h"
#include "report/pprof.h"

namespace ljprof::cli {

namespace {

// The pages of a live heap kept at once (64 MiB), and how many a read takes when the walk goes
// through memory page after page (the lists in allocation order, the strings and the graph in
// address order): a read per 4 KiB page was most of a live walk's system time.
constexpr size_t kHeapCachedPages = 16384;
constexpr uint32_t kHeapPagesAhead = 8;
// How long a live read waits before it reads a half-written object again: the mutator writes an
// object's header and size fields within microseconds of allocating it.
constexpr auto kRereadPause = std::chrono::microseconds(200);
constexpr int kMmapFromBytes = 256 * 1024;
// How often a live census whose gc.root walk was cut is taken again.
constexpr int kCensusRetries = 2;

// `ljprof heap`'s options as given.
struct HeapFlags {
  std::string core;
  std::string exe;
  std::vector<std::string> sysroots;
  uint32_t pid = 0;
  bool stop = false;
  bool json = false;
  uint32_t top = 20;
  std::string pprof;
  std::string base;
  std::string table_cache;
  std::string global_state;
};

int heap_fail(const std::string& what) {
  std::cerr << "ljprof heap: " << printable_text(what) << "\n";
  return 2;
}

// "0x40000378" or "40000378": a hexadecimal address, as the heap's own output prints them.
std::optional<uint64_t> parse_address(std::string_view text) {
  if (text.starts_with("0x") || text.starts_with("0X")) text.remove_prefix(2);
  uint64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, 16);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::string addresses(const std::vector<uint64_t>& gs) {
  std::string out;
  for (uint64_t g : gs) out += fmt::format("{}{:#x}", out.empty() ? "" : ", ", g);
  return out;
}

// The global_State of the VM to read: the runtime's static anchor, else the first thread whose
// walk proved one, else the one GG_State a scan of the anonymous memory finds (a live luajit or
// nginx worker, whose threads' registers are not known). `chosen` (--global-state) must be one
// the scan finds; several found and none chosen is an error that lists them.
Result<uint64_t> find_g(const core::CoreFile& core, const core::CoreWalker& walker,
                        uint64_t chosen) {
  if (chosen == 0) {
    if (uint64_t g = walker.global_state(); g != 0) return g;
    for (const core::Thread& thread : core.threads()) {
      if (uint64_t g = walker.walk(thread).g; g != 0) return g;
    }
  }
  LJ_ASSIGN_OR_RETURN(std::vector<uint64_t> found, walker.scan_global_states());
  if (chosen != 0) {
    if (std::find(found.begin(), found.end(), chosen) != found.end()) return chosen;
    return make_error(
        "{:#x} is not the global_State of a LuaJIT VM in {} (a GG_State's main lua_State and "
        "dispatch table were looked for in its anonymous writable memory; found: {})",
        chosen, core.path(), found.empty() ? "none" : addresses(found));
  }
  if (found.size() == 1) return found[0];
  if (found.empty()) {
    return make_error(
        "no global_State in {}: none from the runtime or any thread, and no GG_State (a main "
        "lua_State with the VM's dispatch table) in its anonymous writable memory",
        core.path());
  }
  return make_error("{} runs {} LuaJIT VMs (global_State at {}); choose one with --global-state",
                    core.path(), found.size(), addresses(found));
}

struct Snapshot {
  heap::Census census;
  heap::Retainers retainers;
  uint64_t total_after = 0;  // live: g->gc.total read again after the walk
};

// Tarantool: each fiber's lua_State named in paths by the fiber's id and name. Without a fiber
// list (no fiber layout, an unreadable list) paths keep "thread 0x…", and why is said once.
heap::ThreadNames fiber_names(const core::CoreWalker& walker) {
  heap::ThreadNames names;
  if (!walker.tarantool()) return names;
  auto fibers = walker.walk_fibers();
  if (!fibers.ok()) {
    std::cerr << "ljprof heap: fibers are not named in paths: " << printable_text(fibers.message())
              << "\n";
    return names;
  }
  for (const core::FiberName& f : fibers->fibers) {
    if (f.lua_state != 0) names[f.lua_state] = fmt::format("fiber {} \"{}\"", f.id, f.name);
  }
  return names;
}

// On a terminal, where a long walk is: one line on stderr, rewritten in place, gone at the end.
void show_progress(const heap::HeapCheckpoint& c) {
  static const bool terminal = ::isatty(STDERR_FILENO) != 0;
  if (!terminal) return;
  if (c.pass == heap::HeapPass::Graph && c.end) {
    std::cerr << "\r\x1b[K" << std::flush;
    return;
  }
  const double m = static_cast<double>(c.done) / 1e6;
  if (c.pass == heap::HeapPass::Census) {
    std::cerr << fmt::format("\rljprof heap: {:.2f} M objects counted", m) << std::flush;
  } else {
    std::cerr << fmt::format("\rljprof heap: references of {:.2f} of {:.2f} M objects followed", m,
                             static_cast<double>(c.total) / 1e6)
              << std::flush;
  }
}

// `live`: a process, not a core; `running`: one that runs on during the read (no --stop).
Result<Snapshot> take_snapshot(const core::CoreFile& core, const core::CoreWalker& walker,
                               uint64_t g, bool live, bool running, size_t top) {
  LJ_ASSIGN_OR_RETURN(const lj_luajit_info info, luajit::to_walker_info(*walker.luajit()));
  heap::Memory mem(core.mem_reader(), info);
  mem.on_release([&core] { core.release_resident_pages(); });
  if (!live) {  // a live process's memory is read through its page cache, one thread at a time
    mem.on_in_place([&core](uint64_t addr) {
      const core::CoreFile::InPlaceBytes run = core.in_place_at(addr);
      return heap::Memory::InPlace{run.start, run.bytes.data(), run.bytes.size()};
    });
    mem.allow_threads(true);
  }
  if (running) {
    // An object the program was writing as it was read: read it again a moment later.
    mem.on_reread([&core](uint64_t addr, uint64_t len) {
      core.forget_cached_pages(addr, len);
      std::this_thread::sleep_for(kRereadPause);
      return true;
    });
  }
  Snapshot s;
  // A live process: each page is read once, on first use, and later reads of it are served from
  // that copy, so the walk costs a read per page instead of per field. Up to 64 MiB of pages,
  // then the cache starts over: objects are visited in list order, mostly near the last ones.
  auto empty_page_cache = [&] { core.cache_pages(live, kHeapCachedPages, true, kHeapPagesAhead); };
  empty_page_cache();
  mem.on_checkpoint([&](const heap::HeapCheckpoint& c) {
    if (live && c.pass == heap::HeapPass::Graph && c.end) {
      // Past the graph pass a live walk reads little (the names of paths): the page cache's
      // block goes before the dominators' arrays come (the walk's peak), back at its next use.
      core.cache_pages(false);
      empty_page_cache();
    }
    show_progress(c);
  });
  auto census = heap::take_census(mem, g);
  // gc.root ends at the main thread (lj_state.c: the first object of the VM). A live walk that
  // did not reach it was cut where the program rewrote the list faster than it was read (an
  // object freed and its memory reused, its old header still looking whole): everything behind
  // the cut, the roots among it, would show as unreached. Read again from an empty page cache.
  for (int again = 0; running && census.ok() && census->index_of(census->main_thread) < 0 &&
                      again < kCensusRetries;
       ++again) {
    empty_page_cache();
    census = heap::take_census(mem, g);
  }
  if (census.ok()) {
    const uint64_t n = census->objects.size();
    mem.checkpoint({heap::HeapPass::Census, n, n, true});
    s.retainers = heap::find_retainers(mem, *census, top, fiber_names(walker));
  }
  core.cache_pages(false);
  if (!census.ok()) return make_error("{}", census.message());
  s.census = std::move(*census);
  s.total_after = s.census.vm_total;
  if (live) mem.read(g + info.g_gc_total, &s.total_after, info.ref_size);
  return s;
}

// The state letter of /proc/PID/stat ('T': stopped), or 0 when unreadable.
char process_state(uint32_t pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() ? stat[close + 2] : 0;
}

// --stop: SIGSTOP until every thread is stopped (as a shell's job control stops it), SIGCONT
// when the guard goes; how long it was stopped.
class StoppedProcess {
 public:
  explicit StoppedProcess(uint32_t pid) : pid_(pid), start_(std::chrono::steady_clock::now()) {
    ::kill(static_cast<pid_t>(pid_), SIGSTOP);
    for (int i = 0; i < 1000 && process_state(pid_) != 'T'; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  ~StoppedProcess() { ::kill(static_cast<pid_t>(pid_), SIGCONT); }
  StoppedProcess(const StoppedProcess&) = delete;
  StoppedProcess& operator=(const StoppedProcess&) = delete;
  bool stopped() const { return process_state(pid_) == 'T'; }
  double elapsed_ms() const {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_)
        .count();
  }

 private:
  uint32_t pid_;
  std::chrono::steady_clock::time_point start_;
};

int run_heap_command(const HeapFlags& f) {
  if (f.core.empty() == (f.pid == 0)) return heap_fail("give either a CORE file or -p PID");
  // The walk's arrays come and go by the megabyte (a pass's arrays, the graph's edge blocks, a
  // second thread's part): served by mmap from 256 KiB up, each is given back when freed. With
  // glibc's sliding threshold they stayed in its arenas once freed, the second thread's in an
  // arena of its own that nothing else reuses: 10 MiB more at the peak of a 2 M-object core.
  ::mallopt(M_MMAP_THRESHOLD, kMmapFromBytes);
  core::CoreOptions options;
  options.exe = f.exe;
  options.sysroots = f.sysroots;
  auto core =
      f.pid != 0 ? core::CoreFile::from_process(f.pid) : core::CoreFile::open(f.core, options);
  if (!core.ok()) return heap_fail(core.message());
  cfi::TableCache tables(f.table_cache);
  auto walker = core::CoreWalker::create(*core, &tables);
  if (!walker.ok()) return heap_fail(walker.message());
  if (!(*walker)->luajit()) return heap_fail("no LuaJIT layout: " + (*walker)->luajit_error());
  uint64_t chosen = 0;
  if (!f.global_state.empty()) {
    auto parsed = parse_address(f.global_state);
    if (!parsed) return heap_fail("--global-state " + f.global_state + ": not an address");
    chosen = *parsed;
  }
  // Found before a --stop: the VM's GG_State does not move, and the scan need not lengthen it.
  auto g = find_g(*core, **walker, chosen);
  if (!g.ok()) return heap_fail(g.message());
  std::optional<StoppedProcess> stopped;
  if (f.stop) {
    if (f.pid == 0) return heap_fail("--stop needs -p PID");
    stopped.emplace(f.pid);
    if (!stopped->stopped()) return heap_fail(fmt::format("process {} did not stop", f.pid));
  }
  auto snapshot = take_snapshot(*core, **walker, *g, f.pid != 0, f.pid != 0 && !stopped, f.top);
  if (stopped) {
    const double ms = stopped->elapsed_ms();
    stopped.reset();
    std::cerr << fmt::format("ljprof heap: process {} was stopped for {:.1f} ms\n", f.pid, ms);
  }
  if (!snapshot.ok()) return heap_fail(snapshot.message());
  report::HeapReportOptions ro{
      .top = f.top, .live = f.pid != 0, .total_after = snapshot->total_after};
  if (f.json) {
    std::cout << report::json_text(report::heap_json(snapshot->census, snapshot->retainers, ro))
              << "\n";
  } else {
    std::cout << report::heap_text(snapshot->census, snapshot->retainers, ro);
  }
  if (!f.pprof.empty()) {
    profile::Profile p = heap::heap_profile(snapshot->retainers);
    if (!f.base.empty()) {
      auto base = report::read_pprof(f.base);
      if (!base.ok()) return heap_fail(base.message());
      heap::subtract_base(p, *base);
    }
    auto written = report::write_pprof(p, f.pprof);
    if (!written.ok()) return heap_fail(written.message());
    if (f.pprof != "-") std::cerr << "ljprof heap: wrote " << f.pprof << "\n";
  }
  return 0;
}

}  // namespace

void add_heap_command(CommandLine& cli) {
  auto f = std::make_shared<HeapFlags>();
  Command cmd = cli.add(
      "heap",
      "Show what holds the Lua heap of a core file or a running process (tarantool, luajit, "
      "nginx-lua): every GC object by type with LuaJIT's own sizes, against the VM's gc.total, "
      "and the biggest retainers by their path from the GC roots.");
  cmd.option("CORE", f->core, "The core file (or give -p PID)");
  cmd.option("-p,--pid", f->pid, "A running process, read without stopping it");
  cmd.flag("--stop", f->stop,
           "With -p: stop the process (SIGSTOP) for an exact snapshot, continue it after, and "
           "print how long it was stopped");
  cmd.option("--exe", f->exe, "The executable, when it is not at its recorded path");
  cmd.option("--sysroot", f->sysroots,
             "A root to look for the core's mapped files in (repeatable), as `ljprof core`");
  cmd.option("--global-state", f->global_state,
             "The global_State address of the VM to read, when the process runs several (they "
             "are listed when it is not given)");
  cmd.flag("--json", f->json, "Print one JSON object instead of text");
  cmd.option("--top", f->top, "How many retainers to show (default 20)");
  cmd.option("-o,--pprof", f->pprof,
             "Write a pprof memory profile (inuse_objects, inuse_space) whose stacks are the "
             "paths from the roots");
  cmd.option("--base", f->base,
             "With -o: subtract this earlier heap profile (as go tool pprof -diff_base), so the "
             "profile shows what grew");
  add_table_cache_option(cmd, f->table_cache);
  cmd.run([f] { return run_heap_command(*f); });
}

}  // namespace ljprof::cli
