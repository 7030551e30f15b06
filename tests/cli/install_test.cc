// `cmake --install` of this build: the executable, a manual page per command generated from its
// --help (scripts/man-pages), and the agent's systemd unit pointing at the installed executable.
// Oracles: the executable's own --help (the commands and options every page must carry) and
// man(1)/groff, which render each page without a warning.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "support/test_support.h"

namespace ljprof {
namespace {

namespace fs = std::filesystem;

// The commands `ljprof --help` lists under "Subcommands:".
std::vector<std::string> commands() {
  const test::CommandResult r = test::run({test::ljprof_bin(), "--help"});
  std::vector<std::string> out;
  bool in_list = false;
  std::istringstream text(r.out);
  for (std::string line; std::getline(text, line);) {
    if (line == "Subcommands:") in_list = true;
    std::smatch m;
    if (in_list && std::regex_match(line, m, std::regex(R"(^  ([a-z]+)\s.*)"))) out.push_back(m[1]);
  }
  return out;
}

// Every long option a --help text names.
std::set<std::string> long_options(const std::string& help) {
  std::set<std::string> out;
  const std::regex option(R"((--[a-z][a-z0-9-]+))");
  for (std::sregex_iterator it(help.begin(), help.end(), option), end; it != end; ++it) {
    out.insert((*it)[1]);
  }
  return out;
}

TEST(Install, ExecutableManualPagesAndAgentUnit) {
  test::TempDir dir;
  const fs::path build = fs::path(test::ljprof_bin()).parent_path().parent_path().parent_path();
  const std::string prefix = dir.file("prefix");
  const test::CommandResult installed =
      test::run({"cmake", "--install", build.string(), "--prefix", prefix});
  ASSERT_EQ(installed.exit_code, 0) << installed.out << installed.err;
  const std::string exe = prefix + "/bin/ljprof";
  const test::CommandResult version = test::run({exe, "--version"});
  EXPECT_EQ(version.exit_code, 0) << version.err;
  EXPECT_EQ(version.out.rfind("ljprof ", 0), 0u) << version.out;

  const std::vector<std::string> names = commands();
  ASSERT_GE(names.size(), 8u);
  std::vector<std::pair<std::string, std::vector<std::string>>> pages = {{"ljprof", {"--help"}}};
  for (const std::string& c : names) pages.push_back({"ljprof-" + c, {c, "--help"}});
  for (const auto& [page, help_args] : pages) {
    SCOPED_TRACE(page);
    const std::string file = prefix + "/share/man/man1/" + page + ".1";
    ASSERT_TRUE(test::file_exists(file));
    // Wide enough that no option is broken across lines; groff's warnings go to stderr.
    const test::CommandResult man =
        test::run({"env", "MANWIDTH=1000", "man", "--warnings", "-l", "-P", "cat", file});
    ASSERT_EQ(man.exit_code, 0) << man.err;
    EXPECT_EQ(man.err, "");
    std::vector<std::string> argv = {exe};
    argv.insert(argv.end(), help_args.begin(), help_args.end());
    for (const std::string& option : long_options(test::run(argv).out)) {
      EXPECT_NE(man.out.find(option), std::string::npos) << option << " is not in " << file;
    }
  }

  const std::string unit = test::read_text(prefix + "/lib/systemd/system/ljprof-agent.service");
  EXPECT_NE(unit.find("\nExecStart=" + exe + " agent --config /etc/ljprof/agent.conf\n"),
            std::string::npos)
      << unit;
}

}  // namespace
}  // namespace ljprof
