// cli/recording.h: what `ljprof record` and `ljprof agent` share on the command line: the -p
// list, and the counters of a recording as both print them at exit (the agent's metrics page
// carries the same numbers under the registry's names).
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
