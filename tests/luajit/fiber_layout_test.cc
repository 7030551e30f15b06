// The fiber layout of a Tarantool executable (luajit/fiber_layout.h) against outside oracles on
// Debian's /usr/bin/tarantool (2.6, with DWARF) and a Tarantool 3.x shape built here: gdb
// evaluating offsetof-style expressions on the same binary (it resolves nested anonymous members,
// which pahole 1.24 prints as separate unnamed structs), pahole's own offsets for the plain
// members, and the symbol table as readelf shows it. Then the fail-closed cases: no main_cord, no
// DWARF.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "luajit/fiber_layout.h"
#include "support/tarantool_copies.h"
#include "support/test_support.h"

namespace ljprof {
namespace {

using Json = nlohmann::json;
constexpr const char* kTarantool = "/usr/bin/tarantool";

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// Each expression's value as gdb prints it (`$N = VALUE`), in order.
std::vector<uint64_t> gdb_values(const std::string& bin, const std::vector<std::string>& exprs) {
  std::vector<std::string> argv = {"gdb-multiarch", "-nx", "-batch"};
  for (const std::string& e : exprs) argv.insert(argv.end(), {"-ex", "print/d " + e});
  argv.push_back(bin);
  test::CommandResult r = test::run(argv);
  std::vector<uint64_t> out;
  static const std::regex value_re(R"(^\$\d+ = (\d+)$)");
  for (const std::string& line : lines(r.out)) {
    std::smatch m;
    if (std::regex_match(line, m, value_re)) out.push_back(std::stoull(m[1]));
  }
  EXPECT_EQ(out.size(), exprs.size()) << r.out << r.err;
  return out;
}

// `pahole -C NAME`'s "/* offset size */" of a top-level member `member;`.
std::optional<std::pair<uint64_t, uint64_t>> pahole_member(const std::string& strct,
                                                           const std::string& member) {
  test::CommandResult r = test::run({"pahole", "-C", strct, kTarantool});
  const std::regex re("^\\t[^\\t].*[ *]" + member + ";\\s+/\\*\\s+(\\d+)\\s+(\\d+) \\*/$");
  for (const std::string& line : lines(r.out)) {
    std::smatch m;
    if (std::regex_match(line, m, re)) return std::pair{std::stoull(m[1]), std::stoull(m[2])};
  }
  return std::nullopt;
}

luajit::FiberLayout tarantool_layout() {
  auto elf = elf::ElfFile::open(kTarantool);
  EXPECT_TRUE(elf.ok()) << elf.message();
  if (!elf.ok()) return {};
  auto layout = luajit::read_fiber_layout(**elf);
  EXPECT_TRUE(layout.ok()) << layout.message();
  return layout.ok() ? *layout : luajit::FiberLayout{};
}

// Every member of `l` equals gdb's evaluation of the same offsetof-style expression on `bin`.
void expect_layout_matches_gdb(const std::string& bin, const luajit::FiberLayout& l) {
  auto at = [](const char* type, const char* member) {
    return fmt::format("(long)&((struct {}*)0)->{}", type, member);
  };
  std::vector<uint64_t> want = gdb_values(
      bin, {"(long)&main_cord", at("cord", "fiber"), at("cord", "alive"), at("rlist", "next"),
            at("fiber", "link"), at("fiber", "fid"), "sizeof(((struct fiber*)0)->fid)",
            at("fiber", "name"), at("fiber", "storage.lua.stack"), at("fiber", "ctx.sp"),
            at("cord", "ready"), at("cord", "name"), at("fiber", "state"), at("fiber", "csw"),
            at("fiber", "flags"), "(long)FIBER_IS_DEAD"});
  ASSERT_EQ(want.size(), 16u);
  EXPECT_EQ(l.main_cord, want[0]);
  EXPECT_EQ(l.cord_fiber, want[1]);
  EXPECT_EQ(l.cord_alive, want[2]);
  EXPECT_EQ(l.rlist_next, want[3]);
  EXPECT_EQ(l.fiber_link, want[4]);
  EXPECT_EQ(l.fiber_fid, want[5]);
  EXPECT_EQ(l.fid_size, want[6]);
  EXPECT_EQ(l.fiber_name, want[7]);
  EXPECT_EQ(l.fiber_lua_state, want[8]);
  EXPECT_EQ(l.fiber_ctx_sp, want[9]);
  EXPECT_EQ(l.cord_ready, want[10]);
  EXPECT_EQ(l.cord_name, want[11]);
  EXPECT_EQ(l.fiber_state, want[12]);
  EXPECT_EQ(l.fiber_csw, want[13]);
  EXPECT_EQ(l.fiber_flags, want[14]);
  EXPECT_EQ(l.flag_dead, want[15]);
}

TEST(FiberLayout, TarantoolMatchesGdb) {
  ASSERT_TRUE(test::file_exists(kTarantool));
  expect_layout_matches_gdb(kTarantool, tarantool_layout());
}

// Tarantool 3.x, which no package has: tests/luajit/synthetic/tarantool3_fiber.c declares its
// struct fiber and struct cord as 3.3's fiber.h does, built here as each architecture's default
// build is (x86-64 with ENABLE_BACKTRACE, arm64 without; both with HAVE_MADV_DONTNEED). The
// 64-bit fiber id, the members behind the options and the nested storage.lua.stack are read as
// gdb (gdb-multiarch for the arm64 file) reads them.
TEST(FiberLayout, Tarantool3ShapeMatchesGdbOnBothArchitectures) {
  const std::string source = test::source_dir() + "/tests/luajit/synthetic/tarantool3_fiber.c";
  test::TempDir dir;
  struct Build {
    const char* name;
    std::vector<std::string> compile;
  };
  const Build builds[] = {
      {"amd64", {"gcc", "-DENABLE_BACKTRACE"}},
      {"arm64", {"aarch64-linux-gnu-gcc"}},
  };
  for (const Build& b : builds) {
    SCOPED_TRACE(b.name);
    const std::string bin = dir.file(std::string("tarantool3_") + b.name);
    std::vector<std::string> argv = b.compile;
    argv.insert(argv.end(), {"-g", "-O0", "-DHAVE_MADV_DONTNEED", source, "-o", bin});
    const test::CommandResult cc = test::run(argv);
    ASSERT_EQ(cc.exit_code, 0) << cc.err;
    auto elf = elf::ElfFile::open(bin);
    ASSERT_TRUE(elf.ok()) << elf.message();
    auto layout = luajit::read_fiber_layout(**elf);
    ASSERT_TRUE(layout.ok()) << layout.message();
    EXPECT_EQ(layout->fid_size, 8u);
    expect_layout_matches_gdb(bin, *layout);
  }
}

TEST(FiberLayout, TarantoolMatchesPahole) {
  const luajit::FiberLayout l = tarantool_layout();
  const std::map<std::pair<std::string, std::string>, std::pair<uint64_t, uint64_t>> ours = {
      {{"cord", "fiber"}, {l.cord_fiber, 8}},  {{"cord", "alive"}, {l.cord_alive, 16}},
      {{"fiber", "link"}, {l.fiber_link, 16}}, {{"fiber", "fid"}, {l.fiber_fid, l.fid_size}},
      {{"fiber", "name"}, {l.fiber_name, 8}},  {{"rlist", "next"}, {l.rlist_next, 8}}};
  for (const auto& [member, value] : ours) {
    auto pahole = pahole_member(member.first, member.second);
    ASSERT_TRUE(pahole) << "pahole -C " << member.first << " has no " << member.second;
    EXPECT_EQ(*pahole, value) << member.first << "." << member.second;
  }
}

TEST(FiberLayout, InspectShowsIt) {
  const luajit::FiberLayout l = tarantool_layout();
  test::CommandResult r = test::run({test::ljprof_bin(), "inspect", "--json", kTarantool});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = Json::parse(r.out)["fiber_layout"];
  for (const auto& [name, value] : luajit::fiber_layout_rows(l)) {
    ASSERT_TRUE(j.contains(name)) << j.dump();
    if (name == "main_cord" || name == "cord_ptr") {
      EXPECT_EQ(j[name], fmt::format("{:#x}", value));
    } else {
      EXPECT_EQ(j[name], value) << name;
    }
  }
  test::CommandResult text = test::run({test::ljprof_bin(), "inspect", kTarantool});
  EXPECT_NE(text.out.find("fiber.storage.lua.stack"), std::string::npos) << text.out;
  // Not Tarantool: no fiber layout at all.
  r = test::run({test::ljprof_bin(), "inspect", "--json", "/usr/bin/luajit"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Json::parse(r.out)["fiber_layout"].is_null());
}

TEST(FiberLayout, FailsClosedWithoutMainCordOrDwarf) {
  auto luajit = elf::ElfFile::open("/usr/bin/luajit");
  ASSERT_TRUE(luajit.ok()) << luajit.message();
  auto none = luajit::read_fiber_layout(**luajit);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.message().find("main_cord"), std::string::npos) << none.message();

  // Tarantool with its .symtab but without DWARF: the DWARF reader's error names the file and
  // the missing DWARF, and inspect shows the layout its machine code proves instead.
  test::TempDir dir;
  const std::string stripped = dir.file("tarantool");
  test::CommandResult strip = test::run({"objcopy", "--strip-debug", kTarantool, stripped});
  ASSERT_EQ(strip.exit_code, 0) << strip.err;
  auto elf = elf::ElfFile::open(stripped);
  ASSERT_TRUE(elf.ok()) << elf.message();
  auto layout = luajit::read_fiber_layout_dwarf(**elf);
  ASSERT_FALSE(layout.ok());
  EXPECT_NE(layout.message().find("no fiber layout"), std::string::npos) << layout.message();
  EXPECT_NE(layout.message().find(stripped), std::string::npos) << layout.message();
  test::CommandResult r = test::run({test::ljprof_bin(), "inspect", "--json", stripped});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = Json::parse(r.out)["fiber_layout"];
  EXPECT_EQ(j.value("source", ""), "machine code") << j.dump();
  EXPECT_FALSE(j.contains("lists_error")) << j.dump();
  EXPECT_EQ(j.value("fiber.fid", uint64_t{0}), tarantool_layout().fiber_fid) << j.dump();
  EXPECT_EQ(j.value("fiber.storage.lua.stack", uint64_t{0}), tarantool_layout().fiber_lua_state)
      << j.dump();
}

// The rows a layout from machine code has: the DWARF layout's, with the thread pointer's offset
// of cord_ptr in place of the cord_ptr symbol and PT_TLS it is computed from.
std::vector<std::pair<std::string, uint64_t>> machine_code_rows(const luajit::FiberLayout& dwarf) {
  std::vector<std::pair<std::string, uint64_t>> rows;
  for (const auto& row : luajit::fiber_layout_rows(dwarf)) {
    if (row.first != "cord_ptr" && !row.first.starts_with("PT_TLS")) rows.push_back(row);
  }
  const auto tp = luajit::cord_ptr_from_tp(dwarf, elf::Arch::X86_64);
  EXPECT_TRUE(tp.has_value());
  rows.emplace_back("tp - &cord_ptr", static_cast<uint64_t>(-tp.value_or(0)));
  return rows;
}

// Without any debug information (strip --strip-all, no debug file), the layout comes from the
// machine code of ten exported functions: every field equals what the DWARF of the unstripped
// binary says (itself checked against gdb and pahole above), and the thread pointer offset the
// code reads cord_ptr at equals the one computed from the DWARF layout's cord_ptr symbol and
// PT_TLS.
TEST(FiberLayout, MachineCodeOfAStrippedTarantoolGivesWhatItsDwarfGives) {
  test::TempDir dir;
  const std::string stripped = test::stripped_tarantool(dir.file("tarantool"));
  ASSERT_FALSE(stripped.empty());
  auto elf = elf::ElfFile::open(stripped);
  ASSERT_TRUE(elf.ok()) << elf.message();
  ASSERT_FALSE(luajit::read_fiber_layout_dwarf(**elf, dir.file("no-debug")).ok());

  auto code = luajit::read_fiber_layout(**elf, dir.file("no-debug"));
  ASSERT_TRUE(code.ok()) << code.message();
  const luajit::FiberLayout dwarf = tarantool_layout();
  EXPECT_EQ(code->source, luajit::FiberLayoutSource::MachineCode);
  EXPECT_TRUE(code->has_lists) << code->lists_error;
  EXPECT_EQ(luajit::fiber_layout_rows(*code), machine_code_rows(dwarf));
  EXPECT_EQ(code->cord_ptr_tp_offset, luajit::cord_ptr_from_tp(dwarf, elf::Arch::X86_64));

  // The unstripped binary's own DWARF still wins.
  auto original = elf::ElfFile::open(kTarantool);
  ASSERT_TRUE(original.ok()) << original.message();
  auto preferred = luajit::read_fiber_label_layout(**original);
  ASSERT_TRUE(preferred.ok()) << preferred.message();
  EXPECT_EQ(preferred->source, luajit::FiberLayoutSource::Dwarf);
}

// A fiber-list pattern that does not match (fiber_join testing another bit after its yield than
// before) leaves the label fields, says which function, and lists no fibers.
TEST(FiberLayout, AListPatternThatDoesNotMatchKeepsTheLabelsOnly) {
  test::TempDir dir;
  const std::string patched = test::tarantool_without_dead_flag_pattern(dir.file("tarantool"));
  ASSERT_FALSE(patched.empty());
  auto elf = elf::ElfFile::open(patched);
  ASSERT_TRUE(elf.ok()) << elf.message();
  auto labels = luajit::read_fiber_label_layout(**elf, dir.file("no-debug"));
  ASSERT_TRUE(labels.ok()) << labels.message();
  EXPECT_FALSE(labels->has_lists);
  EXPECT_NE(labels->lists_error.find("fiber_join"), std::string::npos) << labels->lists_error;
  EXPECT_EQ(labels->fiber_fid, tarantool_layout().fiber_fid);
  auto lists = luajit::read_fiber_layout(**elf, dir.file("no-debug"));
  ASSERT_FALSE(lists.ok());
  EXPECT_NE(lists.message().find("no fiber lists from machine code"), std::string::npos)
      << lists.message();
  EXPECT_NE(lists.message().find("fiber_is_dead"), std::string::npos) << lists.message();
}

// Code that does not show a pattern fails closed, naming the function and what was expected: a
// Tarantool whose fiber_new_ex compares with another constant than FIBER_ID_MAX_RESERVED, a
// luajit (no fiber functions), an AArch64 executable.
TEST(FiberLayout, MachineCodeThatDoesNotMatchFailsClosed) {
  test::TempDir dir;
  const std::string patched = test::tarantool_without_fid_pattern(dir.file("tarantool"));
  ASSERT_FALSE(patched.empty());
  auto elf = elf::ElfFile::open(patched);
  ASSERT_TRUE(elf.ok()) << elf.message();
  auto layout = luajit::fiber_layout_from_code(**elf);
  ASSERT_FALSE(layout.ok());
  EXPECT_NE(layout.message().find("fiber_new_ex"), std::string::npos) << layout.message();
  EXPECT_NE(layout.message().find("FIBER_ID_MAX_RESERVED"), std::string::npos) << layout.message();

  auto luajit_elf = elf::ElfFile::open("/usr/bin/luajit");
  ASSERT_TRUE(luajit_elf.ok()) << luajit_elf.message();
  auto none = luajit::fiber_layout_from_code(**luajit_elf);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.message().find("exports no function cord_is_main"), std::string::npos)
      << none.message();

  auto arm64 = elf::ElfFile::open(test::fixture("arm64/usr/bin/luajit"));
  ASSERT_TRUE(arm64.ok()) << arm64.message();
  auto other_arch = luajit::fiber_layout_from_code(**arm64);
  ASSERT_FALSE(other_arch.ok());
  EXPECT_NE(other_arch.message().find("not x86-64"), std::string::npos) << other_arch.message();
}

// A stripped Tarantool (strip --strip-all: neither .symtab nor DWARF) whose debug file is where
// Debian's -dbgsym package puts it (DEBUG_DIR/.build-id/xx/rest.debug, from objcopy
// --only-keep-debug, its DWARF compressed): the same layout as the unstripped binary's, which the
// gdb and pahole tests above check. Without the debug file the error says which file was looked
// for.
TEST(FiberLayout, StrippedTarantoolTakesItFromItsSeparateDebugFile) {
  auto original = elf::ElfFile::open(kTarantool);
  ASSERT_TRUE(original.ok()) << original.message();
  const std::optional<std::string>& id = (*original)->build_id();
  ASSERT_TRUE(id && id->size() > 2);
  test::TempDir dir;
  const std::string debug_dir = dir.file("debug"), stripped = dir.file("tarantool");
  const std::string debug_file =
      fmt::format("{}/.build-id/{}/{}.debug", debug_dir, id->substr(0, 2), id->substr(2));
  ASSERT_EQ(test::run({"mkdir", "-p", debug_file.substr(0, debug_file.rfind('/'))}).exit_code, 0);
  test::CommandResult keep = test::run(
      {"objcopy", "--only-keep-debug", "--compress-debug-sections=zlib", kTarantool, debug_file});
  ASSERT_EQ(keep.exit_code, 0) << keep.err;
  test::CommandResult strip = test::run({"strip", "--strip-all", "-o", stripped, kTarantool});
  ASSERT_EQ(strip.exit_code, 0) << strip.err;
  auto elf = elf::ElfFile::open(stripped);
  ASSERT_TRUE(elf.ok()) << elf.message();
  ASSERT_FALSE((*elf)->has_symbol_table(elf::SymbolTable::Symtab));

  auto layout = luajit::read_fiber_layout(**elf, debug_dir);
  ASSERT_TRUE(layout.ok()) << layout.message();
  EXPECT_EQ(luajit::fiber_layout_rows(*layout), luajit::fiber_layout_rows(tarantool_layout()));

  auto none = luajit::read_fiber_layout_dwarf(**elf, dir.file("no-debug"));
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.message().find(dir.file("no-debug") + "/.build-id/"), std::string::npos)
      << none.message();
  EXPECT_NE(none.message().find("debug symbols"), std::string::npos) << none.message();
}

}  // namespace
}  // namespace ljprof
