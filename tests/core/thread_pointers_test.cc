// core/thread_pointers.h on a running process: tests/core/workloads/joined_threads.c keeps one
// thread and two joined ones' cached stacks. Oracle: the program's own gettid() of each, and
// /proc/PID/task (the threads that exist).
#include "core/thread_pointers.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <set>

#include "support/test_support.h"

namespace ljprof {
namespace {

TEST(ThreadPointers, LiveThreadsOnlyNotTheExitedOnesCachedStacks) {
  test::TempDir dir;
  const std::string exe = dir.file("joined_threads");
  const test::CommandResult cc =
      test::run({"gcc", "-O1", "-pthread", "-o", exe,
                 test::source_dir() + "/tests/core/workloads/joined_threads.c"});
  ASSERT_EQ(cc.exit_code, 0) << cc.err;
  test::Background process({exe}, dir.file("out"));
  ASSERT_TRUE(test::wait_for_text(dir.file("out"), "ready", 30));
  const std::string out = test::read_text(dir.file("out"));
  std::smatch exited, live;
  ASSERT_TRUE(std::regex_search(out, exited, std::regex(R"(exited (\d+) (\d+))"))) << out;
  ASSERT_TRUE(std::regex_search(out, live, std::regex(R"(live (\d+))"))) << out;

  auto core = core::CoreFile::from_process(static_cast<uint32_t>(process.pid()));
  ASSERT_TRUE(core.ok()) << core.message();
  auto threads = core::live_threads(*core);
  ASSERT_TRUE(threads.ok()) << threads.message();
  std::set<uint32_t> found;
  for (const core::LiveThread& t : *threads) {
    found.insert(t.tid);
    EXPECT_NE(t.thread_pointer, 0u);
  }
  std::set<uint32_t> tasks;
  for (const auto& e :
       std::filesystem::directory_iterator("/proc/" + std::to_string(process.pid()) + "/task")) {
    tasks.insert(static_cast<uint32_t>(std::stoul(e.path().filename().string())));
  }
  EXPECT_TRUE(found.count(static_cast<uint32_t>(std::stoul(live[1])))) << out;
  for (uint32_t tid : found) EXPECT_TRUE(tasks.count(tid)) << tid << " is no thread of it";
  EXPECT_FALSE(found.count(static_cast<uint32_t>(std::stoul(exited[1])))) << out;
  EXPECT_FALSE(found.count(static_cast<uint32_t>(std::stoul(exited[2])))) << out;
}

}  // namespace
}  // namespace ljprof
