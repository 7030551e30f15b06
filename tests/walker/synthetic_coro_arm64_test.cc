// A switched-out fiber's native stack on AArch64 (CoreWalker::walk_fiber), on a core no package
// can give: Debian has no arm64 Tarantool, so workloads/coro_switch_arm64.c switches contexts
// the way Tarantool's third_party/coro/coro.c does on AArch64 (its saved-word order and its
// coro_startup root, written there from that file's rules), runs under qemu-aarch64 and aborts.
// Oracles: the return address each level of the suspended coroutine printed for itself
// (__builtin_return_address), the function containing the resume point by the cross binutils'
// nm, and the saved-context addresses the program printed.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "core/core_walk.h"
#include "support/test_support.h"

namespace ljprof {
namespace {

namespace fs = std::filesystem;

uint64_t printed(const std::string& out, const std::string& label) {
  std::smatch m;
  if (!std::regex_search(out, m, std::regex(label + " (0x[0-9a-f]+)"))) {
    ADD_FAILURE() << "the program printed no \"" << label << "\":\n" << out;
    return 0;
  }
  return std::stoull(m[1].str(), nullptr, 16);
}

// [value, value + size) of `function` in `binary`, by aarch64-linux-gnu-nm -S.
std::pair<uint64_t, uint64_t> nm_range(const std::string& binary, const std::string& function) {
  const test::CommandResult r = test::run({"aarch64-linux-gnu-nm", "-S", binary});
  std::smatch m;
  if (!std::regex_search(r.out, m, std::regex("([0-9a-f]+) ([0-9a-f]+) [tT] " + function + "\n"))) {
    ADD_FAILURE() << "nm shows no sized " << function << ":\n" << r.out << r.err;
    return {0, 0};
  }
  const uint64_t value = std::stoull(m[1].str(), nullptr, 16);
  return {value, value + std::stoull(m[2].str(), nullptr, 16)};
}

class SyntheticCoroArm64 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    exe_ = dir_->file("coro_switch_arm64");
    const test::CommandResult cc =
        test::run({"aarch64-linux-gnu-gcc", "-O1", "-g", "-o", exe_,
                   test::source_dir() + "/tests/walker/workloads/coro_switch_arm64.c"});
    ASSERT_EQ(cc.exit_code, 0) << cc.err;
    const test::CommandResult r = test::run(
        {"env", "-C", dir_->path(), "bash", "-c",
         "ulimit -c unlimited; exec qemu-aarch64-static -L /usr/aarch64-linux-gnu \"$0\"", exe_});
    out_ = r.out;
    for (const auto& e : fs::directory_iterator(dir_->path())) {
      if (e.path().extension() == ".core") core_path_ = e.path();
    }
    ASSERT_FALSE(core_path_.empty()) << "no core\n" << r.out << r.err;
  }
  static void TearDownTestSuite() { dir_.reset(); }

  // The walk from the context saved at the `label` sp the program printed.
  core::ThreadStack walk(const std::string& label) {
    core_ = core::CoreFile::open(core_path_, {{"/usr/aarch64-linux-gnu"}, exe_});
    EXPECT_TRUE(core_->ok()) << core_->message();
    if (!core_->ok()) return {};
    walker_ = core::CoreWalker::create(**core_);
    EXPECT_TRUE(walker_->ok()) << walker_->message();
    if (!walker_->ok()) return {};
    core::FiberName fiber;
    fiber.id = 101;
    fiber.saved_sp = printed(out_, label + " sp");
    auto stack = (**walker_)->walk_fiber(fiber);
    EXPECT_TRUE(stack.ok()) << stack.message();
    return stack.ok() ? *stack : core::ThreadStack{};
  }

  // The load bias of the executable (PIE) in the core.
  uint64_t bias() const { return printed(out_, "coro_startup") - nm_range_unsized("coro_startup"); }
  uint64_t nm_range_unsized(const std::string& function) const {
    const test::CommandResult r = test::run({"aarch64-linux-gnu-nm", exe_});
    std::smatch m;
    if (!std::regex_search(r.out, m, std::regex("([0-9a-f]+) T " + function + "\n"))) return 0;
    return std::stoull(m[1].str(), nullptr, 16);
  }

  static inline std::unique_ptr<test::TempDir> dir_ = std::make_unique<test::TempDir>();
  static inline std::string exe_, out_, core_path_;
  std::optional<Result<core::CoreFile>> core_;
  std::optional<Result<std::unique_ptr<core::CoreWalker>>> walker_;
};

TEST_F(SyntheticCoroArm64, SuspendedCoroutineWalksThroughItsCallersToCoroStartup) {
  const core::ThreadStack stack = walk("suspended");
  ASSERT_TRUE(stack.reached_root) << stack.end;
  std::string frames;
  for (const symbolize::Frame& f : stack.frames) {
    frames += fmt::format("  {:#x} {}+{:#x}\n", f.pc, f.symbol, f.symbol_offset);
  }
  ASSERT_EQ(stack.frames.size(), 4u) << frames;
  const uint64_t b = bias();
  // Frame 0 resumes in depth3, after its call of coro_transfer.
  const auto [begin3, end3] = nm_range(exe_, "depth3");
  EXPECT_GE(stack.frames[0].pc, b + begin3) << frames;
  EXPECT_LT(stack.frames[0].pc, b + end3) << frames;
  EXPECT_EQ(stack.frames[0].symbol, "depth3") << frames;
  // Each caller at the return address its callee printed.
  EXPECT_EQ(stack.frames[1].pc, printed(out_, "ra depth3")) << frames;
  EXPECT_EQ(stack.frames[1].symbol, "depth2") << frames;
  EXPECT_EQ(stack.frames[2].pc, printed(out_, "ra depth2")) << frames;
  EXPECT_EQ(stack.frames[2].symbol, "depth1") << frames;
  EXPECT_EQ(stack.frames[3].pc, printed(out_, "ra depth1")) << frames;
  EXPECT_EQ(stack.frames[3].symbol, "coro_startup") << frames;
}

TEST_F(SyntheticCoroArm64, NeverRunCoroutineIsItsCoroStartupRootAlone) {
  const core::ThreadStack stack = walk("never-run");
  ASSERT_TRUE(stack.reached_root) << stack.end;
  ASSERT_EQ(stack.frames.size(), 1u);
  EXPECT_EQ(stack.frames[0].pc, printed(out_, "coro_startup"));
  EXPECT_EQ(stack.frames[0].symbol, "coro_startup");
}

TEST_F(SyntheticCoroArm64, MisalignedSavedSpFailsClosed) {
  (void)walk("never-run");
  ASSERT_TRUE(walker_ && walker_->ok());
  core::FiberName fiber;
  fiber.id = 7;
  fiber.saved_sp = printed(out_, "suspended sp") + 8;
  auto stack = (**walker_)->walk_fiber(fiber);
  ASSERT_FALSE(stack.ok());
  EXPECT_NE(stack.message().find("misaligned"), std::string::npos) << stack.message();
}

}  // namespace
}  // namespace ljprof
