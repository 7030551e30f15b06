// The recorder's stack memo gives every sample exactly the stack (and the agent counts) that
// symbolizing the whole sample gives: the oracle is SampleSymbolizer itself, run on the same
// sample, over raw frames at real code addresses of this test process (its own functions and
// libc's, named from their ELF symbols), with leaves that vary as sampled pcs do.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "record/process_context.h"
#include "record/stack_memo.h"
#include "report/frames.h"

namespace ljprof::record {
namespace {

// Code of this process: a function of the test binary and two of libc.
extern "C" __attribute__((noinline)) int ljprof_memo_test_leaf(int x) {
  return x * 3 + 1;
}

uint64_t code(const void* f, uint64_t offset) {
  return reinterpret_cast<uint64_t>(f) + offset;
}

lj_rec_frame raw(uint32_t kind, uint64_t pc, uint64_t b = 0) {
  lj_rec_frame f;
  std::memset(&f, 0, sizeof(f));
  f.kind = kind;
  f.pc = pc;
  f.b = b;
  return f;
}

lj_rec_sample sample(const std::vector<lj_rec_frame>& frames, uint32_t end) {
  lj_rec_sample s;
  std::memset(&s, 0, sizeof(s));
  s.pid = static_cast<uint32_t>(getpid());
  s.tid = s.pid;
  s.nframes = static_cast<uint32_t>(frames.size());
  s.end = end;
  s.end_pc = frames.empty() ? 0 : frames.back().pc;
  for (size_t i = 0; i < frames.size(); ++i) s.frames[i] = frames[i];
  return s;
}

// Frames as text, for a readable failure (the comparison itself is of whole frames).
std::vector<std::string> text(const std::vector<profile::Frame>& frames) {
  std::vector<std::string> out;
  for (const profile::Frame& f : frames) {
    out.push_back(fmt::format("{} kind={} file={}:{}/{} module={} +{:#x} at {:#x} trace={}",
                              report::frame_label(f), static_cast<int>(f.kind), f.file, f.line,
                              f.start_line, f.module, f.module_offset, f.address, f.trace));
  }
  return out;
}

class StackMemoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto built = build_process_context(static_cast<uint32_t>(getpid()), cache_);
    ASSERT_TRUE(built.ok()) << built.message();
    ctx_ = std::move(*built);
  }

  // The memo's answer for `s` equals the whole symbolization's (a separate symbolizer, so no
  // cache is shared with the memo's).
  void expect_same_as_whole(const lj_rec_sample& s) {
    const StackMemo::Stack& got = memo_.stack_of(s, *ctx_);
    AgentCounts want_counts{};
    SampleSymbolizer oracle;
    const std::vector<profile::Frame> want = oracle.frames(s, *ctx_, want_counts);
    const std::vector<profile::Frame> memo = stacks_.frames(*got.stack);
    const std::vector<std::string> memo_text = text(memo), want_text = text(want);
    ASSERT_EQ(memo_text.size(), want_text.size())
        << fmt::format("{}\n--\n{}", fmt::join(memo_text, "\n"), fmt::join(want_text, "\n"));
    for (size_t i = 0; i < want_text.size(); ++i) EXPECT_EQ(memo_text[i], want_text[i]) << i;
    EXPECT_EQ(memo, want);
    AgentCounts got_counts{};
    for (const auto& [id, n] : got.counted) got_counts[id] += n;
    EXPECT_EQ(got_counts, want_counts);
  }

  ObjectCache cache_;
  std::unique_ptr<ProcessContext> ctx_;
  SampleSymbolizer symbolizer_;
  StackTable stacks_;
  StackMemo memo_{symbolizer_, stacks_};
};

// Leaves at every byte of a function, under one call path: after the first, only the leaf is
// symbolized, and each stack is the whole symbolization's.
TEST_F(StackMemoTest, LeavesUnderOneCallPathReuseItsTail) {
  const std::vector<lj_rec_frame> callers = {
      raw(LJ_FRAME_NATIVE, code(reinterpret_cast<const void*>(&::strtol), 9)),
      raw(LJ_FRAME_NATIVE, code(reinterpret_cast<const void*>(&::qsort), 17)),
      raw(LJ_FRAME_NATIVE, code(reinterpret_cast<const void*>(&ljprof_memo_test_leaf), 1))};
  for (uint64_t at = 0; at < 24; ++at) {
    std::vector<lj_rec_frame> frames = {
        raw(LJ_FRAME_NATIVE, code(reinterpret_cast<const void*>(&ljprof_memo_test_leaf), at))};
    frames.insert(frames.end(), callers.begin(), callers.end());
    expect_same_as_whole(sample(frames, LJ_END_NO_CFI));
  }
  EXPECT_EQ(memo_.stats().symbolized, 1u);
  EXPECT_EQ(memo_.stats().suffix_hits, 23u);
  EXPECT_EQ(memo_.stats().units_symbolized, 4u + 23u);  // the callers once, each leaf once
  // The same samples again: whole-sample hits.
  expect_same_as_whole(
      sample({raw(LJ_FRAME_NATIVE, code(reinterpret_cast<const void*>(&ljprof_memo_test_leaf), 5)),
              callers[0], callers[1], callers[2]},
             LJ_END_NO_CFI));
  EXPECT_EQ(memo_.stats().whole_hits, 1u);
}

// Suffixes are keyed by how the walk ended too: the same frames ending elsewhere get their own
// "[unknown: ...]" frame, not a stored one.
TEST_F(StackMemoTest, TheWalksEndIsPartOfTheTail) {
  const lj_rec_frame caller =
      raw(LJ_FRAME_NATIVE, code(reinterpret_cast<const void*>(&::qsort), 5));
  for (uint32_t end : {LJ_END_ROOT, LJ_END_NO_CFI, LJ_END_READ_FAULT, LJ_END_ROOT}) {
    for (uint64_t at = 0; at < 3; ++at) {
      expect_same_as_whole(sample(
          {raw(LJ_FRAME_NATIVE, code(reinterpret_cast<const void*>(&ljprof_memo_test_leaf), at)),
           caller},
          end));
    }
  }
}

// Heads that are not a native leaf: a JIT trace leaf takes the frame after it into the head,
// and frames that fail to symbolize (no LuaJIT in this process, a Lua frame whose prototype
// the kernel could not read, a C gap) give the whole symbolization's frames and counts.
TEST_F(StackMemoTest, TraceHeadsAndUnnamedFramesMatchTheWholeSymbolization) {
  const lj_rec_frame native_caller =
      raw(LJ_FRAME_NATIVE, code(reinterpret_cast<const void*>(&::strtol), 3));
  for (uint64_t at = 0; at < 4; ++at) {
    expect_same_as_whole(sample({raw(LJ_FRAME_TRACE, 0x7f0000001000 + at, 0x5000),
                                 raw(LJ_FRAME_LUA, 0x6000, 0), native_caller},
                                LJ_END_ROOT));
    expect_same_as_whole(sample(
        {raw(LJ_FRAME_TRACE, 0x7f0000002000 + at, 0x5100),
         raw(LJ_FRAME_TRACE, 0x7f0000003000, 0x5200), raw(LJ_FRAME_LUA, 0x6000, 0), native_caller},
        LJ_END_NO_MODULE));
    expect_same_as_whole(sample(
        {raw(LJ_FRAME_NATIVE, code(reinterpret_cast<const void*>(&ljprof_memo_test_leaf), at)),
         raw(LJ_FRAME_CFUNC, 0x6100, code(reinterpret_cast<const void*>(&::strtol), 0)),
         raw(LJ_FRAME_LUA, 0x6200, 0x7000), raw(LJ_FRAME_C_GAP, 0x7ffc0000), native_caller},
        LJ_END_ROOT));
  }
}

// Recursion of varying depth through two call sites (every path a stack of its own, as a
// sampled fib makes them): a unit is symbolized once per (its frames, the frame after it, leaf
// or not), wherever the path puts it.
TEST_F(StackMemoTest, RecursionPathsShareTheirOuterFrames) {
  const lj_rec_frame site_a =
      raw(LJ_FRAME_NATIVE, code(reinterpret_cast<const void*>(&::qsort), 7));
  const lj_rec_frame site_b =
      raw(LJ_FRAME_NATIVE, code(reinterpret_cast<const void*>(&::qsort), 21));
  const lj_rec_frame root = raw(LJ_FRAME_ROOT, code(reinterpret_cast<const void*>(&::strtol), 2));
  size_t samples = 0;
  for (uint32_t path = 0; path < 64; ++path) {
    std::vector<lj_rec_frame> frames = {raw(
        LJ_FRAME_NATIVE, code(reinterpret_cast<const void*>(&ljprof_memo_test_leaf), path % 5))};
    for (uint32_t bit = 0; bit < 6; ++bit) frames.push_back(path >> bit & 1 ? site_b : site_a);
    frames.push_back(root);
    expect_same_as_whole(sample(frames, LJ_END_ROOT));
    ++samples;
  }
  // The root once (the outermost unit, with the walk's end); a call site under a call site (2 x
  // 2) or under the root (2); a leaf under a call site: 5 leaf pcs x 2 sites, and the 64 paths
  // meet all 10 pairs (path % 5 and path % 2 are path % 10).
  EXPECT_EQ(samples, 64u);
  EXPECT_EQ(memo_.stats().units_symbolized, 1u + 4u + 2u + 10u);
}

// A sample of the walk's end alone, one-frame samples; a memo cleared (the table's interval
// cut) starts again.
TEST_F(StackMemoTest, OneFrameSamplesAndClearing) {
  expect_same_as_whole(sample({}, LJ_END_NO_CFI));
  for (uint64_t at = 0; at < 3; ++at) {
    expect_same_as_whole(sample(
        {raw(LJ_FRAME_NATIVE, code(reinterpret_cast<const void*>(&ljprof_memo_test_leaf), at))},
        LJ_END_NO_CFI));
  }
  EXPECT_EQ(memo_.stats().suffix_hits, 0u);
  memo_.clear();
  stacks_.clear();
  expect_same_as_whole(
      sample({raw(LJ_FRAME_NATIVE, code(reinterpret_cast<const void*>(&ljprof_memo_test_leaf), 0))},
             LJ_END_NO_CFI));
}

}  // namespace
}  // namespace ljprof::record
