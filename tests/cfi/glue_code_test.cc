// Frames of x86-64 code without CFI derived from its instructions (cfi/glue_code.cc): the _init,
// _fini and crtstuff functions of every executable and library. Oracles: the instruction forms
// (GNU as encodes them; the stack effect of each is the ISA's), and the compiler's own CFI: every
// function of Debian's x86-64 libc that the analysis accepts, run over its FDE's range, must get
// at every instruction the frame libc's .eh_frame gives there (where the CFA is rsp-based).
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "cfi/cfi.h"
#include "disasm/disasm.h"
#include "elf/elf_file.h"
#include "support/assemble.h"

namespace ljprof::cfi {
namespace {

using elf::Arch;

constexpr uint64_t kBase = 0x1000;

Result<std::map<uint64_t, GlueFrame>> frames_of(const std::string& source) {
  auto insns = disasm::disassemble(Arch::X86_64, test::assemble(Arch::X86_64, source), kBase);
  if (!insns.ok()) return make_error("{}", insns.message());
  return x86_glue_frames(*insns, kBase, nullptr);
}

std::vector<int64_t> heights(const std::map<uint64_t, GlueFrame>& frames) {
  std::vector<int64_t> out;
  for (const auto& [pc, f] : frames) out.push_back(f.height);
  return out;
}

TEST(GlueCode, CrtiInitHasItsStackHeightAtEveryInstruction) {
  // glibc sysdeps/x86_64/crti.S _init with crtn.S's epilogue, as Debian's libm has it.
  auto f = frames_of(
      "endbr64\n sub rsp, 8\n mov rax, [rip + 0x100]\n test rax, rax\n je 1f\n call rax\n"
      "1: add rsp, 8\n ret\n");
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_EQ(heights(*f), (std::vector<int64_t>{0, 0, 8, 8, 8, 8, 8, 0}));
}

TEST(GlueCode, CrtstuffDtorsAuxSavesRbpAtCfaMinus16) {
  // GCC crtstuff.c __do_global_dtors_aux as in Debian's /usr/bin/luajit.
  auto f = frames_of(
      "endbr64\n cmp byte ptr [rip + 0x100], 0\n jne 2f\n push rbp\n"
      "cmp qword ptr [rip + 0x200], 0\n mov rbp, rsp\n je 1f\n mov rdi, [rip + 0x300]\n"
      "call 3f\n 1: call 3f\n mov byte ptr [rip + 0x100], 1\n pop rbp\n ret\n nop\n 2: ret\n"
      "3: ret\n");
  ASSERT_TRUE(f.ok()) << f.message();
  size_t saved = 0;
  for (const auto& [pc, frame] : *f) {
    if (frame.height == 8) {
      EXPECT_EQ(frame.fp_off, -16) << std::hex << pc;
      ++saved;
    } else {
      EXPECT_EQ(frame.height, 0) << std::hex << pc;
      EXPECT_EQ(frame.fp_off, 0) << std::hex << pc;
    }
  }
  EXPECT_EQ(saved, 8u);  // from the push's successor to the pop
}

TEST(GlueCode, LeaveRestoresTheFrame) {
  auto f =
      frames_of("push rbp\n mov rbp, rsp\n sub rsp, 0x20\n push rbx\n pop rbx\n leave\n ret\n");
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_EQ(heights(*f), (std::vector<int64_t>{0, 8, 8, 0x28, 0x30, 0x28, 0}));
}

TEST(GlueCode, EveryUnmodelledFrameChangeIsRejectedAndNamed) {
  const std::vector<std::string> bodies = {
      "mov rsp, rax",                         // rsp from a register
      "sub rsp, rax",                         // by an unknown amount
      "pop rbp",                              // overwrites the caller's rbp
      "mov rbp, rax",                         // likewise
      "push rax\n ret",                       // returns 8 bytes off
      "push rax\n jmp rax",                   // indirect jump inside the frame
      "je 1f\n push rax\n 1: pop rax\n ret",  // joins at two heights
      ".byte 0x06",                           // undecodable in 64-bit mode
  };
  for (const std::string& b : bodies) {
    auto f = frames_of("nop\n " + b + "\n ret\n");
    EXPECT_FALSE(f.ok()) << b;
  }
  // A branch out of the code (to its end here) inside the frame.
  EXPECT_FALSE(frames_of("push rax\n je 1f\n pop rax\n ret\n 1:\n").ok());
}

TEST(GlueCode, EveryAcceptedFunctionOfLibcHasTheFrameItsOwnCfiGives) {
  auto file = elf::ElfFile::open("/usr/lib/x86_64-linux-gnu/libc.so.6");
  ASSERT_TRUE(file.ok()) << file.message();
  auto cfi = build_unwind_table(**file);
  ASSERT_TRUE(cfi.ok()) << cfi.message();
  size_t checked = 0, rejected = 0, compared = 0, undescribed = 0;
  const elf::Section* text = (*file)->section(".text");
  ASSERT_NE(text, nullptr);
  for (uint64_t pc = text->addr; pc < text->addr + text->size;) {
    std::optional<uint64_t> begin = cfi->function_start(pc), end = cfi->function_end(pc);
    if (!begin || !end || *begin != pc) {
      ++pc;
      continue;
    }
    pc = *end;
    // A function's entry (not the cold part of one, whose FDE starts inside its frame).
    const lj_cfi_row* entry = cfi->row_at(*begin);
    if (*end - *begin > 4096 || entry == nullptr || entry->cfa_base != LJ_CFI_REG_SP ||
        entry->cfa_offset != 8) {
      continue;
    }
    auto insns = disasm::disassemble_range(**file, *begin, *end - *begin);
    ASSERT_TRUE(insns.ok()) << insns.message();
    auto frames = x86_glue_frames(*insns, *begin, nullptr);
    if (!frames.ok()) {
      ++rejected;
      continue;
    }
    // Hand-written assembly whose CFI never describes its pushes (glibc's mpn routines: one
    // row for the whole function) is wrong there, not the analysis: left out, counted.
    const bool pushes = std::any_of(frames->begin(), frames->end(),
                                    [](const auto& e) { return e.second.height != 0; });
    if (pushes && cfi->row_at(*end - 1)->pc_start <= *begin) {
      ++undescribed;
      continue;
    }
    ++checked;
    for (const auto& [at, f] : *frames) {
      const lj_cfi_row* r = cfi->row_at(at);
      ASSERT_NE(r, nullptr);
      if (r->hint != LJ_CFI_OK || r->cfa_base != LJ_CFI_REG_SP) continue;
      ++compared;
      EXPECT_EQ(r->cfa_offset, 8 + f.height)
          << std::hex << *begin << " at " << at << ": " << describe_row(*r, Arch::X86_64);
      EXPECT_EQ(r->ra_rule, LJ_CFI_RULE_AT_CFA);
      // After an epilogue's `pop rbp` GCC's CFI still names the save slot (it emits no
      // DW_CFA_restore there), which holds the same value: only a saved rbp is compared.
      if (f.fp_off != 0) {
        EXPECT_EQ(r->fp_rule, LJ_CFI_RULE_AT_CFA) << std::hex << at;
        EXPECT_EQ(r->fp_offset, f.fp_off) << std::hex << at;
      }
    }
  }
  std::cout << "[ glue ] libc: " << checked << " functions accepted and compared at " << compared
            << " instructions, " << rejected << " refused, " << undescribed
            << " with CFI that does not describe their pushes\n";
  // Most of libc's functions move rsp only by pushes and constants; the rest (rbp frames
  // restored through rbp arithmetic, stack probes, computed jumps) are refused, not guessed.
  EXPECT_GT(checked, 1000u) << rejected << " rejected";
  EXPECT_GT(compared, 20000u);
  EXPECT_GT(rejected, 100u);
  EXPECT_LT(undescribed, 10u);
}

// Debian's own binaries: the glue of each gets rows, none where its CFI already has them.
TEST(GlueCode, DebianBinariesGetRowsForInitFiniAndCrtstuff) {
  for (const char* path : {"/usr/bin/luajit", "/usr/lib/x86_64-linux-gnu/libm.so.6",
                           "/usr/lib/x86_64-linux-gnu/libgcc_s.so.1"}) {
    auto file = elf::ElfFile::open(path);
    ASSERT_TRUE(file.ok()) << file.message();
    auto table = build_unwind_table(**file);
    ASSERT_TRUE(table.ok()) << table.message();
    for (const char* section : {".init", ".fini"}) {
      const elf::Section* s = (*file)->section(section);
      ASSERT_NE(s, nullptr) << path << " " << section;
      const lj_cfi_row* r = table->row_at(s->addr);
      ASSERT_NE(r, nullptr);
      EXPECT_EQ(r->hint, LJ_CFI_OK) << path << " " << section;
      EXPECT_EQ(r->cfa_base, LJ_CFI_REG_SP);
      EXPECT_EQ(r->cfa_offset, 8) << path << " " << section;
    }
    size_t glue = 0;
    for (const Overlay& o : table->overlays()) {
      if (o.what.find("without CFI") == std::string::npos) continue;
      ++glue;
      EXPECT_FALSE(table->function_start(o.begin)) << path << " " << o.what;
    }
    // .init, .fini, crtstuff's frame_dummy, __do_global_dtors_aux and the tm_clones pair.
    EXPECT_GE(glue, 10u) << path;
  }
}

TEST(GlueCode, Arm64FilesGetNoGlueOverlays) {
  auto file = elf::ElfFile::open("/usr/aarch64-linux-gnu/lib/libc.so.6");
  ASSERT_TRUE(file.ok()) << file.message();
  EXPECT_TRUE(x86_glue_overlays(**file, {}).overlays.empty());
}

}  // namespace
}  // namespace ljprof::cfi
