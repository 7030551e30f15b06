// Unwind tables on disk (cfi/table_cache.h): a table read back equals the one built (every row,
// FDE origin, FDE error and function range of Debian's libc, libz and the arm64 libc), and any
// damaged, foreign or other program's cache file is refused with a message, never used.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "cfi/cfi.h"
#include "cfi/table_cache.h"
#include "elf/elf_file.h"
#include "support/test_support.h"

namespace ljprof::cfi {
namespace {

std::unique_ptr<elf::ElfFile> open_elf(const std::string& path) {
  auto f = elf::ElfFile::open(path);
  EXPECT_TRUE(f.ok()) << f.message();
  return f.ok() ? std::move(*f) : nullptr;
}

void expect_same(const UnwindTable& a, const UnwindTable& b) {
  EXPECT_EQ(a.arch(), b.arch());
  EXPECT_EQ(a.section(), b.section());
  EXPECT_EQ(a.fde_count(), b.fde_count());
  ASSERT_EQ(a.rows().size(), b.rows().size());
  EXPECT_EQ(std::memcmp(a.rows().data(), b.rows().data(), a.rows().size_bytes()), 0);
  EXPECT_TRUE(std::equal(a.row_fde_offsets().begin(), a.row_fde_offsets().end(),
                         b.row_fde_offsets().begin(), b.row_fde_offsets().end()));
  ASSERT_EQ(a.fde_errors().size(), b.fde_errors().size());
  for (size_t i = 0; i < a.fde_errors().size(); ++i) {
    EXPECT_EQ(a.fde_errors()[i].message, b.fde_errors()[i].message);
    EXPECT_EQ(a.fde_errors()[i].section_offset, b.fde_errors()[i].section_offset);
  }
  // Function ranges answer alike at every row start and just before it.
  for (const lj_cfi_row& r : a.rows()) {
    for (uint64_t pc : {r.pc_start, r.pc_start - 1}) {
      EXPECT_EQ(a.function_start(pc), b.function_start(pc)) << std::hex << pc;
      EXPECT_EQ(a.function_end(pc), b.function_end(pc)) << std::hex << pc;
    }
  }
}

class TableBytes : public ::testing::TestWithParam<const char*> {};

TEST_P(TableBytes, RoundTripGivesTheBuiltTable) {
  auto file = open_elf(GetParam());
  ASSERT_NE(file, nullptr);
  auto built = build_unwind_table(*file);
  ASSERT_TRUE(built.ok()) << built.message();
  ASSERT_GT(built->rows().size(), 100u);
  auto back = UnwindTable::from_bytes(built->to_bytes());
  ASSERT_TRUE(back.ok()) << back.message();
  expect_same(*built, *back);
}

INSTANTIATE_TEST_SUITE_P(Debian, TableBytes,
                         ::testing::Values("/usr/lib/x86_64-linux-gnu/libc.so.6",
                                           "/usr/lib/x86_64-linux-gnu/libz.so.1",
                                           "/usr/aarch64-linux-gnu/lib/libc.so.6"));

// Debian's libz and its table: a small file with a few hundred rows.
class LibzTable : public ::testing::Test {
 protected:
  void SetUp() override {
    file_ = open_elf("/usr/lib/x86_64-linux-gnu/libz.so.1");
    ASSERT_NE(file_, nullptr);
    auto t = build_unwind_table(*file_);
    ASSERT_TRUE(t.ok()) << t.message();
    table_ = std::move(*t);
  }
  std::unique_ptr<elf::ElfFile> file_;
  std::optional<UnwindTable> table_;
};

class DamagedTable : public LibzTable {
 protected:
  void SetUp() override {
    LibzTable::SetUp();
    bytes_ = table_->to_bytes();
    rows_ = table_->rows().size();
  }
  // Where row i starts: arch, section, FDE count, row count, then the rows.
  size_t row_at(size_t i) const { return 1 + 1 + 8 + 8 + i * sizeof(lj_cfi_row); }
  std::vector<uint8_t> bytes_;
  size_t rows_ = 0;
};

TEST_F(DamagedTable, EveryTruncationIsRefused) {
  // Every length within the header and the last 256 bytes (function ranges, FDE errors), every
  // 13th in between (the rows).
  for (size_t n = 0; n < bytes_.size(); n += (n < 64 || n + 256 >= bytes_.size()) ? 1 : 13) {
    auto t = UnwindTable::from_bytes(std::span<const uint8_t>(bytes_).first(n));
    ASSERT_FALSE(t.ok()) << "accepted the first " << n << " of " << bytes_.size() << " bytes";
  }
}

TEST_F(DamagedTable, TrailingBytesAreRefused) {
  bytes_.push_back(0);
  auto t = UnwindTable::from_bytes(bytes_);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.message().find("after the table"), std::string::npos) << t.message();
}

TEST_F(DamagedTable, RowsOutOfOrderOrWithUnknownRulesAreRefused) {
  ASSERT_GT(rows_, 3u);
  std::vector<uint8_t> swapped = bytes_;
  std::memcpy(swapped.data() + row_at(2), bytes_.data() + row_at(1), 8);  // pc_start of row 1
  auto t = UnwindTable::from_bytes(swapped);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.message().find("table row 2"), std::string::npos) << t.message();

  std::vector<uint8_t> hint = bytes_;
  hint[row_at(1) + offsetof(lj_cfi_row, hint)] = 0xee;
  t = UnwindTable::from_bytes(hint);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.message().find("unknown hint"), std::string::npos) << t.message();

  std::vector<uint8_t> huge = bytes_;
  const uint64_t count = uint64_t{1} << 40;
  std::memcpy(huge.data() + 10, &count, sizeof count);
  t = UnwindTable::from_bytes(huge);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.message().find("exceeds the cap"), std::string::npos) << t.message();
}

class Cache : public LibzTable {
 protected:
  std::string dir() const { return tmp_.path() + "/tables"; }
  test::TempDir tmp_;
};

TEST_F(Cache, StoredTableIsReadBackPrivately) {
  TableCache cache(dir());
  ASSERT_TRUE(cache.enabled()) << "the test binary has a GNU build-id";
  EXPECT_FALSE(cache.load(*file_).has_value());
  EXPECT_EQ(cache.counts().misses, 1u);
  ASSERT_TRUE(cache.store(*file_, *table_).ok());
  struct stat st {};
  ASSERT_EQ(::stat(dir().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(::stat(cache.path_of(*file_).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_NE(cache.path_of(*file_).find(*file_->build_id()), std::string::npos);
  std::optional<UnwindTable> back = TableCache(dir()).load(*file_);
  ASSERT_TRUE(back.has_value());
  expect_same(*table_, *back);
}

TEST_F(Cache, ForeignDamagedOrOtherProgramsFilesAreNotUsed) {
  TableCache cache(dir());
  ASSERT_TRUE(cache.store(*file_, *table_).ok());
  const std::string path = cache.path_of(*file_);
  std::string why;

  ASSERT_EQ(::chmod(path.c_str(), 0666), 0);  // writable by others
  EXPECT_FALSE(TableCache(dir()).load(*file_, &why).has_value());
  EXPECT_NE(why.find("writable by no one else"), std::string::npos) << why;
  ASSERT_EQ(::chmod(path.c_str(), 0600), 0);

  ASSERT_EQ(::chown(path.c_str(), 65534, 65534), 0) << "the tests run as root";  // nobody's
  EXPECT_FALSE(TableCache(dir()).load(*file_, &why).has_value());
  EXPECT_NE(why.find("of this user"), std::string::npos) << why;
  ASSERT_EQ(::chown(path.c_str(), ::geteuid(), ::getegid()), 0);

  std::vector<uint8_t> bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto rewrite = [&](const std::vector<uint8_t>& b) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  };
  std::vector<uint8_t> other = bytes;
  other[9] ^= 1;  // the first byte of the program's build-id: another ljprof build wrote it
  rewrite(other);
  TableCache c2(dir());
  EXPECT_FALSE(c2.load(*file_, &why).has_value());
  EXPECT_NE(why.find("header"), std::string::npos) << why;
  EXPECT_EQ(c2.counts().rejected, 1u);

  rewrite(std::vector<uint8_t>(bytes.begin(), bytes.end() - 5));  // truncated
  EXPECT_FALSE(TableCache(dir()).load(*file_, &why).has_value());
  EXPECT_NE(why.find(path), std::string::npos) << why;

  // A rejected file is replaced by the next store.
  TableCache c3(dir());
  ASSERT_TRUE(c3.store(*file_, *table_).ok());
  EXPECT_TRUE(TableCache(dir()).load(*file_).has_value());
}

TEST_F(Cache, FilesNotUsedForAMonthArePrunedAtTheFirstStore) {
  namespace fs = std::filesystem;
  fs::create_directories(dir());
  auto file = [&](const std::string& name, int age_days) {
    const std::string p = dir() + "/" + name;
    std::ofstream(p) << "x";
    fs::last_write_time(p, fs::file_time_type::clock::now() - std::chrono::hours(24 * age_days));
    return p;
  };
  const std::string old_table = file("00aa-x86-64-0123456789abcdef.cfi", 40);
  const std::string old_tmp = file("00bb-x86-64-0123456789abcdef.cfi.tmp.77.1f", 40);
  const std::string recent = file("00cc-x86-64-0123456789abcdef.cfi", 3);
  const std::string other = file("notes.txt", 40);
  TableCache cache(dir());
  ASSERT_TRUE(cache.store(*file_, *table_).ok());
  EXPECT_EQ(cache.counts().pruned, 2u);
  EXPECT_FALSE(fs::exists(old_table));
  EXPECT_FALSE(fs::exists(old_tmp));
  EXPECT_TRUE(fs::exists(recent));
  EXPECT_TRUE(fs::exists(other));
  // A table read back counts as used now, whatever its age.
  fs::last_write_time(cache.path_of(*file_),
                      fs::file_time_type::clock::now() - std::chrono::hours(24 * 40));
  ASSERT_TRUE(TableCache(dir()).load(*file_).has_value());
  TableCache later(dir());
  ASSERT_TRUE(later.store(*file_, *table_).ok());
  EXPECT_EQ(later.counts().pruned, 0u);
}

// A stripped copy keeps the build-id (readelf -n shows the same) but not the .symtab the LuaJIT
// VM is found by: Debian's tarantool and its `strip --strip-all` copy build tables of different
// rows, and neither is read back for the other.
TEST_F(Cache, AStrippedCopyWithTheSameBuildIdHasATableOfItsOwn) {
  const std::string stripped = tmp_.path() + "/tarantool";
  ASSERT_EQ(test::run({"strip", "--strip-all", "-o", stripped, "/usr/bin/tarantool"}).exit_code, 0);
  auto original = open_elf("/usr/bin/tarantool");
  auto copy = open_elf(stripped);
  ASSERT_TRUE(original && copy);
  ASSERT_EQ(original->build_id(), copy->build_id());
  auto original_table = build_unwind_table(*original);
  auto copy_table = build_unwind_table(*copy);
  ASSERT_TRUE(original_table.ok() && copy_table.ok());
  TableCache cache(dir());
  EXPECT_NE(cache.path_of(*original), cache.path_of(*copy));
  ASSERT_TRUE(cache.store(*original, *original_table).ok());
  EXPECT_FALSE(TableCache(dir()).load(*copy).has_value());
  ASSERT_TRUE(cache.store(*copy, *copy_table).ok());
  auto back = TableCache(dir()).load(*copy);
  ASSERT_TRUE(back.has_value());
  expect_same(*copy_table, *back);
}

TEST_F(Cache, AnEmptyDirectoryTurnsItOff) {
  TableCache cache("");
  EXPECT_FALSE(cache.enabled());
  EXPECT_TRUE(cache.store(*file_, *table_).ok());
  EXPECT_FALSE(cache.load(*file_).has_value());
  EXPECT_EQ(cache.path_of(*file_), "");
}

}  // namespace
}  // namespace ljprof::cfi
