// core/thread_pointers.h: glibc's own thread list, read from a running process and from a core
// of tests/core/workloads/tls_threads.c (two threads joined, their stacks cached; two more and
// main that stay). Oracles: the program's own gettid() and __builtin_thread_pointer() of each
// thread and the value it gave its TLS cord_ptr; /proc/PID/task; the core's NT_PRSTATUS fs_base
// as gdb wrote it; cord_ptr's place in the TLS block by nm and readelf. (arm64: the same program
// in the arm64 VM, tests/record/record_arm64_vm_test.cc.)
#include "core/thread_pointers.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "support/test_support.h"
#include "support/tls_threads_oracle.h"

namespace ljprof {
namespace {

std::string build_tls_threads(const test::TempDir& dir) {
  const std::string exe = dir.file("tls_threads");
  const test::CommandResult cc =
      test::run({"gcc", "-O1", "-g", "-pthread", "-o", exe,
                 test::source_dir() + "/tests/core/workloads/tls_threads.c"});
  EXPECT_EQ(cc.exit_code, 0) << cc.err;
  return exe;
}

TEST(ThreadPointers, LiveProcessThreadsFromGlibcsListNotTheExitedOnes) {
  test::TempDir dir;
  const std::string exe = build_tls_threads(dir);
  test::Background process({exe}, dir.file("out"));
  ASSERT_TRUE(test::wait_for_text(dir.file("out"), "ready", 30));
  const test::TlsThreadsOutput printed = test::parse_tls_threads(test::read_text(dir.file("out")));

  auto core = core::CoreFile::from_process(static_cast<uint32_t>(process.pid()));
  ASSERT_TRUE(core.ok()) << core.message();
  auto threads = core::glibc_threads(*core);
  ASSERT_TRUE(threads.ok()) << threads.message();
  std::set<uint32_t> tasks;
  for (const auto& e :
       std::filesystem::directory_iterator("/proc/" + std::to_string(process.pid()) + "/task")) {
    tasks.insert(static_cast<uint32_t>(std::stoul(e.path().filename().string())));
  }
  for (const core::ListedThread& t : *threads) EXPECT_TRUE(tasks.count(t.tid)) << t.tid;
  test::expect_threads_as_printed(*core, *threads, printed, test::cord_ptr_tls(exe, false));
}

// The fallback for a glibc without the lists' descriptors (before 2.34): the thread control
// blocks at the top of the threads' stack mappings. Main's block lies elsewhere (not found).
TEST(ThreadPointers, LiveProcessThreadsByTheirControlBlocks) {
  test::TempDir dir;
  const std::string exe = build_tls_threads(dir);
  test::Background process({exe}, dir.file("out"));
  ASSERT_TRUE(test::wait_for_text(dir.file("out"), "ready", 30));
  test::TlsThreadsOutput printed = test::parse_tls_threads(test::read_text(dir.file("out")));
  ASSERT_EQ(printed.threads.size(), 3u);
  printed.threads.pop_back();  // main's, printed last
  auto core = core::CoreFile::from_process(static_cast<uint32_t>(process.pid()));
  ASSERT_TRUE(core.ok()) << core.message();
  auto threads = core::x86_tcb_threads(*core);
  ASSERT_TRUE(threads.ok()) << threads.message();
  test::expect_threads_as_printed(*core, *threads, printed, test::cord_ptr_tls(exe, false));
}

TEST(ThreadPointers, CoreThreadsFromGlibcsListAgreeWithTheNotes) {
  test::TempDir dir;
  const std::string exe = build_tls_threads(dir);
  const std::string core_path = dir.file("core");
  const test::CommandResult r =
      test::run({"gdb", "-nx", "-batch", "-ex", "run", "-ex", "generate-core-file " + core_path,
                 "--args", exe, "abort"});
  const test::TlsThreadsOutput printed = test::parse_tls_threads(r.out);
  auto core = core::CoreFile::open(core_path);
  ASSERT_TRUE(core.ok()) << core.message() << "\n" << r.out << r.err;
  for (const core::Thread& t : core->threads()) {
    ASSERT_TRUE(t.thread_pointer.has_value()) << "thread " << t.tid;
    EXPECT_EQ(*t.thread_pointer, t.reg("fs_base").value_or(0)) << "thread " << t.tid;
  }
  auto threads = core::glibc_threads(*core);
  ASSERT_TRUE(threads.ok()) << threads.message();
  test::expect_threads_as_printed(*core, *threads, printed, test::cord_ptr_tls(exe, false));
}

}  // namespace
}  // namespace ljprof
