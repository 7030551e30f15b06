// `ljprof fibers -p PID [--json]`: every fiber of every cord of a running Tarantool — id, name,
// state and mixed stack — read without stopping it; with `--sample HZ -d SECONDS` the wall-clock
// fiber profile (where fibers wait) written like `ljprof record`'s outputs.
#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <iostream>

#include "cfi/table_cache.h"
#include "cli/commands.h"
#include "cli/output_options.h"
#include "cli/recording.h"
#include "common/printable.h"
#include "core/core_file.h"
#include "core/core_walk.h"
#include "core/fiber_snapshot.h"
#include "record/fiber_wall.h"
#include "report/fiber_report.h"
#include "report/json_text.h"
#include "report/outputs.h"

namespace ljprof::cli {

namespace {

std::atomic<bool> g_interrupted{false};
void on_interrupt(int) {
  g_interrupted = true;
}

// `ljprof fibers`'s options as given.
struct FibersFlags {
  uint32_t pid = 0;
  bool json = false;
  double sample_hz = 0;  // 0: one snapshot
  double duration = 10;
  std::string pprof;
  std::string folded;
  std::string flamegraph;
  size_t top = 0;
  std::string group_by = "fiber";
  std::string table_cache;
};

int fail(const std::string& what) {
  std::cerr << "ljprof fibers: " << printable_text(what) << "\n";
  return 2;
}

// The main cord's fibers (an error when they cannot be read), then every other cord's; a cord
// whose list cannot be read consistently (its thread exited, a corrupt list) is said once.
int print_snapshot(const FibersFlags& f, const core::CoreWalker& walker) {
  auto main = core::FiberSnapshotter(walker).take();
  if (!main.ok()) return fail(main.message());
  report::FiberReport r;
  r.pid = f.pid;
  r.cords.push_back({f.pid, std::move(*main)});  // the main cord runs on the main thread
  auto cords = walker.other_cords();
  if (!cords.ok()) r.cords_error = cords.message();
  for (const core::CoreWalker::OtherCord& cord :
       cords.ok() ? *cords : std::vector<core::CoreWalker::OtherCord>{}) {
    auto snapshot = core::FiberSnapshotter(walker, cord.cord).take();
    if (snapshot.ok()) {
      r.cords.push_back({cord.tid, std::move(*snapshot)});
    } else if (r.cords_error.empty()) {
      r.cords_error = fmt::format("cord at {:#x}: {}", cord.cord, snapshot.message());
    }
  }
  if (f.json) {
    std::cout << report::json_text(report::fiber_report_json(r)) << "\n";
  } else {
    std::cout << report::fiber_report_text(r);
  }
  return 0;
}

int record_wall(const FibersFlags& f, const core::CoreWalker& walker) {
  report::OutputOptions out;
  auto group_by = parse_group_by(f.group_by);
  if (!group_by.ok()) return fail(group_by.message());
  out.group_by = *group_by;
  out.pprof_path = f.pprof;
  out.folded_path = f.folded;
  out.flamegraph_path = f.flamegraph;
  out.top = f.top;
  if (!out.any()) out.top = 20;
  std::cerr << fmt::format(
      "ljprof fibers: sampling the fibers of process {} at {} Hz for {} s (Ctrl-C stops)\n", f.pid,
      f.sample_hz, f.duration);
  g_interrupted = false;
  struct sigaction sa {
  }, old_int{};
  sa.sa_handler = on_interrupt;
  ::sigaction(SIGINT, &sa, &old_int);
  // About once a second, on a terminal: how far it is.
  const bool tty = ::isatty(2);
  const double seconds = f.duration;
  record::FiberWallOptions options{
      .pid = f.pid,
      .hz = f.sample_hz,
      .seconds = f.duration,
      .keep_going =
          [&](uint64_t ticks) {
            if (tty) {
              std::cerr << fmt::format("\r{} snapshots, {:.0f} of {:.0f} s\033[K", ticks,
                                       static_cast<double>(ticks) / f.sample_hz, seconds)
                        << std::flush;
            }
            return !g_interrupted;
          },
      .main_cord_only =
          [](const std::string& why) {
            std::cerr << fmt::format(
                "ljprof fibers: only the main cord's fibers were sampled: {}\n",
                printable_text(why));
          }};
  auto profile = record::record_fiber_wall(walker, options);
  if (tty) std::cerr << "\r\033[K";
  ::sigaction(SIGINT, &old_int, nullptr);
  if (!profile.ok()) return fail(profile.message());
  uint64_t samples = 0;
  for (const profile::Sample& s : profile->samples) samples += static_cast<uint64_t>(s.count);
  std::cerr << fmt::format("ljprof fibers: {} samples from {} snapshots in {:.1f} s\n", samples,
                           profile->counters["snapshots"], profile->duration_ns / 1e9);
  for (const auto& [name, value] : profile->counters) {
    if (value != 0 && name != "snapshots") {
      std::cerr << fmt::format("ljprof fibers:   {} {}\n", value, name);
    }
  }
  auto written = report::write_outputs(*profile, out);
  if (!written.ok()) return fail(written.message());
  for (const std::string* p : {&out.pprof_path, &out.folded_path, &out.flamegraph_path}) {
    if (!p->empty() && *p != "-") std::cerr << "ljprof fibers: wrote " << *p << "\n";
  }
  return 0;
}

int run_fibers_command(const FibersFlags& f) {
  auto process = core::CoreFile::from_process(f.pid);
  if (!process.ok()) return fail(process.message());
  cfi::TableCache tables(f.table_cache);
  auto walker = core::CoreWalker::create(*process, &tables);
  if (!walker.ok()) return fail(walker.message());
  if (!(*walker)->tarantool()) {
    return fail(fmt::format("process {} is not Tarantool: {}", f.pid,
                            (*walker)->luajit() ? "its LuaJIT is in " + (*walker)->luajit_file() +
                                                      ", which has no fibers"
                                                : "no LuaJIT found in it"));
  }
  return f.sample_hz > 0 ? record_wall(f, **walker) : print_snapshot(f, **walker);
}

}  // namespace

void add_fibers_command(CommandLine& cli) {
  auto f = std::make_shared<FibersFlags>();
  Command cmd = cli.add(
      "fibers",
      "Show every fiber of a running Tarantool, of every cord (tx, iproto, WAL, ...): id, name, "
      "state (running, ready, suspended, dead) and its mixed native + Lua stack, read without "
      "stopping the process. "
      "With --sample HZ: a wall-clock profile of where the fibers spend their time, waiting "
      "included.");
  cmd.option("-p,--pid", f->pid, "The Tarantool process").type_name("PID").required();
  cmd.flag("--json", f->json,
           "Print one JSON object {\"pid\", \"cord\", \"fibers\": [{\"id\", \"name\", \"state\", "
           "\"cord\", \"frames\", ...}]} instead of text (frames as in 'ljprof core --json')");
  cmd.option("--sample", f->sample_hz,
             "Take HZ snapshots a second and write a wall-clock profile (pprof sample type "
             "wall/nanoseconds; labels fiber, fiber_id, state) instead of one snapshot; its "
             "folded stacks, flame graph and top table are grouped by fiber unless --group-by "
             "none; with no output option, the top table")
      .type_name("HZ")
      .range(0.1, 1000.0);
  cmd.option("-d,--duration", f->duration, "With --sample: how long to sample (default 10 s)")
      .type_name("SECONDS")
      .range(0.01, 86400.0 * 365);
  cmd.option("-o,--output", f->pprof, "With --sample: write the profile as gzip pprof to FILE")
      .type_name("FILE.pb.gz");
  cmd.option("--folded", f->folded, "With --sample: write folded stacks to FILE ('-' = stdout)")
      .type_name("FILE");
  cmd.option("--flamegraph", f->flamegraph,
             "With --sample: write a flame graph (FILE.svg, else interactive HTML)")
      .type_name("FILE");
  cmd.flag("--top{20}", f->top, "With --sample: print the N hottest functions (default 20)")
      .option_text("[=N]");
  add_group_by_option(cmd, f->group_by);
  add_table_cache_option(cmd, f->table_cache);
  cmd.run([f] { return run_fibers_command(*f); });
}

}  // namespace ljprof::cli
