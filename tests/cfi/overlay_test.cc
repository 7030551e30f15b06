// Overlays: ranges whose walker rows the caller (luajit/ for the LuaJIT VM) knows better than the
// file's CFI. Checked on Debian's libc against the table built without overlays: a Replace
// overlay owns exactly its range and the rule after it is restored, a Hint overlay keeps the
// rules and changes only the hint of Ok rows, later overlays win, and fde_row_at gives the row
// the table takes from the CFI alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "cfi/cfi.h"
#include "elf/elf_file.h"

namespace ljprof::cfi {
namespace {

const char* const kLibc = "/usr/lib/x86_64-linux-gnu/libc.so.6";

class Overlays : public ::testing::Test {
 protected:
  void SetUp() override {
    auto file = elf::ElfFile::open(kLibc);
    ASSERT_TRUE(file.ok()) << file.message();
    file_ = std::move(*file);
    auto plain = build_unwind_table(*file_);
    ASSERT_TRUE(plain.ok()) << plain.message();
    plain_ = std::move(*plain);
    // An FDE of at least 64 bytes with an Ok rule at its start, more than one row, and rows
    // before it (so that the table's edges are not what the tests look at).
    auto fdes = list_fdes(*file_, CfiSection::EhFrame);
    ASSERT_TRUE(fdes.ok()) << fdes.message();
    for (const FdeSummary& f : *fdes) {
      const lj_cfi_row* r = plain_->row_at(f.pc_begin);
      if (f.pc_end - f.pc_begin >= 64 && r != nullptr && r->hint == LJ_CFI_OK &&
          plain_->row_at(f.pc_begin - 1) != nullptr && plain_->row_at(f.pc_end - 1) != r) {
        fde_ = f;
        break;
      }
    }
    ASSERT_NE(fde_.pc_end, 0u);
  }

  Result<UnwindTable> with(std::vector<Overlay> overlays) {
    return build_unwind_table(*file_, overlays);
  }

  static bool same_rule(const lj_cfi_row& a, const lj_cfi_row& b) {
    return a.cfa_base == b.cfa_base && a.cfa_offset == b.cfa_offset && a.ra_rule == b.ra_rule &&
           a.ra_offset == b.ra_offset && a.fp_rule == b.fp_rule && a.fp_offset == b.fp_offset;
  }

  std::unique_ptr<elf::ElfFile> file_;
  std::optional<UnwindTable> plain_;
  FdeSummary fde_;
};

TEST_F(Overlays, ReplaceOwnsItsRangeAndRestoresTheRuleAfterIt) {
  const uint64_t begin = fde_.pc_begin + 16, end = fde_.pc_begin + 24;
  const lj_cfi_row stop = [] {
    lj_cfi_row r = invalid_row(0);
    r.hint = LJ_CFI_STOP;
    return r;
  }();
  auto t = with({Overlay{begin, end, "test", "test", stop}});
  ASSERT_TRUE(t.ok()) << t.message();
  // After the file's own (a libc's signal trampoline).
  ASSERT_EQ(t->overlays().size(), plain_->overlays().size() + 1);
  EXPECT_EQ(t->overlays().back().what, "test");
  for (uint64_t pc = begin; pc < end; ++pc) {
    ASSERT_EQ(t->row_at(pc)->hint, LJ_CFI_STOP) << std::hex << pc;
    EXPECT_EQ(t->row_at(pc)->pc_start, begin);
  }
  EXPECT_EQ(t->row_fde_offsets()[t->row_at(begin) - t->rows().data()], UINT64_MAX);
  for (uint64_t pc : {fde_.pc_begin, begin - 1, end, fde_.pc_end - 1}) {
    const lj_cfi_row* want = plain_->row_at(pc);
    const lj_cfi_row* got = t->row_at(pc);
    EXPECT_EQ(got->hint, want->hint) << std::hex << pc;
    EXPECT_TRUE(same_rule(*got, *want)) << std::hex << pc;
  }
  EXPECT_EQ(t->row_at(end)->pc_start, end);
}

TEST_F(Overlays, HintKeepsTheRulesOfOkRowsOnly) {
  Overlay keep;
  keep.kind = Overlay::Kind::Hint;
  keep.begin = fde_.pc_begin;
  keep.end = fde_.pc_end;
  keep.row.hint = LJ_CFI_KEEP;
  auto t = with({keep});
  ASSERT_TRUE(t.ok()) << t.message();
  for (uint64_t pc = fde_.pc_begin; pc < fde_.pc_end; ++pc) {
    const lj_cfi_row* want = plain_->row_at(pc);
    const lj_cfi_row* got = t->row_at(pc);
    EXPECT_TRUE(same_rule(*got, *want)) << std::hex << pc;
    EXPECT_EQ(got->hint, want->hint == LJ_CFI_OK ? LJ_CFI_KEEP : want->hint) << std::hex << pc;
  }
  EXPECT_EQ(t->row_at(fde_.pc_end)->hint, plain_->row_at(fde_.pc_end)->hint);
  EXPECT_EQ(t->row_at(fde_.pc_begin - 1)->hint, plain_->row_at(fde_.pc_begin - 1)->hint);
}

TEST_F(Overlays, LaterOverlaysWin) {
  const lj_cfi_row first = sp_row(8, LJ_CFI_RULE_SAME, 0, LJ_CFI_OK);
  const lj_cfi_row second = sp_row(16, LJ_CFI_RULE_SAME, 0, LJ_CFI_OK);
  auto t = with({Overlay{fde_.pc_begin, fde_.pc_begin + 8, "a", "test", first},
                 Overlay{fde_.pc_begin + 4, fde_.pc_begin + 12, "b", "test", second}});
  ASSERT_TRUE(t.ok()) << t.message();
  EXPECT_EQ(t->row_at(fde_.pc_begin)->cfa_offset, 8);
  EXPECT_EQ(t->row_at(fde_.pc_begin + 4)->cfa_offset, 16);
  EXPECT_EQ(t->row_at(fde_.pc_begin + 11)->cfa_offset, 16);
  EXPECT_TRUE(same_rule(*t->row_at(fde_.pc_begin + 12), *plain_->row_at(fde_.pc_begin + 12)));
}

TEST_F(Overlays, FdeRowAtIsTheTablesRowWithoutOverlays) {
  // Each call scans the section again: a hundred-odd rows spread over the table (ASan: 4 s).
  const size_t step = std::max<size_t>(1, plain_->rows().size() / 120);
  int checked = 0;
  for (size_t i = 0; i + 1 < plain_->rows().size(); i += step) {
    const lj_cfi_row& row = plain_->rows()[i];
    auto at = fde_row_at(*file_, row.pc_start);
    ASSERT_TRUE(at.ok()) << at.message();
    if (plain_->row_fde_offsets()[i] == UINT64_MAX) {
      EXPECT_FALSE(at->has_value()) << std::hex << row.pc_start;  // a gap between FDEs
      continue;
    }
    ASSERT_TRUE(at->has_value()) << std::hex << row.pc_start;
    EXPECT_EQ((*at)->row.hint, row.hint) << std::hex << row.pc_start;
    EXPECT_TRUE(same_rule((*at)->row, row)) << std::hex << row.pc_start;
    EXPECT_EQ(plain_->function_start(row.pc_start), (*at)->fde_begin);
    EXPECT_EQ(plain_->function_end(row.pc_start), (*at)->fde_end);
    ++checked;
  }
  EXPECT_GT(checked, 60);
}

}  // namespace
}  // namespace ljprof::cfi
