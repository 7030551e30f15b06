// Subcommands of the `ljprof` executable; each registers itself, its options and what it runs
// on the command line.
#pragma once

#include "cli/command_line.h"

namespace ljprof::cli {

void add_inspect_command(CommandLine& cli);
void add_core_command(CommandLine& cli);
void add_fibers_command(CommandLine& cli);
void add_heap_command(CommandLine& cli);
void add_cfi_command(CommandLine& cli);
void add_report_command(CommandLine& cli);
void add_record_command(CommandLine& cli);
void add_agent_command(CommandLine& cli);

}  // namespace ljprof::cli
