// The one Capstone wrapper: undecodable bytes become explicit Gap instructions on both
// architectures (bytes from GNU as: x86-64 `.byte 0x06` is invalid in 64-bit mode, AArch64
// `.inst 0x00000000` is in no allocated encoding space), the decode continues after them, the
// neutral kinds and written registers are the ones the instruction forms document, and the caps
// fail with an error that names them.
#include <gtest/gtest.h>

#include <vector>

#include "disasm/disasm.h"
#include "elf/elf_file.h"
#include "support/assemble.h"

namespace ljprof::disasm {
namespace {

using elf::Arch;

std::vector<Insn> decode(Arch arch, const std::string& source, uint64_t address = 0x1000) {
  auto insns = disassemble(arch, test::assemble(arch, source), address);
  EXPECT_TRUE(insns.ok()) << insns.message();
  return insns.ok() ? *insns : std::vector<Insn>{};
}

std::vector<InsnKind> kinds(const std::vector<Insn>& insns) {
  std::vector<InsnKind> out;
  for (const Insn& i : insns) out.push_back(i.kind);
  return out;
}

TEST(Gap, X86UndecodableByteIsOneByteGapAndTheSweepContinues) {
  auto insns = decode(Arch::X86_64, "nop\n .byte 0x06\n mov rax, qword ptr [rdi + 0x10]\n ret\n");
  ASSERT_EQ(insns.size(), 4u);
  EXPECT_EQ(kinds(insns),
            (std::vector<InsnKind>{InsnKind::Other, InsnKind::Gap, InsnKind::Mov, InsnKind::Ret}));
  const Insn& gap = insns[1];
  EXPECT_EQ(gap.address, 0x1001u);
  EXPECT_EQ(gap.size, 1);
  EXPECT_EQ(hex_bytes(gap.byte_span()), "06");
  EXPECT_EQ(gap.op_count, 0);
  EXPECT_EQ(gap.text, "(bad)");
  // Undecodable bytes may hide any write.
  EXPECT_TRUE(gap.may_write(kX86Rsp));
  EXPECT_EQ(insns[2].address, 0x1002u);
  EXPECT_EQ(insns[2].ops[1].base, 7);  // rdi
  EXPECT_EQ(insns[2].ops[1].disp, 0x10);
}

TEST(Gap, Arm64UndecodableWordIsFourByteGap) {
  auto insns = decode(Arch::AArch64, "nop\n .inst 0x00000000\n ldr x1, [x0, #16]\n ret\n");
  ASSERT_EQ(insns.size(), 4u);
  EXPECT_EQ(kinds(insns),
            (std::vector<InsnKind>{InsnKind::Other, InsnKind::Gap, InsnKind::Load, InsnKind::Ret}));
  EXPECT_EQ(insns[1].address, 0x1004u);
  EXPECT_EQ(insns[1].size, 4);
  EXPECT_EQ(hex_bytes(insns[1].byte_span()), "00 00 00 00");
  EXPECT_EQ(insns[2].address, 0x1008u);
}

TEST(Gap, Arm64TrailingPartialWordIsAGapOfWhatIsLeft) {
  const std::vector<uint8_t> bytes = {0x1f, 0x20, 0x03, 0xd5, 0xc0, 0x03};  // nop, 2 stray bytes
  auto insns = disassemble(Arch::AArch64, bytes, 0x2000);
  ASSERT_TRUE(insns.ok()) << insns.message();
  ASSERT_EQ(insns->size(), 2u);
  EXPECT_EQ((*insns)[1].kind, InsnKind::Gap);
  EXPECT_EQ((*insns)[1].address, 0x2004u);
  EXPECT_EQ((*insns)[1].size, 2);
}

TEST(Kinds, X86ControlStackAndCompareForms) {
  auto insns = decode(Arch::X86_64,
                      "push rbx\n pop rbx\n cmp rsp, rax\n test ebx, ebx\n neg rbx\n"
                      "call 1f\n call rax\n jmp 1f\n jmp rax\n je 1f\n 1: ret\n");
  EXPECT_EQ(kinds(insns),
            (std::vector<InsnKind>{InsnKind::Push, InsnKind::Pop, InsnKind::Compare,
                                   InsnKind::Compare, InsnKind::Neg, InsnKind::CallDirect,
                                   InsnKind::CallIndirect, InsnKind::Jump, InsnKind::JumpIndirect,
                                   InsnKind::Branch, InsnKind::Ret}));
  EXPECT_EQ(insns[7].ops[0].kind, Operand::Kind::Imm);
  EXPECT_EQ(static_cast<uint64_t>(insns[7].ops[0].imm), insns.back().address);
}

TEST(Kinds, X86RegistersCanonicalAcrossWidths) {
  auto insns =
      decode(Arch::X86_64, "mov r14d, dword ptr [rbp - 8]\n mov rsp, rcx\n mov esp, ecx\n");
  ASSERT_EQ(insns.size(), 3u);
  EXPECT_TRUE(insns[0].ops[0].is_reg(14));
  EXPECT_EQ(insns[0].ops[0].size, 4);
  EXPECT_EQ(insns[0].ops[1].base, kX86Rbp);
  EXPECT_EQ(insns[0].ops[1].disp, -8);
  EXPECT_TRUE(insns[1].ops[0].is_reg64(kX86Rsp));
  EXPECT_TRUE(insns[2].ops[0].is_reg(kX86Rsp));
  EXPECT_FALSE(insns[2].ops[0].is_reg64(kX86Rsp));
  EXPECT_EQ(register_name(Arch::X86_64, 14), "r14");
  EXPECT_EQ(register_name(Arch::X86_64, kX86Rip), "rip");
}

// Capstone's access lists name the implicit writes: cqo and div write rdx, cpuid writes rbx.
TEST(Writes, X86ExplicitAndImplicitWrites) {
  auto insns = decode(Arch::X86_64, "cqo\n div rcx\n cpuid\n mov bl, 1\n cmp rdx, rbx\n");
  ASSERT_EQ(insns.size(), 5u);
  EXPECT_TRUE(insns[0].may_write(kX86Rdx));
  EXPECT_FALSE(insns[0].may_write(kX86Rbx));
  EXPECT_TRUE(insns[1].may_write(kX86Rdx));
  EXPECT_TRUE(insns[2].may_write(kX86Rbx));
  EXPECT_TRUE(insns[3].may_write(kX86Rbx));
  EXPECT_FALSE(insns[4].may_write(kX86Rdx));
  EXPECT_FALSE(insns[4].may_write(kX86Rbx));
}

TEST(Kinds, Arm64BranchesPairsAndWriteback) {
  auto insns = decode(Arch::AArch64,
                      "b 1f\n b.eq 1f\n cbz x0, 1f\n bl 1f\n blr x3\n br x4\n cmp x0, x1\n"
                      "stp x29, x30, [sp, #16]\n stp x29, x30, [sp, #-16]!\n 1: ret\n");
  EXPECT_EQ(kinds(insns),
            (std::vector<InsnKind>{InsnKind::Jump, InsnKind::Branch, InsnKind::Branch,
                                   InsnKind::CallDirect, InsnKind::CallIndirect,
                                   InsnKind::JumpIndirect, InsnKind::Compare, InsnKind::StorePair,
                                   InsnKind::Other, InsnKind::Ret}));
  EXPECT_TRUE(insns[7].ops[0].is_reg64(kA64Fp));
  EXPECT_TRUE(insns[7].ops[1].is_reg64(kA64Lr));
  EXPECT_EQ(insns[7].ops[2].base, kA64Sp);
  EXPECT_EQ(insns[7].ops[2].disp, 16);
  // Capstone 4's AArch64 access lists are wrong (cmp x0, x1 "writes" x0): every register may
  // be written.
  EXPECT_TRUE(insns[6].may_write(0));
  EXPECT_TRUE(insns[6].may_write(kA64Sp));
}

TEST(Caps, MoreThanMaxBytesIsAnErrorNamingTheCap) {
  const std::vector<uint8_t> bytes(DisasmLimits::kMaxBytes + 1, 0x90);
  auto r = disassemble(Arch::X86_64, bytes, 0x400000);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("0x400000"), std::string::npos) << r.message();
  EXPECT_NE(r.message().find("DisasmLimits::kMaxBytes"), std::string::npos) << r.message();
}

// Bytes that are all undecodable are a Gap each: the instruction cap bounds the memory.
TEST(Caps, MoreThanMaxInsnsIsAnErrorNamingTheCap) {
  const std::vector<uint8_t> bytes(DisasmLimits::kMaxInsns + 1, 0x06);
  auto r = disassemble(Arch::X86_64, bytes, 0x400000);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("DisasmLimits::kMaxInsns"), std::string::npos) << r.message();
  const std::vector<uint8_t> fits(DisasmLimits::kMaxInsns, 0x06);
  auto ok = disassemble(Arch::X86_64, fits, 0x400000);
  ASSERT_TRUE(ok.ok()) << ok.message();
  EXPECT_EQ(ok->size(), DisasmLimits::kMaxInsns);
}

TEST(Caps, FileRangeOverTheCapNamesTheFile) {
  auto file = elf::ElfFile::open("/usr/bin/luajit");
  ASSERT_TRUE(file.ok()) << file.message();
  auto r = disassemble_range(**file, 0x1000, DisasmLimits::kMaxBytes + 1);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("/usr/bin/luajit"), std::string::npos) << r.message();
  EXPECT_NE(r.message().find("DisasmLimits::kMaxBytes"), std::string::npos) << r.message();
}

}  // namespace
}  // namespace ljprof::disasm
