// The caller's rbx through native steps (cfi_row.h LJ_CFI_BX_*), on a synthetic stack shaped
// like glibc's lazy binding: a function that saved rbx (like _dl_fixup, its FDE's DW_CFA_offset
// rbx), under a trampoline whose CFA is rbx + 32 (sysdeps/x86_64/dl-trampoline.h), under a
// root. The rbx the trampoline's rule needs comes from the save slot; a row that does not
// claim rbx (no CFI behind it) loses it, and the trampoline then ends the walk at "no CFI"
// instead of computing a CFA from another frame's value.
#include <gtest/gtest.h>

#include <cstring>
#include <map>

extern "C" {
#include "abi/walk_types.h"
#include "walker/native_walk.h"
}

namespace ljprof {
namespace {

constexpr uint64_t kSaver = 0x401000;       // saved rbx at CFA - 16, rbp at CFA - 24
constexpr uint64_t kTrampoline = 0x402000;  // CFA = rbx + 32
constexpr uint64_t kRoot = 0x403000;        // Stop row

uint8_t saver_bx_rule = LJ_CFI_BX_AT_CFA;

int lookup(void*, uint64_t pc, lj_cfi_row* row) {
  *row = lj_cfi_row{};
  row->hint = LJ_CFI_OK;
  row->ra_rule = LJ_CFI_RULE_AT_CFA;
  row->ra_offset = -8;
  row->fp_rule = LJ_CFI_RULE_SAME;
  row->bx_rule = LJ_CFI_BX_SAME;
  if (pc >= kSaver && pc < kSaver + 0x100) {
    row->pc_start = kSaver;
    row->cfa_base = LJ_CFI_REG_SP;
    row->cfa_offset = 32;
    row->bx_rule = saver_bx_rule;
    row->bx_offset = -16;
  } else if (pc >= kTrampoline && pc < kTrampoline + 0x100) {
    row->pc_start = kTrampoline;
    row->cfa_base = LJ_CFI_REG_BX;
    row->cfa_offset = 32;
  } else if (pc >= kRoot && pc < kRoot + 0x100) {
    row->pc_start = kRoot;
    row->hint = LJ_CFI_STOP;
  } else {
    return 1;
  }
  return 0;
}

// The stack, 8-byte words: the saver's frame at sp, the trampoline's aligned frame above it
// (whose size no rule gives), and the trampoline's entry rsp - 8 (its caller's rbx pushed
// there) that only rbx knows.
struct Stack {
  std::map<uint64_t, uint64_t> words;
  static constexpr uint64_t kSp = 0x7fff0000;
  static constexpr uint64_t kTrampolineRbx = 0x7fff0200;  // entry rsp - 8
  Stack() {
    words[kSp + 32 - 8] = kTrampoline + 0x7a;  // the saver's return address
    words[kSp + 32 - 16] = kTrampolineRbx;     // the trampoline's rbx, saved by the saver
    words[kTrampolineRbx + 32 - 8] = kRoot + 0x10;
  }
  static int read(void* ctx, uint64_t addr, void* dst, uint32_t len) {
    auto* self = static_cast<Stack*>(ctx);
    for (uint32_t i = 0; i < len; i += 8) {
      auto it = self->words.find(addr + i);
      if (it == self->words.end()) return -14;
      std::memcpy(static_cast<uint8_t*>(dst) + i, &it->second, std::min<uint32_t>(8, len - i));
    }
    return 0;
  }
  lj_walk_result walk() {
    lj_walk_env env{};
    env.mem = ljprof_mem_reader{&Stack::read, this};
    env.lookup = &lookup;
    lj_native_regs regs{};
    regs.pc = kSaver + 0x20;
    regs.sp = kSp;
    regs.fp_valid = 1;
    regs.vm_pc = 0x1234;  // the saver's own rbx: not the trampoline's
    regs.bx_valid = 1;
    lj_walk_result out{};
    lj_walk_native(&env, nullptr, &regs, 0, 0, &out);
    return out;
  }
};

TEST(SyntheticRbx, ATrampolineAboveAFrameThatSavedRbxReachesTheRoot) {
  saver_bx_rule = LJ_CFI_BX_AT_CFA;
  Stack s;
  const lj_walk_result out = s.walk();
  ASSERT_EQ(out.end, static_cast<uint32_t>(LJ_END_ROOT));
  ASSERT_EQ(out.nframes, 3u);
  EXPECT_EQ(out.frames[1].pc, kTrampoline + 0x7a);
  EXPECT_EQ(out.frames[2].kind, static_cast<uint32_t>(LJ_FRAME_ROOT));
  EXPECT_EQ(out.frames[2].pc, kRoot + 0x10);
}

TEST(SyntheticRbx, ARowThatDoesNotClaimRbxLosesIt) {
  saver_bx_rule = LJ_CFI_BX_UNKNOWN;
  Stack s;
  const lj_walk_result out = s.walk();
  EXPECT_EQ(out.end, static_cast<uint32_t>(LJ_END_NO_CFI));
  EXPECT_EQ(out.end_pc, kTrampoline + 0x7a);
  saver_bx_rule = LJ_CFI_BX_AT_CFA;
}

// "Same value" keeps the leaf's rbx, which here is not the trampoline's: the CFA it gives
// reads no return address (the walk ends at a read fault), as it would on a real stack whose
// CFI said so wrongly. The walker follows the rows; it never guesses around them.
TEST(SyntheticRbx, SameValueCarriesTheLeafsRbx) {
  saver_bx_rule = LJ_CFI_BX_SAME;
  Stack s;
  const lj_walk_result out = s.walk();
  EXPECT_NE(out.end, static_cast<uint32_t>(LJ_END_ROOT));
  saver_bx_rule = LJ_CFI_BX_AT_CFA;
}

}  // namespace
}  // namespace ljprof
