// cli/recording.h: what `ljprof record` and `ljprof agent` share on the command line: the
// options they have in common, and the counters of a recording as both print them at exit (the
// agent's metrics page carries the same numbers under the registry's names).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "cli/command_line.h"
#include "common/result.h"

#include "record/recorder.h"

namespace ljprof::cli {

// "-p 12,34": process ids, comma-separated.
Result<std::vector<uint32_t>> parse_pid_list(const std::string& text);

// The options `record` and `agent` share: which processes, how often and how long to sample,
// and what recording may keep (kernel ring buffer, unwind rows, table cache). Each command
// places them among its own options (--help lists options in the order they are added) and
// words some of their help its own way; names, ranges and checks are these.
struct RecordingFlags {
  std::string pids;
  uint32_t freq = 0;
  double duration = 0;
  uint32_t ringbuf_mb = 0;
  uint32_t unwind_rows = 0;
  std::string table_cache;
  std::string off_cpu;      // --off-cpu[=THRESHOLD]: "" = off
  std::string loop_stalls;  // --loop-stalls THRESHOLD: "" = off
};

// -p,--pid PID[,PID...]
void add_pid_option(Command& cmd, RecordingFlags& flags, std::string_view help);
// -F,--freq HZ in [1, max_hz]; sets flags.freq to default_hz first.
void add_frequency_option(Command& cmd, RecordingFlags& flags, uint32_t default_hz,
                          uint32_t max_hz);
// -d,--duration SECONDS; `otherwise`: when recording stops without it (the help's default).
void add_duration_option(Command& cmd, RecordingFlags& flags, std::string_view otherwise);
// --ringbuf-mb, --unwind-rows and --table-cache; `ringbuf_help`: --ringbuf-mb's help.
void add_recording_resource_options(Command& cmd, RecordingFlags& flags,
                                    std::string_view ringbuf_help);

// --off-cpu[=THRESHOLD] (default 1ms); `help`: what the command does with the time.
void add_off_cpu_option(Command& cmd, RecordingFlags& flags, std::string_view help);
// --loop-stalls THRESHOLD; `help`: what the command reports of the stalls.
void add_loop_stalls_option(Command& cmd, RecordingFlags& flags, std::string_view help);

// The shared options as the recorder's: the -p list parsed, --ringbuf-mb a power of two, the
// thresholds of --off-cpu and --loop-stalls as durations; an error names the option.
Result<record::RecordOptions> recording_options(const RecordingFlags& flags);

// FLAG's value "10ms", "500us", "1s", "2000ns" (above 0, at most an hour) in ns; an error names
// the flag, the value and what is expected.
Result<uint64_t> parse_duration(const char* flag, const std::string& text);

// "ljprof COMMAND: N samples in S s, D delivered, R (P%) unwound to a proven root", then one
// line per reason with its count and where walks stopped.
void print_record_summary(std::ostream& out, std::string_view command,
                          const record::RecordStats& stats, double seconds);

// --table-cache DIR, alike for record, agent and core (cfi/table_cache.h); sets `dir` to the
// default directory first.
void add_table_cache_option(Command& cmd, std::string& dir);

// --unwind-rows N, alike for record and agent: the capacity of the kernel's row map.
void add_unwind_rows_option(Command& cmd, uint32_t& rows);

// "ljprof COMMAND: VALUE TEXT" for each level of the recording (record/recorder.h
// RecordStats::gauges: unwind rows in use and capacity, object cache).
void print_record_gauges(std::ostream& out, std::string_view command,
                         const record::RecordStats& stats);

// `--stats`: the agent's CPU per delivered sample in steady state, its max RSS, the CPU each
// process's attach took, and the kernel program's time per sample.
void print_record_cost(std::ostream& out, std::string_view command, const record::RecordCost& c);

}  // namespace ljprof::cli
