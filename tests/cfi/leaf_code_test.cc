// Code without CFI proven leaf by its instructions (cfi/leaf_code.cc), the rule for an arm64
// vDSO built without unwind tables. Two oracles: the instruction forms (GNU as encodes them; each
// rejected one writes sp, x29 or x30 per the Arm ARM, or calls), and the compiler's own CFI: every
// function of Debian's arm64 libc that the prover accepts must have, at every instruction, the
// leaf rule in libc's .eh_frame (CFA = sp, return address in x30, x29 unchanged).
#include <elf.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cfi/cfi.h"
#include "disasm/disasm.h"
#include "elf/elf_file.h"
#include "support/assemble.h"

namespace ljprof::cfi {
namespace {

using elf::Arch;

std::optional<std::string> violation(const std::string& source) {
  auto insns = disasm::disassemble(Arch::AArch64, test::assemble(Arch::AArch64, source), 0x1000);
  EXPECT_TRUE(insns.ok()) << insns.message();
  if (!insns.ok()) return "no decode";
  return aarch64_leaf_violation(*insns);
}

TEST(LeafCode, VdsoClockGettimeShapeIsALeaf) {
  // The instruction forms of Debian 12's arm64 __kernel_clock_gettime: BTI/PAC hints, sp only
  // read, loads and stores through other registers, the svc fallback, ret.
  EXPECT_EQ(violation("hint #25\n cmp w0, #15\n b.hi 1f\n mov w2, #1\n adr x3, .\n"
                      "ldr w7, [x3]\n tbnz w7, #0, 1f\n dmb ishld\n isb\n mrs x2, CNTVCT_EL0\n"
                      "eor x4, x2, x2\n add x4, sp, x4\n ldr xzr, [x4]\n ldp x11, x10, [x3, #8]\n"
                      "madd x0, x0, x5, x9\n stp x6, x0, [x1]\n mov w0, #0\n hint #29\n ret\n"
                      "1: mov x8, #113\n svc #0\n hint #29\n ret\n"),
            std::nullopt);
}

TEST(LeafCode, ReadingTheFrameRegistersKeepsALeaf) {
  EXPECT_EQ(violation("ldr x0, [sp, #8]\n add x1, sp, #16\n str x30, [x2]\n str x29, [sp, #8]\n"
                      "cmp sp, x0\n ret\n"),
            std::nullopt);
}

TEST(LeafCode, EveryFrameWriteOrCallIsRejectedAndNamed) {
  const std::vector<std::string> writers = {
      "stp x29, x30, [sp, #-16]!",  // pre-index: writes sp
      "ldp x29, x30, [sp], #16",    // loads x29/x30, post-index writes sp
      "ldr x0, [sp], #16",          // post-index writes sp
      "ldr x0, [x29, #8]!",         // pre-index writes x29
      "ldr x30, [sp, #8]",         "ldp x0, x30, [x1]", "mov x29, sp", "mov x30, x0",
      "add sp, sp, #16",           "sub sp, sp, #32",   "bl 1f",       "blr x3",
      ".inst 0x00000000",  // undecodable
  };
  for (const std::string& w : writers) {
    std::optional<std::string> why = violation("nop\n " + w + "\n 1: ret\n");
    ASSERT_TRUE(why.has_value()) << w;
    EXPECT_NE(why->find("0x1004"), std::string::npos) << w << ": " << *why;
  }
}

// Debian's arm64 libc (libc6-arm64-cross, what the cross build links against).
const char* const kArm64Libc = "/usr/aarch64-linux-gnu/lib/libc.so.6";

bool leaf_rule(const lj_cfi_row& r) {
  return r.hint == LJ_CFI_OK && r.cfa_base == LJ_CFI_REG_SP && r.cfa_offset == 0 &&
         r.ra_rule == LJ_CFI_RULE_SAME && r.fp_rule == LJ_CFI_RULE_SAME;
}

TEST(LeafCode, EveryProvenLeafOfArm64LibcHasTheLeafRuleInItsOwnCfi) {
  auto file = elf::ElfFile::open(kArm64Libc);
  ASSERT_TRUE(file.ok()) << file.message();
  auto cfi = build_unwind_table(**file);
  ASSERT_TRUE(cfi.ok()) << cfi.message();
  auto leaves = aarch64_leaf_overlays(**file);
  ASSERT_TRUE(leaves.ok()) << leaves.message();
  size_t checked = 0;
  for (const Overlay& o : leaves->overlays) {
    if (!cfi->function_start(o.begin)) continue;  // no FDE: nothing to compare with
    ++checked;
    for (uint64_t pc = o.begin; pc < o.end; pc += 4) {
      const lj_cfi_row* r = cfi->row_at(pc);
      ASSERT_NE(r, nullptr) << o.what;
      EXPECT_TRUE(leaf_rule(*r)) << o.what << " at " << std::hex << pc << ": the CFI says "
                                 << describe_row(*r, Arch::AArch64);
    }
  }
  // libc has hundreds of leaf functions (string routines, syscall stubs) and more that are not.
  EXPECT_GT(checked, 200u);
  EXPECT_GT(leaves->rejected.size(), 200u);
}

TEST(LeafCode, X86FilesGetNoLeafOverlays) {
  auto file = elf::ElfFile::open("/usr/lib/x86_64-linux-gnu/libc.so.6");
  ASSERT_TRUE(file.ok()) << file.message();
  auto leaves = aarch64_leaf_overlays(**file);
  ASSERT_TRUE(leaves.ok()) << leaves.message();
  EXPECT_TRUE(leaves->overlays.empty());
}

}  // namespace
}  // namespace ljprof::cfi
