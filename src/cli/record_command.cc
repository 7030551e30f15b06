// `ljprof record (-p PID[,PID...] | -a | -- COMMAND ARGS...) [-F HZ] [-d SECONDS] [-o FILE.pb.gz]
//  [--folded FILE] [--flamegraph FILE.html|.svg] [--top[=N]]`: live mixed-stack profiling with
// the in-kernel walker (record/recorder.h), written through report/outputs.h.
#include <unistd.h>

#include <iostream>

#include "cli/commands.h"
#include "cli/recording.h"
#include "record/recorder.h"
#include "report/outputs.h"

namespace ljprof::cli {

void add_record_command(CommandLine& cli) {
  struct Options {
    std::string pids;
    bool all = false;
    bool follow_forks = false;
    uint32_t freq = 99;
    double duration = 0;
    uint32_t ringbuf_mb = 0;
    uint32_t unwind_rows = 0;
    std::string table_cache;
    std::string pprof;
    std::string folded;
    std::string flamegraph;
    size_t top = 0;
    bool quiet = false;
    bool stats = false;
    std::vector<std::string> command;
  };
  auto opts = std::make_shared<Options>();
  Command cmd = cli.add(
      "record",
      "Sample processes live with eBPF and unwind every sample's mixed native + Lua stack in "
      "the kernel (CFI + the LuaJIT frame walk; JIT traces, C functions called from Lua, "
      "Tarantool fibers). Needs root. The targets are never stopped or written. With no "
      "output option: -o ljprof.pb.gz and --top=20.");
  cmd.option("-p,--pid", opts->pids, "Comma-separated PIDs of running processes to sample");
  cmd.flag("-a,--all", opts->all,
           "Sample every process with a detected LuaJIT runtime (tarantool, luajit, "
           "nginx with lua), including ones that start while recording or load LuaJIT later");
  cmd.flag("--follow-forks", opts->follow_forks,
           "With -p: also sample child processes they fork (always on for -- COMMAND)");
  cmd.option("-F,--freq", opts->freq, "Samples per second per CPU (default 99)").range(1, 100000);
  cmd.option("-d,--duration", opts->duration,
             "Stop after SECONDS (default: at Ctrl-C, or when the sampled processes exit)")
      .non_negative();
  cmd.option("--ringbuf-mb", opts->ringbuf_mb,
             "Kernel ring buffer size in MiB, a power of two (default: a second of samples, "
             "CPUs x freq x 1 KiB, 256 KiB to 256 MiB); raise it if the summary reports "
             "dropped samples")
      .range(1, 1024);
  add_unwind_rows_option(cmd, opts->unwind_rows);
  add_table_cache_option(cmd, opts->table_cache);
  cmd.option("-o,--output", opts->pprof,
             "Write a gzip pprof profile (go tool pprof, Pyroscope, Parca, speedscope)");
  cmd.option("--folded", opts->folded, "Write folded stacks to FILE ('-' = stdout)");
  cmd.option("--flamegraph", opts->flamegraph,
             "Write a flame graph: FILE.svg = SVG, otherwise self-contained HTML");
  cmd.flag("--top{20}", opts->top, "Print the N hottest functions (default 20)");
  cmd.flag("-q,--quiet", opts->quiet, "No progress line while recording");
  cmd.flag("--stats", opts->stats,
           "Also print what recording cost: the agent's CPU per delivered sample in steady "
           "state (after the first 2 s) and its max RSS, the CPU each process's attach took, "
           "the kernel program's median time per sample, and the unwind rows and object cache "
           "in use at the end");
  cmd.option("COMMAND", opts->command,
             "After '--': a command to launch and sample, with its children");
  cmd.footer(
      "Examples:\n"
      "  ljprof record -p $(pidof tarantool) -d 30 --flamegraph cpu.html\n"
      "  ljprof record -o cpu.pb.gz -- luajit bench.lua\n"
      "The summary says how many samples were unwound to a proven stack root and why the "
      "others stopped (each cut stack ends in an explicit [unknown: reason] frame).");
  cmd.run([opts]() {
    record::RecordOptions ro;
    if (!opts->pids.empty()) {
      auto pids = parse_pid_list(opts->pids);
      if (!pids.ok()) {
        std::cerr << "ljprof record: " << pids.message() << "\n";
        return 2;
      }
      ro.pids = std::move(*pids);
    }
    ro.all = opts->all;
    ro.command = opts->command;
    ro.follow_forks = opts->follow_forks;
    ro.frequency_hz = opts->freq;
    ro.duration_s = opts->duration;
    ro.ringbuf_mb = opts->ringbuf_mb;
    ro.unwind_rows = opts->unwind_rows;
    ro.table_cache_dir = opts->table_cache;
    if ((ro.ringbuf_mb & (ro.ringbuf_mb - 1)) != 0) {
      std::cerr << "ljprof record: --ringbuf-mb must be a power of two\n";
      return 2;
    }
    const int sources = (ro.pids.empty() ? 0 : 1) + (ro.all ? 1 : 0) + (ro.command.empty() ? 0 : 1);
    if (sources != 1) {
      std::cerr << "ljprof record: give exactly one of -p PID, -a, or -- COMMAND (see --help)\n";
      return 2;
    }
    const bool tty = ::isatty(2);
    if (!opts->quiet) {
      ro.progress = [tty](const std::string& line) {
        if (tty) {
          std::cerr << "\r" << line << "\033[K" << std::flush;
        }
      };
    }
    ro.warn = [tty](const std::string& m) {
      std::cerr << (tty ? "\r\033[K" : "") << "ljprof record: warning: " << m << "\n";
    };
    report::OutputOptions out;
    out.pprof_path = opts->pprof;
    out.folded_path = opts->folded;
    out.flamegraph_path = opts->flamegraph;
    out.top = opts->top;
    out.top_out = &std::cout;
    if (!out.any()) {
      out.pprof_path = "ljprof.pb.gz";
      out.top = 20;
    }
    auto r = record::record(ro);
    if (tty && !opts->quiet) std::cerr << "\r\033[K";
    if (!r.ok()) {
      std::cerr << "ljprof record: " << r.message() << "\n";
      return 2;
    }
    print_record_summary(std::cerr, "record", *r, r->profile.duration_ns / 1e9);
    if (opts->stats) {
      print_record_cost(std::cerr, "record", r->cost);
      print_record_gauges(std::cerr, "record", *r);
    }
    auto written = report::write_outputs(r->profile, out);
    if (!written.ok()) {
      std::cerr << "ljprof record: " << written.message() << "\n";
      return 2;
    }
    for (const std::string* p : {&out.pprof_path, &out.folded_path, &out.flamegraph_path}) {
      if (!p->empty() && *p != "-") std::cerr << "ljprof record: wrote " << *p << "\n";
    }
    return 0;
  });
}

}  // namespace ljprof::cli
