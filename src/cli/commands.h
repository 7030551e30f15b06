// Subcommands of the `ljprof` executable. Each registers itself on the CLI11 app and stores the
// process exit status in `*exit_code` when it runs (0 ok, 1 check failed, 2 bad input/usage).
#pragma once

#include <CLI/CLI.hpp>

namespace ljprof::cli {

void add_inspect_command(CLI::App& app, int* exit_code);
void add_core_command(CLI::App& app, int* exit_code);
void add_cfi_command(CLI::App& app, int* exit_code);
void add_report_command(CLI::App& app, int* exit_code);
void add_record_command(CLI::App& app, int* exit_code);

}  // namespace ljprof::cli
