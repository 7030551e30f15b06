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
  t.for_each([&](uint32_t pid, std::vector<profile::Frame> frames, int64_t n) {
    seen[{pid, std::move(frames)}] = n;
  });
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_EQ((seen[{7u, a}]), 2);
  EXPECT_EQ((seen[{7u, b}]), 1);
  t.clear();
  EXPECT_EQ(t.stack_count(), 0u);
  EXPECT_EQ(t.frame_count(), 0u);
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
