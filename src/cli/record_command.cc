// `ljprof record (-p PID[,PID...] | -a | -- COMMAND ARGS...) [-F HZ] [-d SECONDS] [-o FILE.pb.gz]
//  [--folded FILE] [--flamegraph FILE.html|.svg] [--speedscope FILE.json] [--firefox FILE]
//  [--top[=N]]`: live mixed-stack profiling with the in-kernel walker (record/recorder.h),
// written through report/outputs.h.
#include <unistd.h>

#include <iostream>

#include "cli/commands.h"
#include "cli/output_options.h"
#include "cli/recording.h"
#include "record/recorder.h"
#include "report/outputs.h"
#include "report/stalls.h"

namespace ljprof::cli {

namespace {

// `ljprof record`'s options as given.
struct RecordFlags {
  RecordingFlags recording;
  bool all = false;
  bool follow_forks = false;
  std::string pprof;
  std::string folded;
  std::string flamegraph;
  std::string speedscope;
  std::string firefox;
  std::string group_by;
  size_t top = 0;
  bool quiet = false;
  bool stats = false;
  std::string value;
  std::string stalls_json;
  std::vector<std::string> command;
};

// What run_record_command takes: the recorder's options (without its callbacks) and the outputs.
struct RecordCommandOptions {
  record::RecordOptions record;
  report::OutputOptions outputs;
  bool quiet = false;
  bool stats = false;
  std::string stalls_json;  // --stalls FILE
};

// The flags as the recording's options; an error names the flag.
Result<RecordCommandOptions> record_command_options(const RecordFlags& f) {
  RecordCommandOptions o;
  LJ_ASSIGN_OR_RETURN(o.record, recording_options(f.recording));
  o.record.all = f.all;
  o.record.command = f.command;
  o.record.follow_forks = f.follow_forks;
  const int sources =
      (o.record.pids.empty() ? 0 : 1) + (f.all ? 1 : 0) + (f.command.empty() ? 0 : 1);
  if (sources != 1) return make_error("give exactly one of -p PID, -a, or -- COMMAND (see --help)");
  o.outputs.pprof_path = f.pprof;
  o.outputs.folded_path = f.folded;
  o.outputs.flamegraph_path = f.flamegraph;
  o.outputs.speedscope_path = f.speedscope;
  o.outputs.firefox_path = f.firefox;
  o.record.keep_timeline = !f.speedscope.empty() || !f.firefox.empty();
  o.outputs.top = f.top;
  o.outputs.top_out = &std::cout;
  LJ_ASSIGN_OR_RETURN(o.outputs.group_by, parse_group_by(f.group_by));
  LJ_ASSIGN_OR_RETURN(o.outputs.value, parse_value(f.value));
  // A recording of off-CPU time shows it unless asked otherwise.
  if (!f.recording.off_cpu.empty() && !o.outputs.value)
    o.outputs.value = report::ProfileValue::OffCpu;
  if (!o.outputs.any()) {
    o.outputs.pprof_path = "ljprof.pb.gz";
    o.outputs.top = 20;
  }
  if (!f.stalls_json.empty() && f.recording.loop_stalls.empty()) {
    return make_error("--stalls FILE needs --loop-stalls THRESHOLD");
  }
  o.stalls_json = f.stalls_json;
  o.quiet = f.quiet;
  o.stats = f.stats;
  o.record.tally_walk_work = f.stats;
  return o;
}

int run_record_command(RecordCommandOptions o) {
  const bool tty = ::isatty(2);
  if (!o.quiet) {
    o.record.progress = [tty](const std::string& line) {
      if (tty) {
        std::cerr << "\r" << line << "\033[K" << std::flush;
      }
    };
  }
  o.record.warn = [tty](const std::string& m) {
    std::cerr << (tty ? "\r\033[K" : "") << "ljprof record: warning: " << m << "\n";
  };
  auto r = record::record(o.record);
  if (tty && !o.quiet) std::cerr << "\r\033[K";
  if (!r.ok()) {
    std::cerr << "ljprof record: " << r.message() << "\n";
    return 2;
  }
  print_record_summary(std::cerr, "record", *r, r->profile.duration_ns / 1e9);
  if (o.stats) {
    print_record_cost(std::cerr, "record", r->cost);
    print_record_gauges(std::cerr, "record", *r);
  }
  const report::OutputOptions& out = o.outputs;
  auto written = report::write_outputs(r->profile, out);
  if (!written.ok()) {
    std::cerr << "ljprof record: " << written.message() << "\n";
    return 2;
  }
  for (const std::string* p : {&out.pprof_path, &out.folded_path, &out.flamegraph_path,
                               &out.speedscope_path, &out.firefox_path}) {
    if (!p->empty() && *p != "-") std::cerr << "ljprof record: wrote " << *p << "\n";
  }
  if (o.record.loop_stall_ns != 0) {
    std::cerr << "ljprof record: " << report::stalls_text(r->profile.stalls);
    if (!o.stalls_json.empty()) {
      auto stalls = report::write_stalls_json(r->profile.stalls, o.stalls_json);
      if (!stalls.ok()) {
        std::cerr << "ljprof record: " << stalls.message() << "\n";
        return 2;
      }
      std::cerr << "ljprof record: wrote " << o.stalls_json << "\n";
    }
  }
  return 0;
}

}  // namespace

void add_record_command(CommandLine& cli) {
  auto f = std::make_shared<RecordFlags>();
  Command cmd = cli.add(
      "record",
      "Sample processes live with eBPF and unwind every sample's mixed native + Lua stack in "
      "the kernel (CFI + the LuaJIT frame walk; JIT traces, C functions called from Lua, "
      "Tarantool fibers). Needs root. Running targets (-p, -a) are never stopped or written. With "
      "no "
      "output option: -o ljprof.pb.gz and --top=20.");
  add_pid_option(cmd, f->recording, "Comma-separated PIDs of running processes to sample");
  cmd.flag("-a,--all", f->all,
           "Sample every process with a detected LuaJIT runtime (tarantool, luajit, "
           "nginx with lua), including ones that start while recording or load LuaJIT later");
  cmd.flag("--follow-forks", f->follow_forks,
           "With -p: also sample child processes they fork (always on for -- COMMAND)");
  add_frequency_option(cmd, f->recording, 99, 100000);
  add_duration_option(cmd, f->recording, "at Ctrl-C, or when the sampled processes exit");
  add_recording_resource_options(
      cmd, f->recording,
      "Kernel ring buffer size in MiB, a power of two (default: a second of samples, CPUs x "
      "freq x 1 KiB, 256 KiB to 256 MiB); raise it if the summary reports dropped samples");
  cmd.option("-o,--output", f->pprof,
             "Write a gzip pprof profile (go tool pprof, Pyroscope, Parca, speedscope)");
  cmd.option("--folded", f->folded, "Write folded stacks to FILE ('-' = stdout)");
  cmd.option("--flamegraph", f->flamegraph,
             "Write a flame graph: FILE.svg = SVG, otherwise self-contained HTML");
  cmd.option("--speedscope", f->speedscope,
             "Write the timeline as a speedscope file (open it at https://www.speedscope.app or "
             "with the speedscope command): every sample in time order, one track per thread "
             "(per thread and fiber for Tarantool), off-CPU intervals with --off-cpu")
      .type_name("FILE.json");
  cmd.option("--firefox", f->firefox,
             "Write the timeline as 'perf script' text, which the Firefox Profiler "
             "(https://profiler.firefox.com, 'Load a profile from file') opens with one track "
             "per thread and the samples' real times")
      .type_name("FILE");
  add_group_by_option(cmd, f->group_by);
  add_value_option(cmd, f->value);
  cmd.flag("--top{20}", f->top, "Print the N hottest functions (default 20)");
  add_off_cpu_option(cmd, f->recording,
                     "pprof sample type off_cpu/nanoseconds, label state: blocked, preempted or "
                     "idle (the event loop waiting for work, left out of the text outputs); go "
                     "tool pprof -sample_index=off_cpu");
  add_loop_stalls_option(cmd, f->recording,
                         "each one with the Lua functions sampled inside it (on the CPU, and off "
                         "it with --off-cpu): count, p50/p99/max and the worst stalls on stderr");
  cmd.option("--stalls", f->stalls_json,
             "With --loop-stalls: also write every stall to FILE as JSON: [{\"pid\", \"tid\", "
             "\"start_ns\", \"duration_ns\", \"stacks\": [{\"frames\", \"samples\", "
             "\"off_cpu_ns\"}]}]")
      .type_name("FILE.json");
  cmd.flag("-q,--quiet", f->quiet, "No progress line while recording");
  cmd.flag("--stats", f->stats,
           "Also print what recording cost: the agent's CPU per delivered sample in steady "
           "state (after the first 2 s) and its max RSS, the CPU each process's attach took, "
           "the kernel program's median time per sample and what a frame costs it (reads, row "
           "lookups; tallying them adds some 3% to its time), and the unwind rows and object "
           "cache in use at the end");
  cmd.option("COMMAND", f->command,
             "After '--': a command to launch and sample, with its children. It is held (ptrace) "
             "from its exec until the program interpreter has mapped its libraries, while its "
             "unwind context is published, so its first instructions are sampled like the rest; "
             "ljprof exits with status 2 when it cannot be run");
  cmd.footer(
      "Examples:\n"
      "  ljprof record -p $(pidof tarantool) -d 30 --flamegraph cpu.html\n"
      "  ljprof record -o cpu.pb.gz -- luajit bench.lua\n"
      "The summary says how many samples were unwound to a proven stack root and why the "
      "others stopped (each cut stack ends in an explicit [unknown: reason] frame).");
  cmd.run([f] {
    auto options = record_command_options(*f);
    if (!options.ok()) {
      std::cerr << "ljprof record: " << options.message() << "\n";
      return 2;
    }
    return run_record_command(std::move(*options));
  });
}

}  // namespace ljprof::cli
