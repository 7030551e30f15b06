#include "cli/command_line.h"

#include <CLI/CLI.hpp>

namespace ljprof::cli {

namespace {
std::string text(std::string_view s) {
  return std::string(s);
}
}  // namespace

Command& Command::option(std::string_view names, std::string& value, std::string_view help) {
  last_ = app_->add_option(text(names), value, text(help));
  return *this;
}
Command& Command::option(std::string_view names, std::vector<std::string>& values,
                         std::string_view help) {
  last_ = app_->add_option(text(names), values, text(help));
  return *this;
}
Command& Command::option(std::string_view names, int& value, std::string_view help) {
  last_ = app_->add_option(text(names), value, text(help));
  return *this;
}
Command& Command::option(std::string_view names, uint32_t& value, std::string_view help) {
  last_ = app_->add_option(text(names), value, text(help));
  return *this;
}
Command& Command::option(std::string_view names, double& value, std::string_view help) {
  last_ = app_->add_option(text(names), value, text(help));
  return *this;
}
Command& Command::flag(std::string_view names, bool& value, std::string_view help) {
  last_ = app_->add_flag(text(names), value, text(help));
  return *this;
}
Command& Command::flag(std::string_view names, size_t& value, std::string_view help) {
  last_ = app_->add_flag(text(names), value, text(help));
  return *this;
}
Command& Command::flag(std::string_view names, std::string& value, std::string_view help) {
  last_ = app_->add_flag(text(names), value, text(help));
  return *this;
}
Command& Command::required() {
  last_->required();
  return *this;
}
Command& Command::range(double min, double max) {
  last_->check(CLI::Range(min, max));
  return *this;
}
Command& Command::non_negative() {
  last_->check(CLI::NonNegativeNumber);
  return *this;
}
Command& Command::type_name(std::string_view name) {
  last_->type_name(text(name));
  return *this;
}
Command& Command::option_text(std::string_view option_text) {
  last_->option_text(text(option_text));
  return *this;
}
Command& Command::env(std::string_view variable) {
  last_->envname(text(variable));
  return *this;
}
Command& Command::footer(std::string_view footer_text) {
  app_->footer(text(footer_text));
  return *this;
}
Command& Command::run(std::function<int()> body) {
  app_->callback([body = std::move(body), exit_code = exit_code_] { *exit_code = body(); });
  return *this;
}

CommandLine::CommandLine(std::string_view description, std::string_view name,
                         std::function<std::string()> version, std::string_view footer)
    : app_(std::make_unique<CLI::App>(text(description), text(name))) {
  app_->require_subcommand(1);
  app_->set_version_flag("--version", std::move(version),
                         "Print the version, the git commit and the build-id, and exit");
  app_->footer(text(footer));
}

CommandLine::~CommandLine() = default;

Command CommandLine::add(std::string_view name, std::string_view description) {
  return Command(app_->add_subcommand(text(name), text(description)), &exit_code_);
}

void CommandLine::config_file(std::string_view names, std::string_view help) {
  app_->set_config(text(names), "", text(help))->type_name("FILE");
  // A misspelt key is an error, not an option silently left at its default.
  app_->allow_config_extras(CLI::config_extras_mode::error);
  // `ljprof agent --config FILE`: each command passes the option it does not know to the app.
  for (CLI::App* command : app_->get_subcommands({})) command->fallthrough();
}

int CommandLine::run(int argc, char** argv) {
  try {
    app_->parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app_->exit(e) == 0 ? 0 : 2;
  }
  return exit_code_;
}

}  // namespace ljprof::cli
