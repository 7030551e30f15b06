// `ljprof report FILE.pb.gz [--pid PID] [--fiber NAME] [--group-by fiber] [--top[=N]] [--folded
// FILE] [--flamegraph FILE.html|.svg]`: turns a saved pprof profile (ours or any other profiler's)
// into the outputs of report/.
#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <set>

#include "cli/commands.h"
#include "cli/output_options.h"
#include "common/printable.h"
#include "report/outputs.h"
#include "report/pprof.h"

namespace ljprof::cli {

namespace {

// Leaves the samples of process `pid` only; false when it had none.
bool keep_process(profile::Profile& profile, uint32_t pid) {
  std::erase_if(profile.samples, [pid](const profile::Sample& s) { return s.pid != pid; });
  return !profile.samples.empty();
}

// `ljprof report`'s options as given.
struct ReportFlags {
  std::string input;
  size_t top = 0;
  std::string folded;
  std::string flamegraph;
  uint32_t pid = 0;
  std::string group_by;
  std::string fiber;
  std::string value;
};

// --pid and --fiber: leaves the samples they select; false (after saying why) when none is left.
bool select_samples(const ReportFlags& f, profile::Profile& profile) {
  if (f.pid != 0) {
    std::set<uint32_t> pids;  // for the error: the processes the profile has
    for (const profile::Sample& s : profile.samples) pids.insert(s.pid);
    if (!keep_process(profile, f.pid)) {
      std::cerr << fmt::format(
          "ljprof report: {} has no sample of process {} (--pid); its processes: {}\n", f.input,
          f.pid, pids.empty() ? "none" : fmt::format("{}", fmt::join(pids, ", ")));
      return false;
    }
  }
  if (!f.fiber.empty()) {
    // Compared as printable text, which is what the profile holds and what outputs show.
    const std::string name = printable_text(f.fiber);
    std::set<std::string> names;  // for the error: the fibers the profile has
    for (const profile::Sample& s : profile.samples) {
      if (s.fiber.present()) names.insert(s.fiber.name);
    }
    std::erase_if(profile.samples, [&name](const profile::Sample& s) {
      return !s.fiber.present() || s.fiber.name != name;
    });
    if (profile.samples.empty()) {
      std::cerr << fmt::format(
          "ljprof report: {} has no sample of a fiber named '{}' (--fiber); its fibers: {}\n",
          f.input, name, names.empty() ? "none" : fmt::format("{}", fmt::join(names, ", ")));
      return false;
    }
  }
  return true;
}

int run_report_command(const ReportFlags& f) {
  report::OutputOptions out;
  auto group_by = parse_group_by(f.group_by);
  if (!group_by.ok()) {
    std::cerr << "ljprof report: " << group_by.message() << "\n";
    return 2;
  }
  out.group_by = *group_by;
  auto value = parse_value(f.value);
  if (!value.ok()) {
    std::cerr << "ljprof report: " << value.message() << "\n";
    return 2;
  }
  out.value = *value;
  auto profile = report::read_pprof(f.input);
  if (!profile.ok()) {
    std::cerr << "ljprof report: " << profile.message() << "\n";
    return 2;
  }
  if (!select_samples(f, *profile)) return 2;
  out.folded_path = f.folded;
  out.flamegraph_path = f.flamegraph;
  out.top = f.top;
  if (!out.any()) out.top = 20;
  auto written = report::write_outputs(*profile, out);
  if (!written.ok()) {
    std::cerr << "ljprof report: " << written.message() << "\n";
    return 2;
  }
  return 0;
}

}  // namespace

void add_report_command(CommandLine& cli) {
  auto f = std::make_shared<ReportFlags>();
  Command cmd = cli.add(
      "report",
      "Read a pprof profile (.pb.gz, e.g. from 'ljprof record -o') and print the hottest "
      "functions, or write folded stacks or a flame graph. With no output option: --top=20.");
  cmd.option("FILE", f->input, "The pprof profile (gzip-compressed or raw profile.proto)")
      .type_name("")
      .required();
  // A flag with an optional value ("--top" or "--top=N") so that "--top FILE" still reads FILE
  // as the profile rather than as N.
  cmd.flag("--top{20}", f->top,
           "Print the N hottest functions (default 20) to stdout: flat = samples whose "
           "leaf is the function, cum = samples with it anywhere in the stack")
      .option_text("[=N]");
  cmd.option("--folded", f->folded,
             "Write folded stacks (Brendan Gregg's format: root first, ';'-joined frames, "
             "space, count; input of flamegraph.pl, speedscope, inferno) to FILE; '-' = "
             "stdout")
      .type_name("FILE");
  cmd.option("--flamegraph", f->flamegraph,
             "Write a flame graph to FILE: FILE.svg = static SVG, anything else (FILE.html) "
             "= self-contained interactive HTML (zoom, search, colour by frame kind)")
      .type_name("FILE");
  cmd.option("--pid", f->pid,
             "Only the samples of process PID (their 'pid' label): one process of a profile of "
             "several ('ljprof record -p A,B' or -a)")
      .type_name("PID");
  add_group_by_option(cmd, f->group_by);
  add_value_option(cmd, f->value);
  cmd.option("--fiber", f->fiber,
             "Only the samples of Tarantool fibers named NAME (their 'fiber' label); samples "
             "without a fiber are left out")
      .type_name("NAME");
  cmd.run([f] { return run_report_command(*f); });
}

}  // namespace ljprof::cli
