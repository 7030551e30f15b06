// The portable tarball (packaging/portable, scripts/dist) on a system that has nothing but
// glibc: its executable, extracted into a root directory that holds only the glibc files the
// loader resolves for it, entered with chroot in a private mount namespace that sees the host's
// /proc and /sys. It must start, fail a bad command line cleanly (CLI11 throws: the unwinder
// finds its tables through glibc_compat.c's _dl_find_object), and record a luajit process
// running outside the root.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "split_oracle.h"
#include "support/test_support.h"

namespace ljprof {
namespace {

namespace fs = std::filesystem;
using record_oracle::FoldedStack;
using record_oracle::read_folded;

// The files ldd resolves for `executable` (the loader included), each as its real path.
std::vector<std::string> loaded_files(const std::string& executable) {
  test::CommandResult r = test::run({"ldd", executable});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> files;
  std::regex path(R"((/[^ \t]+) \(0x[0-9a-f]+\))");
  for (std::sregex_iterator it(r.out.begin(), r.out.end(), path), end; it != end; ++it) {
    files.push_back((*it)[1]);
  }
  return files;
}

// A root with `executable` at /ljprof and the files ldd lists for it at their paths (and at the
// path each symbolic link resolves to, so that /lib64's loader link works).
void make_root(const std::string& root, const std::string& executable) {
  fs::copy_file(executable, root + "/ljprof");
  for (const std::string& file : loaded_files(executable)) {
    for (const fs::path& at : {fs::path(file), fs::canonical(file)}) {
      fs::create_directories(root + at.parent_path().string());
      fs::copy_file(fs::canonical(file), root + at.string(), fs::copy_options::skip_existing);
    }
  }
  for (const char* mount_point : {"/proc", "/sys", "/tmp"}) {
    fs::create_directories(root + mount_point);
  }
}

// `argv` run as root inside `root`, with the host's /proc and /sys mounted there.
test::CommandResult run_in_root(const std::string& root, const std::string& command) {
  const std::string script = "set -e; mount --rbind /proc " + root + "/proc; mount --rbind /sys " +
                             root + "/sys; exec chroot " + root + " " + command;
  return test::run({"unshare", "--mount", "--propagation", "private", "sh", "-c", script});
}

// The amd64 tarball made as `make release` makes it, extracted into `dir`: its executable.
std::string extract_tarball(const test::TempDir& dir, const std::string& executable) {
  const std::string man = fs::path(executable).parent_path().parent_path() / "man";
  test::CommandResult dist = test::run({test::source_dir() + "/scripts/dist", dir.file("dist"),
                                        "amd64", executable, man, "0.0-test"});
  EXPECT_EQ(dist.exit_code, 0) << dist.err;
  const std::string tarball = dir.file("dist/ljprof-0.0-test-linux-amd64.tar.gz");
  fs::create_directories(dir.file("x"));
  test::CommandResult tar = test::run({"tar", "-xzf", tarball, "-C", dir.file("x")});
  EXPECT_EQ(tar.exit_code, 0) << tar.err;
  const std::string top = dir.file("x/ljprof-0.0-test-linux-amd64");
  for (const char* part : {"ljprof", "INSTALL", "ljprof-agent.service", "man/man1/ljprof.1",
                           "man/man1/ljprof-record.1"}) {
    EXPECT_TRUE(fs::exists(top + "/" + part)) << part << " missing from " << tarball;
  }
  return top + "/ljprof";
}

TEST(PortableExecutable, RunsAndRecordsFromARootThatHoldsOnlyGlibc) {
  ASSERT_EQ(geteuid(), 0u) << "chroot and ljprof record need root";
  test::TempDir dir;
  const std::string built = test::portable_ljprof_bin();
  ASSERT_FALSE(built.empty()) << "this build has no portable executable";
  const std::string executable = extract_tarball(dir, built);
  ASSERT_TRUE(fs::exists(executable));

  // readelf's view: only glibc's libraries, nothing past GLIBC_2.34, no libstdc++ versions.
  test::CommandResult check =
      test::run({test::source_dir() + "/scripts/check-portable", executable});
  EXPECT_EQ(check.exit_code, 0) << check.err;
  for (const std::string& file : loaded_files(executable)) {
    const std::string name = fs::path(file).filename();
    EXPECT_TRUE(name.rfind("libc.so", 0) == 0 || name.rfind("libm.so", 0) == 0 ||
                name.rfind("ld-linux", 0) == 0)
        << file << " is not glibc's";
  }

  const std::string root = dir.file("root");
  fs::create_directories(root);
  make_root(root, executable);

  // --version names the build-id that readelf reads from the executable's note.
  test::CommandResult version = run_in_root(root, "/ljprof --version");
  ASSERT_EQ(version.exit_code, 0) << version.err;
  test::CommandResult note = test::run({"readelf", "-n", executable});
  std::smatch id;
  ASSERT_TRUE(std::regex_search(note.out, id, std::regex(R"(Build ID: ([0-9a-f]+))"))) << note.out;
  EXPECT_NE(version.out.find("build-id " + id[1].str()), std::string::npos) << version.out;

  test::CommandResult bad = run_in_root(root, "/ljprof record --freq many");
  EXPECT_EQ(bad.exit_code, 2) << bad.out << bad.err;
  EXPECT_NE(bad.err.find("--freq"), std::string::npos) << bad.err;

  // same_stack.lua holds one stack, main chunk -> outer -> spin, for as long as it runs.
  test::Background target({"/usr/bin/luajit", test::record_workloads_dir() + "/same_stack.lua"});
  const std::string pid = std::to_string(target.pid());
  test::CommandResult r =
      run_in_root(root, "/ljprof record -F 499 -d 1 -q -p " + pid + " --folded /tmp/stacks.folded");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  double total = 0, in_spin = 0;
  for (const FoldedStack& stack : read_folded(root + "/tmp/stacks.folded")) {
    total += stack.count;
    if (stack.rooted() && stack.line.find("outer") != std::string::npos &&
        stack.line.find("spin") != std::string::npos) {
      in_spin += stack.count;
    }
  }
  ASSERT_GT(total, 50) << r.err;
  EXPECT_GT(in_spin, 0.9 * total) << r.err;
}

}  // namespace
}  // namespace ljprof
