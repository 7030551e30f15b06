// The recorder's stack table: a stack is stored once per (pid, frames), every distinct frame
// once, and reading a stack back gives the frames it was made of, in order.
#include <gtest/gtest.h>

#include <map>

#include "record/stack_table.h"

namespace ljprof::record {
namespace {

profile::Frame lua(const std::string& function, int64_t line) {
  profile::Frame f;
  f.kind = profile::FrameKind::Lua;
  f.function = function;
  f.file = "app.lua";
  f.line = line;
  return f;
}

profile::Frame native(const std::string& function, uint64_t address) {
  profile::Frame f;
  f.function = function;
  f.module = "/usr/lib/x86_64-linux-gnu/libc.so.6";
  f.build_id = "0123abcd";
  f.address = address;
  return f;
}

TEST(StackTable, EqualStacksShareAnEntryAndFramesAreStoredOnce) {
  StackTable t;
  const std::vector<profile::Frame> a = {lua("leaf", 3), lua("caller", 10), native("main", 0x10)};
  const std::vector<profile::Frame> b = {lua("leaf", 4), lua("caller", 10), native("main", 0x10)};
  StackTable::Entry& ea = t.entry(7, std::vector<profile::Frame>(a));
  ea.second += 2;
  StackTable::Entry& eb = t.entry(7, std::vector<profile::Frame>(b));
  eb.second += 1;
  EXPECT_EQ(&t.entry(7, std::vector<profile::Frame>(a)), &ea);  // stable, found again
  EXPECT_NE(&t.entry(8, std::vector<profile::Frame>(a)), &ea);  // another process
  EXPECT_EQ(t.stack_count(), 3u);
  EXPECT_EQ(t.frame_count(), 4u);  // leaf:3, leaf:4, caller, main
  EXPECT_EQ(t.frames(ea), a);
  EXPECT_EQ(t.frames(eb), b);
  // Only stacks with samples are visited (pid 8's has none).
  std::map<std::pair<uint32_t, std::vector<profile::Frame>>, int64_t> seen;
  t.for_each([&](profile::Sample s) { seen[{s.pid, std::move(s.frames)}] = s.count; });
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_EQ((seen[{7u, a}]), 2);
  EXPECT_EQ((seen[{7u, b}]), 1);
  t.clear();
  EXPECT_EQ(t.stack_count(), 0u);
  EXPECT_EQ(t.frame_count(), 0u);
}

// The same frames run by two fibers are two samples, each with its fiber; a fiber of id 0 is no
// fiber (the stack itself). Counts come from the test's own increments.
TEST(StackTable, FibersKeepTheirSamplesApart) {
  StackTable t;
  const std::vector<profile::Frame> a = {native("leaf", 0x10), native("main", 0x20)};
  StackTable::Entry& stack = t.entry(7, std::vector<profile::Frame>(a));
  const profile::SampleFiber one{101, "worker", ""}, two{102, "worker", ""};
  t.on_fiber(stack, one).second += 3;
  t.on_fiber(stack, two).second += 1;
  t.on_fiber(stack, one).second += 1;
  t.on_fiber(stack, {}).second += 2;
  EXPECT_EQ(&t.on_fiber(stack, {}), &stack);
  std::map<uint64_t, int64_t> by_fiber;
  t.for_each([&](profile::Sample s) {
    EXPECT_EQ(s.frames, a);
    EXPECT_EQ(s.fiber.name, s.fiber.id == 0 ? "" : "worker");
    by_fiber[s.fiber.id] += s.count;
  });
  EXPECT_EQ(by_fiber, (std::map<uint64_t, int64_t>{{0, 2}, {101, 4}, {102, 1}}));
}

TEST(StackTable, FramesDifferingInAnyFieldAreDistinct) {
  StackTable t;
  profile::Frame base = native("f", 0x10);
  std::vector<profile::Frame> variants(7, base);
  variants[1].address = 0x11;
  variants[2].build_id = "ffff";
  variants[3].module_offset = 4;
  variants[4].kind = profile::FrameKind::CFunc;
  variants[5].trace = 3;
  variants[6].file = "f.c";
  for (const profile::Frame& f : variants) t.entry(1, {f}).second += 1;
  EXPECT_EQ(t.frame_count(), variants.size());
  EXPECT_EQ(t.stack_count(), variants.size());
}

}  // namespace
}  // namespace ljprof::record
