// ElfFile against binutils: for every real binary of the matrix, our sections, program headers,
// build-id and every symbol of both tables must equal what `readelf -W -S -l -s -n` prints.
#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "elf/elf_file.h"
#include "support/test_support.h"

namespace ljprof::elf {
namespace {

using test::run;

struct ReadelfSymbol {
  uint64_t value = 0;
  uint64_t size = 0;
  std::string type, bind, ndx, name;
};

struct ReadelfSection {
  std::string name, type;
  uint64_t addr = 0, offset = 0, size = 0, entsize = 0;
  uint32_t link = 0, info = 0;
};

struct ReadelfSegment {
  std::string type;
  uint64_t offset = 0, vaddr = 0, filesz = 0, memsz = 0;
};

// What readelf printed, parsed. Tables are keyed by name (".symtab"/".dynsym").
struct ReadelfView {
  std::map<std::string, std::vector<ReadelfSymbol>> symbols;
  std::vector<ReadelfSection> sections;  // index 0 omitted (it has no name column)
  std::vector<ReadelfSegment> segments;
  std::string build_id;
};

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

ReadelfView readelf(const std::string& path) {
  ReadelfView view;
  test::CommandResult r = run({"readelf", "-W", "-S", "-l", "-s", "-n", path});
  EXPECT_EQ(r.exit_code, 0) << r.err;

  static const std::regex table_re(R"(^Symbol table '([^']+)' contains (\d+) entr)");
  static const std::regex sym_re(
      R"(^\s*(\d+):\s+([0-9a-f]+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s?(.*)$)");
  static const std::regex sec_re(R"(^\s*\[\s*(\d+)\]\s+(.*)$)");
  static const std::regex seg_re(
      R"(^\s+([A-Z_]+[A-Za-z_+0-9]*)\s+0x([0-9a-f]+)\s+0x([0-9a-f]+)\s+0x([0-9a-f]+)\s+0x([0-9a-f]+)\s+0x([0-9a-f]+)\s)");
  static const std::regex build_id_re(R"(Build ID: ([0-9a-f]+))");

  std::string table;
  for (const std::string& line : lines_of(r.out)) {
    std::smatch m;
    if (std::regex_search(line, m, table_re)) {
      table = m[1];
      view.symbols[table];
      continue;
    }
    if (!table.empty() && std::regex_match(line, m, sym_re)) {
      ReadelfSymbol s;
      s.value = std::stoull(m[2], nullptr, 16);
      s.size = std::stoull(m[3], nullptr, 0);
      s.type = m[4];
      s.bind = m[5];
      s.ndx = m[7];
      s.name = m[8];
      view.symbols[table].push_back(s);
      continue;
    }
    if (std::regex_match(line, m, sec_re) && m[1] != "0") {
      // Name Type Address Off Size ES [Flg] Lk Inf Al — Flg is omitted when empty.
      std::istringstream fields(m[2]);
      std::vector<std::string> f;
      for (std::string tok; fields >> tok;) f.push_back(tok);
      if (f.size() != 9 && f.size() != 10) continue;
      const size_t lk = f.size() - 3;
      ReadelfSection s;
      s.name = f[0];
      s.type = f[1];
      s.addr = std::stoull(f[2], nullptr, 16);
      s.offset = std::stoull(f[3], nullptr, 16);
      s.size = std::stoull(f[4], nullptr, 16);
      s.entsize = std::stoull(f[5], nullptr, 16);
      s.link = static_cast<uint32_t>(std::stoul(f[lk]));
      s.info = static_cast<uint32_t>(std::stoul(f[lk + 1]));
      view.sections.push_back(s);
      continue;
    }
    if (std::regex_search(line, m, seg_re)) {
      ReadelfSegment s;
      s.type = m[1];
      s.offset = std::stoull(m[2], nullptr, 16);
      s.vaddr = std::stoull(m[3], nullptr, 16);
      s.filesz = std::stoull(m[5], nullptr, 16);
      s.memsz = std::stoull(m[6], nullptr, 16);
      view.segments.push_back(s);
      continue;
    }
    if (std::regex_search(line, m, build_id_re)) view.build_id = m[1];
  }
  return view;
}

const char* type_text(uint8_t type) {
  switch (type) {
    case 0:
      return "NOTYPE";
    case 1:
      return "OBJECT";
    case 2:
      return "FUNC";
    case 3:
      return "SECTION";
    case 4:
      return "FILE";
    case 5:
      return "COMMON";
    case 6:
      return "TLS";
    case 10:
      return "IFUNC";
    default:
      return "?";
  }
}

const char* bind_text(uint8_t bind) {
  switch (bind) {
    case 0:
      return "LOCAL";
    case 1:
      return "GLOBAL";
    case 2:
      return "WEAK";
    case 10:
      return "UNIQUE";
    default:
      return "?";
  }
}

std::string ndx_text(uint16_t shndx) {
  if (shndx == 0) return "UND";
  if (shndx == 0xfff1) return "ABS";
  if (shndx == 0xfff2) return "COM";
  return std::to_string(shndx);
}

// readelf appends symbol versions to .dynsym names ("pow@GLIBC_2.29 (3)", "x@@V"): compare the
// bare name when ours has no '@'.
bool same_name(std::string_view ours, const std::string& theirs) {
  if (ours == theirs) return true;
  if (ours.find('@') != std::string_view::npos) return false;
  std::string bare = theirs.substr(0, theirs.find('@'));
  return ours == bare;
}

class RealBinaryTest : public ::testing::TestWithParam<test::RealBinary> {};

}  // namespace
}  // namespace ljprof::elf

namespace ljprof::test {
void PrintTo(const RealBinary& bin, std::ostream* os) {
  *os << bin.path;
}
}  // namespace ljprof::test

namespace ljprof::elf {
namespace {

TEST_P(RealBinaryTest, MatchesReadelf) {
  const std::string& path = GetParam().path;
  ASSERT_TRUE(test::file_exists(path)) << path << " missing: run scripts/bootstrap";
  auto opened = ElfFile::open(path);
  ASSERT_TRUE(opened.ok()) << opened.message();
  const ElfFile& file = **opened;
  ReadelfView want = readelf(path);

  // Sections (readelf prints all but the null section 0 with a name column).
  ASSERT_EQ(want.sections.size() + 1, file.sections().size());
  for (size_t i = 0; i < want.sections.size(); ++i) {
    const Section& got = file.sections()[i + 1];
    const ReadelfSection& w = want.sections[i];
    EXPECT_EQ(got.name, w.name) << "section " << i + 1;
    EXPECT_EQ(got.addr, w.addr) << w.name;
    EXPECT_EQ(got.offset, w.offset) << w.name;
    EXPECT_EQ(got.size, w.size) << w.name;
    EXPECT_EQ(got.entsize, w.entsize) << w.name;
    EXPECT_EQ(got.link, w.link) << w.name;
    EXPECT_EQ(got.info, w.info) << w.name;
    const Section* by_name = file.section(w.name);
    ASSERT_NE(by_name, nullptr) << w.name;
  }

  // Program headers and address -> file offset through PT_LOAD.
  ASSERT_EQ(want.segments.size(), file.segments().size());
  size_t loads = 0;
  for (size_t i = 0; i < want.segments.size(); ++i) {
    const Segment& got = file.segments()[i];
    const ReadelfSegment& w = want.segments[i];
    EXPECT_EQ(got.offset, w.offset) << w.type;
    EXPECT_EQ(got.vaddr, w.vaddr) << w.type;
    EXPECT_EQ(got.filesz, w.filesz) << w.type;
    EXPECT_EQ(got.memsz, w.memsz) << w.type;
    if (w.type != "LOAD") continue;
    ++loads;
    EXPECT_EQ(got.type, 1u);
    if (w.filesz == 0) continue;
    auto off = file.file_offset(w.vaddr + w.filesz - 1);
    ASSERT_TRUE(off.ok()) << off.message();
    EXPECT_EQ(*off, w.offset + w.filesz - 1);
  }
  EXPECT_GT(loads, 0u);

  // Build-id.
  ASSERT_TRUE(file.build_id().has_value());
  EXPECT_EQ(*file.build_id(), want.build_id);

  // Every symbol of both tables, in order.
  size_t compared = 0;
  for (SymbolTable table : {SymbolTable::Symtab, SymbolTable::Dynsym}) {
    const std::string name = symbol_table_name(table);
    auto it = want.symbols.find(name);
    EXPECT_EQ(file.has_symbol_table(table), it != want.symbols.end()) << name;
    if (it == want.symbols.end()) continue;
    std::vector<const Symbol*> ours;
    for (const Symbol& s : file.symbols()) {
      if (s.table == table) ours.push_back(&s);
    }
    ASSERT_EQ(ours.size(), it->second.size()) << name;
    for (size_t i = 0; i < ours.size(); ++i) {
      const Symbol& got = *ours[i];
      const ReadelfSymbol& w = it->second[i];
      ASSERT_EQ(got.index, i);
      // readelf shows an unnamed STT_SECTION symbol by its section's name.
      std::string_view shown = got.name;
      if (got.name.empty() && got.type == 3 && got.shndx < file.sections().size()) {
        shown = file.sections()[got.shndx].name;
      }
      EXPECT_TRUE(same_name(shown, w.name))
          << name << "[" << i << "]: " << got.name << " vs " << w.name;
      EXPECT_EQ(got.value, w.value) << got.name;
      EXPECT_EQ(got.size, w.size) << got.name;
      EXPECT_EQ(type_text(got.type), w.type) << got.name;
      EXPECT_EQ(bind_text(got.bind), w.bind) << got.name;
      EXPECT_EQ(ndx_text(got.shndx), w.ndx) << got.name;
      ++compared;
    }
  }
  EXPECT_GT(compared, 0u);
  RecordProperty("symbols_compared", static_cast<int>(compared));
}

// find_symbol and symbol_at agree with readelf's view of defined functions: every defined FUNC
// with a size is found by name (first definition wins) and contains its own start and last byte.
TEST_P(RealBinaryTest, LookupsAgreeWithReadelf) {
  const std::string& path = GetParam().path;
  auto opened = ElfFile::open(path);
  ASSERT_TRUE(opened.ok()) << opened.message();
  const ElfFile& file = **opened;
  ReadelfView want = readelf(path);
  size_t checked = 0;
  for (const auto& [table, syms] : want.symbols) {
    for (const ReadelfSymbol& w : syms) {
      if (w.type != "FUNC" || w.ndx == "UND" || w.size == 0) continue;
      for (uint64_t addr : {w.value, w.value + w.size - 1}) {
        const Symbol* hit = file.symbol_at(addr);
        ASSERT_NE(hit, nullptr) << w.name << " @" << std::hex << addr;
        EXPECT_TRUE(addr >= hit->value && addr - hit->value < std::max<uint64_t>(hit->size, 1))
            << w.name << " -> " << hit->name;
      }
      const Symbol* by_name = file.find_symbol(w.name.substr(0, w.name.find('@')));
      if (w.name.find('@') == std::string::npos) {
        ASSERT_NE(by_name, nullptr) << w.name;
        EXPECT_TRUE(by_name->defined());
      }
      auto bytes = file.read(w.value, w.size);
      EXPECT_TRUE(bytes.ok()) << w.name << ": " << bytes.message();
      ++checked;
    }
  }
  EXPECT_GT(checked, 0u);
}

// AArch64 mapping symbols ($x, $d: where code and data start, readelf lists them as NOTYPE
// LOCAL) are not labels: no address of the binary is named after one. At an address where
// readelf shows a mapping symbol and a sized function, the function names it. The LuaJIT
// matrix's arm64 builds keep them (Debian's packages are stripped of .symtab).
void expect_no_mapping_symbol_names(const std::string& path) {
  auto opened = ElfFile::open(path);
  ASSERT_TRUE(opened.ok()) << opened.message();
  const ElfFile& file = **opened;
  static const std::regex mapping_re(R"(^\$[xd](\..*)?$)");
  std::map<uint64_t, std::string> function_at;  // readelf: sized FUNC symbols by address
  std::vector<uint64_t> mapping_at;
  for (const auto& [table, syms] : readelf(path).symbols) {
    for (const ReadelfSymbol& w : syms) {
      if (w.ndx == "UND") continue;
      if (std::regex_match(w.name, mapping_re)) mapping_at.push_back(w.value);
      if (w.type == "FUNC" && w.size > 0) function_at.emplace(w.value, w.name);
    }
  }
  ASSERT_FALSE(mapping_at.empty()) << path << " has no mapping symbols";
  size_t named_by_function = 0;
  for (uint64_t addr : mapping_at) {
    const Symbol* hit = file.symbol_at(addr);
    if (hit != nullptr) {
      EXPECT_FALSE(std::regex_match(std::string(hit->name), mapping_re))
          << std::hex << addr << " -> " << hit->name;
    }
    if (function_at.count(addr) != 0) {
      ASSERT_NE(hit, nullptr) << std::hex << addr;
      EXPECT_EQ(hit->value, addr) << function_at[addr] << " -> " << hit->name;
      ++named_by_function;
    }
  }
  EXPECT_GT(named_by_function, 0u) << path;
}

TEST(ElfSymbols, NoAddressIsNamedAfterAnAArch64MappingSymbol) {
  for (const char* build :
       {"matrix/luajit-arm64-clang-O2/luajit", "matrix/tarantool-arm64-gcc-O2/luajit"}) {
    SCOPED_TRACE(build);
    expect_no_mapping_symbol_names(test::fixture(build));
  }
}

// Assembly entry points without .size (Debian tarantool's coro_transfer, GCC's split-off cold
// parts, LuaJIT's bytecode handlers) name the code up to the next symbol of their section, as
// gdb's `info symbol` does: each zero-size FUNC/NOTYPE of .text that readelf lists, one byte in
// (when no other symbol starts there or at that byte), is named as gdb names it.
TEST(ElfSymbols, UnsizedCodeSymbolsNameTheirCodeAsGdbDoes) {
  const std::string path = "/usr/bin/tarantool";
  auto opened = ElfFile::open(path);
  ASSERT_TRUE(opened.ok()) << opened.message();
  const ElfFile& file = **opened;
  const ReadelfView want = readelf(path);
  std::map<uint64_t, std::set<std::string>> names_at;  // aliases: which one gdb picks is its own
  for (const auto& [table, syms] : want.symbols) {
    for (const ReadelfSymbol& w : syms) names_at[w.value].insert(w.name);
  }
  std::string text_ndx;
  for (const Section& sec : file.sections()) {
    if (sec.name == ".text") text_ndx = std::to_string(sec.index);
  }
  std::vector<std::string> args = {
      "gdb", "-batch", "-nx", "-ex", "set print demangle off", "-ex", "set print asm-demangle off"};
  std::vector<uint64_t> addrs;
  for (const auto& [table, syms] : want.symbols) {
    for (const ReadelfSymbol& w : syms) {
      if (w.size != 0 || w.ndx != text_ndx || (w.type != "FUNC" && w.type != "NOTYPE")) continue;
      if (names_at[w.value].size() != 1 || names_at.count(w.value + 1) != 0 || addrs.size() >= 40) {
        continue;
      }
      addrs.push_back(w.value + 1);
      args.push_back("-ex");
      args.push_back(fmt::format("info symbol {:#x}", w.value + 1));
    }
  }
  ASSERT_GT(addrs.size(), 5u);
  args.push_back(path);
  const test::CommandResult gdb = run(args);
  ASSERT_EQ(gdb.exit_code, 0) << gdb.err;
  std::istringstream lines(gdb.out);
  static const std::regex named(R"(^(.+) \+ 1 in section \.text$)");
  size_t compared = 0;
  std::string line;
  for (uint64_t addr : addrs) {
    ASSERT_TRUE(std::getline(lines, line)) << gdb.out;
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, named)) << line;
    const Symbol* hit = file.symbol_at(addr);
    ASSERT_NE(hit, nullptr) << std::hex << addr << ": gdb says " << line;
    EXPECT_EQ(std::string(hit->name), m[1].str()) << std::hex << addr;
    EXPECT_EQ(hit->value, addr - 1) << m[1].str();
    ++compared;
  }
  RecordProperty("unsized_symbols_compared", static_cast<int>(compared));
}

INSTANTIATE_TEST_SUITE_P(Real, RealBinaryTest, ::testing::ValuesIn(test::real_binaries()),
                         [](const auto& info) {
                           std::string name = info.param.label;
                           for (char& c : name) {
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

// DT_NEEDED: the lua module needs libluajit-5.1.so.2 (oracle: readelf -d).
TEST(ElfDynamic, NeededMatchesReadelf) {
  for (const test::RealBinary& bin : test::real_binaries()) {
    auto opened = ElfFile::open(bin.path);
    ASSERT_TRUE(opened.ok()) << opened.message();
    test::CommandResult r = run({"readelf", "-W", "-d", bin.path});
    ASSERT_EQ(r.exit_code, 0);
    std::vector<std::string> want;
    static const std::regex needed_re(R"(\(NEEDED\)\s+Shared library: \[([^\]]+)\])");
    for (const std::string& line : lines_of(r.out)) {
      std::smatch m;
      if (std::regex_search(line, m, needed_re)) want.push_back(m[1]);
    }
    std::vector<std::string> got((*opened)->needed().begin(), (*opened)->needed().end());
    EXPECT_EQ(got, want) << bin.path;
  }
}

TEST(ElfOpen, NamesTheFileOnError) {
  auto missing = ElfFile::open("/nonexistent/ljprof-test");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("/nonexistent/ljprof-test"), std::string::npos);
  auto not_elf = ElfFile::open("/etc/passwd");
  ASSERT_FALSE(not_elf.ok());
  EXPECT_NE(not_elf.message().find("not an ELF file"), std::string::npos) << not_elf.message();
  auto dir = ElfFile::open("/usr");
  ASSERT_FALSE(dir.ok());
  EXPECT_NE(dir.message().find("not a regular file"), std::string::npos);
}

}  // namespace
}  // namespace ljprof::elf
