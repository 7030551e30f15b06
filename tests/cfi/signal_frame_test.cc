// Signal trampolines get signal rows only when their code is the rt_sigreturn system call: a
// signal-frame FDE alone proves nothing about where the kernel's frame is. Oracle for the rows
// themselves: readelf's expressions for glibc's __restore_rt (readelf_oracle_test.cc); here, a
// copy of the same libc with the system call replaced by no-ops.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <fstream>
#include <iterator>

#include "cfi/cfi.h"
#include "elf/elf_file.h"
#include "support/test_support.h"

namespace ljprof::cfi {
namespace {

constexpr const char* kLibc = "/usr/lib/x86_64-linux-gnu/libc.so.6";

// The signal rows of `path`'s walker table, by pc.
std::vector<uint64_t> signal_row_starts(const std::string& path) {
  auto file = elf::ElfFile::open(path);
  EXPECT_TRUE(file.ok()) << file.message();
  if (!file.ok()) return {};
  auto table = build_unwind_table(**file);
  EXPECT_TRUE(table.ok()) << table.message();
  std::vector<uint64_t> out;
  if (!table.ok()) return out;
  for (const lj_cfi_row& r : table->rows()) {
    if (r.hint == LJ_CFI_SIGNAL) out.push_back(r.pc_start);
  }
  return out;
}

TEST(SignalFrames, OnlyTheRtSigreturnCallMakesAFdeASignalTrampoline) {
  ASSERT_EQ(signal_row_starts(kLibc).size(), 1u);
  // `mov $15, %rax; syscall` (objdump) occurs once in Debian's libc: in __restore_rt.
  std::ifstream in(kLibc, std::ios::binary);
  std::vector<char> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  const std::array<char, 9> call = {'\x48', '\xc7', '\xc0', '\x0f', '\x00',
                                    '\x00', '\x00', '\x0f', '\x05'};
  auto at = std::search(bytes.begin(), bytes.end(), call.begin(), call.end());
  ASSERT_NE(at, bytes.end());
  EXPECT_EQ(std::search(at + 1, bytes.end(), call.begin(), call.end()), bytes.end());
  at[7] = '\x90';  // syscall -> nop nop
  at[8] = '\x90';
  test::TempDir tmp;
  const std::string patched = tmp.path() + "/libc.so.6";
  std::ofstream(patched, std::ios::binary).write(bytes.data(), static_cast<long>(bytes.size()));
  EXPECT_TRUE(signal_row_starts(patched).empty());
}

}  // namespace
}  // namespace ljprof::cfi
