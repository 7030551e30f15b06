#include "cli/command_line.h"
#include "cli/commands.h"
#include "cli/loader_pages.h"
#include "cli/version.h"

int main(int argc, char** argv) {
  ljprof::cli::release_relocation_pages();
  ljprof::cli::CommandLine cli(
      "ljprof: mixed native + LuaJIT stacks for Tarantool, OpenResty/nginx-lua and LuaJIT "
      "(x86-64, arm64)",
      "ljprof", ljprof::cli::version_text,
      "Run 'ljprof COMMAND --help' for the options of one command.\n"
      "Exit status: 0 success, 1 a check failed, 2 bad input or usage.");
  ljprof::cli::add_inspect_command(cli);
  ljprof::cli::add_core_command(cli);
  ljprof::cli::add_fibers_command(cli);
  ljprof::cli::add_heap_command(cli);
  ljprof::cli::add_cfi_command(cli);
  ljprof::cli::add_record_command(cli);
  ljprof::cli::add_report_command(cli);
  ljprof::cli::add_agent_command(cli);
  cli.config_file(
      "--config",
      "Read options from a TOML file, a [COMMAND] section each (see 'ljprof agent --help')");
  return cli.run(argc, argv);
}
