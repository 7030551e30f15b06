// snapshots_by_exits on code shaped like LuaJIT's (the real traces are checked against mcofs in
// tests/walker/jit_trace_test.cc): the rules that narrow a pc between two guards' exits to the
// snapshots that may hold it, and that nothing is narrowed without the evidence they need.
#include "symbolize/trace_exits.h"

#include <gtest/gtest.h>

#include <vector>

namespace ljprof::symbolize {
namespace {

using Role = TraceInsn::Role;
constexpr uint64_t kMcode = 0x1000;

// One instruction per 4 bytes, in order.
std::vector<TraceInsn> code_of(const std::vector<std::pair<Role, uint16_t>>& insns) {
  std::vector<TraceInsn> code;
  for (const auto& [role, exit] : insns) {
    code.push_back({static_cast<uint32_t>(code.size() * 4), role, exit});
  }
  return code;
}

uint64_t pc_of(size_t index) {
  return kMcode + index * 4;
}

SnapshotSpan span_at(const std::vector<TraceInsn>& code, const std::vector<SnapshotIr>& snaps,
                     size_t index) {
  auto span = snapshots_by_exits(code, snaps, kMcode, pc_of(index));
  EXPECT_TRUE(span.ok()) << span.message();
  return span.ok() ? *span : SnapshotSpan{~0u, ~0u};
}

constexpr auto kCmp = Role::MaybeComparison;
constexpr auto kBody = Role::Body;
constexpr auto kExit = Role::Exit;

TEST(SnapshotsByExits, BetweenGuardsOfOneSnapshotIsThatSnapshot) {
  const auto code = code_of({{kExit, 1}, {kBody, 0}, {kCmp, 0}, {kExit, 1}, {kBody, 0}});
  const std::vector<SnapshotIr> snaps(3);
  const SnapshotSpan s = span_at(code, snaps, 1);
  EXPECT_EQ(s.first, 1u);
  EXPECT_EQ(s.last, 1u);
  EXPECT_EQ(span_at(code, snaps, 3).first, 1u);  // the guard branch itself
}

TEST(SnapshotsByExits, ACallBeforeTheNextSnapshotsComparisonIsTheEarlierSnapshot) {
  // exit 1, a call (Body), the compare of snapshot 2's first IR, its branch.
  const auto code = code_of({{kExit, 1}, {kBody, 0}, {kCmp, 0}, {kExit, 2}});
  std::vector<SnapshotIr> snaps(3);
  snaps[2].opens_with_comparison = true;
  const SnapshotSpan call = span_at(code, snaps, 1);
  EXPECT_EQ(call.first, 1u);
  EXPECT_EQ(call.last, 1u);
  // The compare may be either snapshot's: both stay.
  const SnapshotSpan compare = span_at(code, snaps, 2);
  EXPECT_EQ(compare.first, 1u);
  EXPECT_EQ(compare.last, 2u);
  // Without knowing that snapshot 2 opens with a comparison, the call may be its code too.
  snaps[2].opens_with_comparison = false;
  EXPECT_EQ(span_at(code, snaps, 1).last, 2u);
}

TEST(SnapshotsByExits, ALoopBodyAfterAClosingComparisonIsTheLoopsSnapshot) {
  // exit 1 closes snapshot 1 (a lone comparison); the loop body (snapshot 2, no guard); then
  // snapshot 3's comparison and its branch.
  const auto code =
      code_of({{kExit, 1}, {kCmp, 0}, {kBody, 0}, {kBody, 0}, {kCmp, 0}, {kCmp, 0}, {kExit, 3}});
  std::vector<SnapshotIr> snaps(4);
  snaps[1].closes_with_comparison = true;
  snaps[3].opens_with_comparison = true;
  const SnapshotSpan body = span_at(code, snaps, 2);
  EXPECT_EQ(body.first, 2u);
  EXPECT_EQ(body.last, 2u);
  // A reload right after the branch may still be snapshot 1's.
  EXPECT_EQ(span_at(code, snaps, 1).first, 1u);
  // The last compare may be snapshot 3's.
  EXPECT_EQ(span_at(code, snaps, 5).last, 3u);
}

TEST(SnapshotsByExits, AnUnknownExitNarrowsNothing) {
  const auto code = code_of({{kExit, 1}, {kBody, 0}, {Role::UnknownExit, 0}, {kExit, 2}});
  std::vector<SnapshotIr> snaps(3);
  snaps[2].opens_with_comparison = true;
  const SnapshotSpan s = span_at(code, snaps, 1);
  EXPECT_EQ(s.first, 1u);
  EXPECT_EQ(s.last, 2u);
}

TEST(SnapshotsByExits, EmptySnapshotsHoldNoCode) {
  const auto code = code_of({{kExit, 1}, {kBody, 0}, {kCmp, 0}, {kExit, 3}});
  std::vector<SnapshotIr> snaps(4);
  snaps[2].empty = true;
  snaps[3].opens_with_comparison = true;
  const SnapshotSpan s = span_at(code, snaps, 1);
  EXPECT_EQ(s.first, 1u);
  EXPECT_EQ(s.last, 1u);
}

TEST(SnapshotsByExits, APcOutsideTheCodeIsAnError) {
  const auto code = code_of({{kExit, 0}});
  const std::vector<SnapshotIr> snaps(1);
  EXPECT_FALSE(snapshots_by_exits(code, snaps, kMcode, kMcode - 1).ok());
  EXPECT_FALSE(snapshots_by_exits({}, snaps, kMcode, kMcode).ok());
}

}  // namespace
}  // namespace ljprof::symbolize
