// cli/command_line.h: ljprof's command line — its subcommands, their options, and what each
// runs. command_line.cc is the one file that includes CLI11: the library is header-only and its
// App cost 7 s (g++ -O2) to 13 s (clang with ASan) of compile in every file that included it,
// once per command, in each of make test's three builds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace ljprof::cli {

// One subcommand. Options bind to variables that must outlive CommandLine::run (the commands
// keep them in a shared_ptr their run() body captures). Names are CLI11's: "-p,--pid", a
// positional "BINARY", a flag "--top{20}" whose value is optional ("--top" = 20, "--top=N").
class Command {
 public:
  Command& option(std::string_view names, std::string& value, std::string_view help);
  Command& option(std::string_view names, std::vector<std::string>& values, std::string_view help);
  Command& option(std::string_view names, int& value, std::string_view help);
  Command& option(std::string_view names, uint32_t& value, std::string_view help);
  Command& option(std::string_view names, double& value, std::string_view help);
  Command& flag(std::string_view names, bool& value, std::string_view help);
  Command& flag(std::string_view names, size_t& value, std::string_view help);
  // A flag with an optional value: "--off-cpu{1ms}" is "1ms" alone, "--off-cpu=10ms" with one.
  Command& flag(std::string_view names, std::string& value, std::string_view help);
  // Refinements of the option or flag added last.
  Command& required();
  Command& range(double min, double max);
  Command& non_negative();
  Command& type_name(std::string_view name);    // the value's name in --help ("FILE")
  Command& option_text(std::string_view text);  // everything after the names in --help
  Command& env(std::string_view variable);      // the value's default from the environment
  Command& footer(std::string_view text);
  // What the command does when it is chosen; returns the process exit status (0 ok, 1 a check
  // failed, 2 bad input or usage).
  Command& run(std::function<int()> body);

 private:
  friend class CommandLine;
  Command(CLI::App* app, int* exit_code) : app_(app), exit_code_(exit_code) {}
  CLI::App* app_;
  int* exit_code_;
  CLI::Option* last_ = nullptr;
};

class CommandLine {
 public:
  // `version`: what --version prints, computed only then.
  CommandLine(std::string_view description, std::string_view name,
              std::function<std::string()> version, std::string_view footer);
  ~CommandLine();
  CommandLine(const CommandLine&) = delete;
  CommandLine& operator=(const CommandLine&) = delete;

  Command add(std::string_view name, std::string_view description);
  // An option (given before or after the command's name) naming a TOML file of further options:
  // a section per command ("[agent]"), in it one "name = value" per line with the long option
  // names without "--", repeated options as ["a", "b"], flags as true; the command line wins
  // over the file. CLI11 reads config files for the main app only, hence here.
  void config_file(std::string_view names, std::string_view help);
  // Parses argv, runs the chosen command, returns the exit status (2 on a usage error, 0 for
  // --help and --version).
  int run(int argc, char** argv);

 private:
  std::unique_ptr<CLI::App> app_;
  int exit_code_ = 0;
};

}  // namespace ljprof::cli
