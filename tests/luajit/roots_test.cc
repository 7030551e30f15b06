// Synthetic stack roots: only the exact Tarantool arm64 `coro_startup` trampoline becomes Stop
// without CFI; CFI roots (DW_CFA_undefined RA) become Stop; coro_transfer (no FDE) stays
// Invalid. Synthetic ELF fixtures are assembled here with binutils; symbol addresses come
// from nm.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <regex>

#include "cfi/cfi.h"
#include "elf/elf_file.h"
#include "luajit/vm_cfi.h"
#include "support/test_support.h"

namespace ljprof::luajit {
namespace {

using cfi::UnwindTable;

// The table the walker gets: the file's CFI with the overlays of luajit::unwind_overlays.
Result<UnwindTable> build_unwind_table(const elf::ElfFile& file) {
  return cfi::build_unwind_table(file, unwind_overlays(file).overlays);
}

using test::TempDir;

// Assembles `source` with the given toolchain prefix into an executable (or, with `shared`,
// a stripped shared object that keeps only .dynsym).
std::string build(const TempDir& dir, const std::string& name, const std::string& prefix,
                  const std::string& source, bool shared = false) {
  std::string s = dir.path() + "/" + name + ".s", o = dir.path() + "/" + name + ".o";
  std::string out = dir.path() + "/" + name;
  std::ofstream(s) << source;
  auto as = test::run({prefix + "as", "-o", o, s});
  EXPECT_EQ(as.exit_code, 0) << as.err;
  auto ld = shared ? test::run({prefix + "ld", "-shared", "-o", out, o})
                   : test::run({prefix + "ld", "-e", "entry", "-o", out, o});
  EXPECT_EQ(ld.exit_code, 0) << ld.err;
  if (shared) {
    auto st = test::run({prefix + "strip", "--strip-all", out});
    EXPECT_EQ(st.exit_code, 0) << st.err;
  }
  return out;
}

uint64_t nm_address(const std::string& nm, const std::string& file, const std::string& symbol,
                    bool dynamic = false) {
  auto r = dynamic ? test::run({nm, "-D", file}) : test::run({nm, file});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::smatch m;
  if (!std::regex_search(r.out, m, std::regex("([0-9a-f]+) [TtW] " + symbol + "\n"))) {
    ADD_FAILURE() << symbol << " not in nm output of " << file;
    return 0;
  }
  return std::stoull(m[1], nullptr, 16);
}

// Rows marked Stop without coming from an FDE (i.e. synthetic roots).
std::vector<uint64_t> synthetic_stops(const UnwindTable& t) {
  std::vector<uint64_t> out;
  for (size_t i = 0; i < t.rows().size(); ++i) {
    if (t.rows()[i].hint == LJ_CFI_STOP && t.row_fde_offsets()[i] == UINT64_MAX) {
      out.push_back(t.rows()[i].pc_start);
    }
  }
  return out;
}

Result<UnwindTable> table_of(const std::string& path) {
  auto file = elf::ElfFile::open(path);
  if (!file.ok()) return file.error();
  return build_unwind_table(**file);
}

const char* const kA64 = "aarch64-linux-gnu-";
const std::string kExactBody =
    " mov x0, x20\n"
    " blr x19\n"
    " b abort_stub\n";
const std::string kPrelude =
    ".text\n.global entry\nentry:\n b coro_startup\nabort_stub:\n brk #0\n";

TEST(SyntheticRoots, ExactCoroStartupOnAArch64IsStop) {
  TempDir dir;
  std::string elf = build(dir, "exact", kA64,
                          kPrelude +
                              ".global coro_startup\n.type coro_startup,%function\n"
                              "coro_startup:\n" +
                              kExactBody + " nop\n");
  uint64_t at = nm_address("aarch64-linux-gnu-nm", elf, "coro_startup");
  auto table = table_of(elf);
  ASSERT_TRUE(table.ok()) << table.message();
  ASSERT_EQ(synthetic_stops(*table), std::vector<uint64_t>{at});
  for (uint64_t pc = at; pc < at + 12; ++pc) EXPECT_EQ(table->row_at(pc)->hint, LJ_CFI_STOP);
  // The row after the 12 bytes restores what was there before (no CFI here: Invalid).
  EXPECT_EQ(table->row_at(at + 12)->hint, LJ_CFI_INVALID);
  EXPECT_EQ(table->row_at(at + 12)->pc_start, at + 12);
}

TEST(SyntheticRoots, OneInstructionDifferentIsNotMarked) {
  TempDir dir;
  std::string elf = build(dir, "differ", kA64,
                          kPrelude +
                              ".global coro_startup\ncoro_startup:\n mov x0, x21\n"
                              " blr x19\n b abort_stub\n");
  auto table = table_of(elf);
  ASSERT_TRUE(table.ok()) << table.message();
  EXPECT_TRUE(synthetic_stops(*table).empty());
  std::string elf2 = build(dir, "differ2", kA64,
                           kPrelude +
                               ".global coro_startup\ncoro_startup:\n mov x0, x20\n"
                               " blr x19\n bl abort_stub\n");
  auto table2 = table_of(elf2);
  ASSERT_TRUE(table2.ok()) << table2.message();
  EXPECT_TRUE(synthetic_stops(*table2).empty());
}

TEST(SyntheticRoots, SameBytesUnderAnotherNameAreNotMarked) {
  TempDir dir;
  std::string elf = build(dir, "renamed", kA64,
                          ".text\n.global entry\nentry:\n b coro_startup_\nabort_stub:\n brk #0\n"
                          ".global coro_startup_\ncoro_startup_:\n" +
                              kExactBody);
  auto table = table_of(elf);
  ASSERT_TRUE(table.ok()) << table.message();
  EXPECT_TRUE(synthetic_stops(*table).empty());
}

TEST(SyntheticRoots, DynsymOnlyCoroStartupIsNotMarked) {
  TempDir dir;
  std::string so = build(dir, "dynsym.so", kA64,
                         ".text\nabort_stub:\n brk #0\n.global coro_startup\n"
                         ".type coro_startup,%function\ncoro_startup:\n" +
                             kExactBody,
                         /*shared=*/true);
  auto file = elf::ElfFile::open(so);
  ASSERT_TRUE(file.ok()) << file.message();
  ASSERT_FALSE((*file)->has_symbol_table(elf::SymbolTable::Symtab));
  nm_address("aarch64-linux-gnu-nm", so, "coro_startup", /*dynamic=*/true);
  auto table = build_unwind_table(**file);
  ASSERT_TRUE(table.ok()) << table.message();
  EXPECT_TRUE(synthetic_stops(*table).empty());
}

TEST(SyntheticRoots, X86ElfWithTheNameAndBytesIsNotMarked) {
  TempDir dir;
  std::string elf = build(dir, "x86", "",
                          ".text\n.global entry\nentry:\n ret\n.global coro_startup\n"
                          "coro_startup:\n .long 0xaa1403e0, 0xd63f0260, 0x17ffffff\n");
  auto table = table_of(elf);
  ASSERT_TRUE(table.ok()) << table.message();
  EXPECT_TRUE(synthetic_stops(*table).empty());
}

TEST(RealRoots, DebianArm64LuajitHasNoSyntheticRoot) {
  for (const std::string rel :
       {"arm64/usr/bin/luajit", "arm64/usr/lib/aarch64-linux-gnu/libluajit-5.1.so.2"}) {
    auto table = table_of(test::fixture(rel));
    ASSERT_TRUE(table.ok()) << table.message();
    EXPECT_TRUE(synthetic_stops(*table).empty()) << rel;
  }
}

// Tarantool x86-64: coro_init's FDE ends with DW_CFA_undefined rip -> Stop there; coro_transfer
// has no FDE -> Invalid; _start -> Stop.
TEST(RealRoots, TarantoolCoroInitStopCoroTransferInvalid) {
  auto file = elf::ElfFile::open("/usr/bin/tarantool");
  ASSERT_TRUE(file.ok());
  auto table = build_unwind_table(**file);
  ASSERT_TRUE(table.ok()) << table.message();
  auto nm = test::run({"nm", "-S", "/usr/bin/tarantool"});
  auto sym = [&](const std::string& name) {
    std::smatch m;
    EXPECT_TRUE(std::regex_search(nm.out, m,
                                  std::regex("([0-9a-f]+) (?:([0-9a-f]+) )?[Tt] " + name + "\n")))
        << name;
    return std::pair<uint64_t, uint64_t>(std::stoull(m[1], nullptr, 16),
                                         m[2].matched ? std::stoull(m[2], nullptr, 16) : 0);
  };
  auto [init, init_size] = sym("coro_init");
  auto [transfer, transfer_size] = sym("coro_transfer");
  (void)transfer_size;
  bool stop_in_init = false;
  for (uint64_t pc = init; pc < init + init_size; ++pc)
    stop_in_init |= table->row_at(pc)->hint == LJ_CFI_STOP;
  EXPECT_TRUE(stop_in_init);
  EXPECT_EQ(table->row_at(init)->hint, LJ_CFI_OK);  // before DW_CFA_undefined rip
  for (uint64_t pc = transfer; pc < init; ++pc) {
    EXPECT_EQ(table->row_at(pc)->hint, LJ_CFI_INVALID) << std::hex << pc;
  }
  EXPECT_EQ(table->row_at((*file)->entry())->hint, LJ_CFI_STOP);  // _start
  EXPECT_TRUE(synthetic_stops(*table).empty());
}

}  // namespace
}  // namespace ljprof::luajit
