#include "support/tarantool_copies.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>

#include "elf/elf_file.h"
#include "support/test_support.h"

namespace ljprof::test {

namespace {

// The file offset just past the first instruction of `function` whose objdump disassembly
// contains `text`; 0 when there is none.
uint64_t end_of_instruction(const std::string& bin, const std::string& function,
                            const std::string& text) {
  auto elf = elf::ElfFile::open(bin);
  if (!elf.ok()) return 0;
  const elf::Symbol* sym = (*elf)->find_symbol(function);
  if (sym == nullptr) return 0;
  CommandResult d = run({"objdump", "-d", fmt::format("--start-address={:#x}", sym->value),
                         fmt::format("--stop-address={:#x}", sym->value + sym->size), bin});
  static const std::regex row(R"(^\s*([0-9a-f]+):\t((?:[0-9a-f]{2} )+)\s*\t(.*)$)");
  std::istringstream in(d.out);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (!std::regex_match(line, m, row) || m[3].str().find(text) == std::string::npos) continue;
    auto offset = (*elf)->file_offset(std::stoull(m[1], nullptr, 16));
    if (offset.ok()) return *offset + m[2].str().size() / 3;
  }
  return 0;
}

}  // namespace

std::string stripped_tarantool(const std::string& path) {
  CommandResult r = run({"strip", "--strip-all", "-o", path, kDebianTarantool});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.exit_code == 0 ? path : "";
}

namespace {

// The stripped copy at `path` with the last byte of the first instruction of `function` whose
// disassembly contains `text` set to `byte`.
std::string patched_stripped_tarantool(const std::string& path, const std::string& function,
                                       const std::string& text, uint8_t byte) {
  const uint64_t end = end_of_instruction(kDebianTarantool, function, text);
  EXPECT_NE(end, 0u) << "no \"" << text << "\" in " << kDebianTarantool << "'s " << function;
  if (end == 0 || stripped_tarantool(path).empty()) return "";
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(end - 1));
  f.put(static_cast<char>(byte));
  return f.good() ? path : "";
}

}  // namespace

std::string tarantool_without_fid_pattern(const std::string& path) {
  return patched_stripped_tarantool(path, "fiber_new_ex", "cmp    $0x63,", 0x50);
}

std::string tarantool_without_dead_flag_pattern(const std::string& path) {
  return patched_stripped_tarantool(path, "fiber_join", "testb  $0x10,0x68(%rbx)", 0x20);
}

}  // namespace ljprof::test
