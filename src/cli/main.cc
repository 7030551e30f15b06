#include <CLI/CLI.hpp>

#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{
      "ljprof: mixed native + LuaJIT stacks for Tarantool, OpenResty/nginx-lua and LuaJIT "
      "(x86-64, arm64)",
      "ljprof"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "ljprof 0.1.0");
  app.footer(
      "Run 'ljprof COMMAND --help' for the options of one command.\n"
      "Exit status: 0 success, 1 a check failed, 2 bad input or usage.");
  int exit_code = 0;
  ljprof::cli::add_inspect_command(app, &exit_code);
  ljprof::cli::add_core_command(app, &exit_code);
  ljprof::cli::add_cfi_command(app, &exit_code);
  ljprof::cli::add_record_command(app, &exit_code);
  ljprof::cli::add_report_command(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  return exit_code;
}
