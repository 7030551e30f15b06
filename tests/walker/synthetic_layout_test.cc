// The walker on a layout no Debian package has: modern Tarantool (>= 2.6.3, x86-64 GC64) whose
// VM C frame is 96 bytes with the previous-cframe link at 6*8 (../shared/notes/
// tarantool-3.3-layout.md: "+16 L, +24 PC, +32 saved vmstate, +48 prev cframe, RA at +88").
// The memory image is built here from those documented rules and from lj_frame.h's two-slot
// (LJ_FR2) frame layout; it is run through the same natively compiled walker as real cores.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <vector>

extern "C" {
#include "abi/walk_types.h"
#include "walker/native_walk.h"
}

namespace ljprof {
namespace {

// A sparse little-endian memory image.
class Image {
 public:
  void put64(uint64_t addr, uint64_t v) { put(addr, &v, 8); }
  void put32(uint64_t addr, uint32_t v) { put(addr, &v, 4); }
  void put8(uint64_t addr, uint8_t v) { put(addr, &v, 1); }
  void put(uint64_t addr, const void* src, size_t len) {
    const auto* p = static_cast<const uint8_t*>(src);
    for (size_t i = 0; i < len; ++i) bytes_[addr + i] = p[i];
  }
  static int read(void* ctx, uint64_t addr, void* dst, uint32_t len) {
    auto* self = static_cast<Image*>(ctx);
    auto* out = static_cast<uint8_t*>(dst);
    for (uint32_t i = 0; i < len; ++i) {
      auto it = self->bytes_.find(addr + i);
      if (it == self->bytes_.end()) {
        std::memset(dst, 0, len);
        return -14;
      }
      out[i] = it->second;
    }
    return 0;
  }

 private:
  std::map<uint64_t, uint8_t> bytes_;
};

// Code ranges of the synthetic process and their CFI rows.
constexpr uint64_t kLeafFn = 0x401000;    // a C function called by the VM: push rbp; ...
constexpr uint64_t kVm = 0x500000;        // the interpreter (one Keep row, CFA = rsp + 96)
constexpr uint64_t kLuaPcall = 0x600000;  // lua_pcall's caller frame: CFA = rsp + 32
constexpr uint64_t kCoroInit = 0x700000;  // fiber entry: a Stop row (CFI marks RA undefined)

int lookup(void*, uint64_t pc, lj_cfi_row* row) {
  *row = lj_cfi_row{};
  row->ra_rule = LJ_CFI_RULE_AT_CFA;
  row->ra_offset = -8;
  row->fp_rule = LJ_CFI_RULE_AT_CFA;
  row->fp_offset = -16;
  row->cfa_base = LJ_CFI_REG_SP;
  if (pc >= kLeafFn && pc < kLeafFn + 0x100) {
    row->pc_start = kLeafFn;
    row->cfa_offset = 16;
  } else if (pc >= kVm && pc < kVm + 0x1000) {
    row->pc_start = kVm;
    row->cfa_offset = 96;  // Tarantool >= 2.6.3 CFRAME_SIZE
    row->hint = LJ_CFI_KEEP;
  } else if (pc >= kLuaPcall && pc < kLuaPcall + 0x100) {
    row->pc_start = kLuaPcall;
    row->cfa_offset = 32;
  } else if (pc >= kCoroInit && pc < kCoroInit + 0x100) {
    row->pc_start = kCoroInit;
    row->hint = LJ_CFI_STOP;
  } else {
    return 1;
  }
  return 0;
}

// lj_obj.h GC64 offsets (Tarantool 3.3 keeps upstream's lua_State and GCfunc layout).
lj_luajit_info modern_tarantool_layout() {
  lj_luajit_info l{};
  l.version = LJ_LUAJIT_INFO_VERSION;
  l.arch = LJ_INFO_ARCH_X86_64;
  l.gc64 = 1;
  l.ref_size = 8;
  l.cframe_ofs_L = 16;
  l.cframe_ofs_pc = 24;
  l.cframe_prev_offset = 48;
  l.L_glref = 16;
  l.L_base = 32;
  l.L_top = 40;
  l.L_maxstack = 48;
  l.L_stack = 56;
  l.L_cframe = 80;
  l.fn_ffid = 10;
  l.fn_pc = 32;
  l.fn_cfunc_f = 40;
  return l;
}

struct Fixture {
  Image mem;
  uint64_t sp0 = 0x7fff0000;     // the leaf C function's sp
  uint64_t cframe = 0x7fff0010;  // the VM C frame (= leaf's CFA)
  uint64_t L = 0x10000;
  uint64_t G = 0x20000;
  uint64_t stack = 0x30000;
  uint64_t fn_main = 0x40000, fn_inner = 0x40100, fn_c = 0x40200;
  uint64_t bc_main = 0x50000, bc_inner = 0x50100;

  explicit Fixture(uint64_t prev_cframe_value) {
    // Native: the leaf's return address is in the VM; its saved rbp below it.
    mem.put64(sp0 + 8, kVm + 0x40);
    mem.put64(sp0, 0);
    // The VM C frame (notes: L at +16, PC at +24, prev cframe at +48, RA at +88).
    mem.put64(cframe + 16, L);
    mem.put64(cframe + 24, bc_inner + 3 * 4);
    mem.put64(cframe + 48, prev_cframe_value);
    mem.put64(cframe + 96 - 16, 0);                // saved rbp
    mem.put64(cframe + 96 - 8, kLuaPcall + 0x10);  // return into lua_pcall's caller
    // lua_pcall's caller returns into the fiber entry (a proven root).
    mem.put64(cframe + 96 + 32 - 16, 0);
    mem.put64(cframe + 96 + 32 - 8, kCoroInit + 0x20);

    // Lua stack, LJ_FR2: [func][link] pairs; `frame` is the link slot, base = frame + 8.
    //   stack+0: dummy, stack+8: bottom link; main chunk frame at stack+24 (FRAME_CP from
    //   lua_pcall); inner function frame at stack+56 (called from main by a CALL at pc 5);
    //   a C function frame at stack+88 called from inner by a CALL at pc 3.
    const uint64_t f_main = stack + 24, f_inner = stack + 56, f_c = stack + 88;
    mem.put64(f_main - 8, fn_main | (uint64_t{0x1fff7} << 47));  // itype LJ_TFUNC (~8)
    mem.put64(f_main, (f_main - (stack + 8)) | 5);               // delta | FRAME_CP
    mem.put64(f_inner - 8, fn_inner | (uint64_t{0x1fff7} << 47));
    mem.put64(f_inner, bc_main + 6 * 4);  // return PC into main: the CALL is at pc 5
    mem.put64(f_c - 8, fn_c | (uint64_t{0x1fff7} << 47));
    mem.put64(f_c, bc_inner + 4 * 4);  // return PC into inner: the CALL is at pc 3
    // CALL A: callee frame = caller frame + (2 + A) slots (frame_prevl inverse).
    mem.put32(bc_main + 5 * 4, (static_cast<uint32_t>((f_inner - f_main) / 8 - 2) << 8) | 66);
    mem.put32(bc_inner + 3 * 4, (static_cast<uint32_t>((f_c - f_inner) / 8 - 2) << 8) | 66);
    // Functions: two Lua (ffid 0) and one C function (ffid 1, FF_C) with its entry.
    mem.put8(fn_main + 10, 0);
    mem.put64(fn_main + 32, bc_main);
    mem.put8(fn_inner + 10, 0);
    mem.put64(fn_inner + 32, bc_inner);
    mem.put8(fn_c + 10, 1);
    mem.put64(fn_c + 40, kLeafFn);
    // lua_State.
    mem.put64(L + 16, G);
    mem.put64(L + 32, f_c + 8);   // base
    mem.put64(L + 40, f_c + 16);  // top
    mem.put64(L + 48, stack + 8 * 64);
    mem.put64(L + 56, stack);
    mem.put64(L + 80, cframe | 1);  // CFRAME_RESUME bit set, masked by the walker
  }

  lj_walk_result walk(const lj_luajit_info& layout) {
    lj_walk_env env{};
    env.mem = ljprof_mem_reader{&Image::read, &mem};
    env.lookup = &lookup;
    lj_native_regs regs{};
    regs.pc = kLeafFn + 0x20;
    regs.sp = sp0;
    regs.fp_valid = 1;
    lj_walk_result out{};
    lj_walk_native(&env, &layout, &regs, 0, 0, &out);
    return out;
  }
};

TEST(SyntheticModernTarantool, NativeLuaNativeToTheFiberRoot) {
  Fixture fx(0);
  lj_walk_result out = fx.walk(modern_tarantool_layout());
  ASSERT_EQ(out.end, static_cast<uint32_t>(LJ_END_ROOT));
  ASSERT_EQ(out.nframes, 6u);
  EXPECT_EQ(out.frames[0].kind, static_cast<uint32_t>(LJ_FRAME_NATIVE));
  EXPECT_EQ(out.frames[0].pc, kLeafFn + 0x20);
  EXPECT_EQ(out.frames[1].kind, static_cast<uint32_t>(LJ_FRAME_CFUNC));
  EXPECT_EQ(out.frames[1].pc, fx.fn_c);
  EXPECT_EQ(out.frames[1].b, kLeafFn);
  EXPECT_EQ(out.frames[2].kind, static_cast<uint32_t>(LJ_FRAME_LUA));
  EXPECT_EQ(out.frames[2].pc, fx.fn_inner);
  EXPECT_EQ(out.frames[2].b, fx.bc_inner + 4 * 4);  // from the C function's link
  EXPECT_EQ(out.frames[3].kind, static_cast<uint32_t>(LJ_FRAME_LUA));
  EXPECT_EQ(out.frames[3].pc, fx.fn_main);
  EXPECT_EQ(out.frames[3].b, fx.bc_main + 6 * 4);
  // Stepping over the 96-byte VM frame lands in lua_pcall's caller, then the fiber root.
  EXPECT_EQ(out.frames[4].kind, static_cast<uint32_t>(LJ_FRAME_NATIVE));
  EXPECT_EQ(out.frames[4].pc, kLuaPcall + 0x10);
  EXPECT_EQ(out.frames[5].kind, static_cast<uint32_t>(LJ_FRAME_ROOT));
  EXPECT_EQ(out.frames[5].pc, kCoroInit + 0x20);
}

// The upstream link offset (4*8) on this layout reads the saved-vmstate slot as a pointer: the
// next VM entry would not be on the chain. With a second VM frame further down that is exactly
// what the cframe cross-check must catch instead of attaching the wrong Lua frames.
TEST(SyntheticModernTarantool, WrongLinkOffsetFailsClosedAtTheNextVmEntry) {
  Fixture fx(0);
  // Make lua_pcall's caller return into the VM again (a nested C -> Lua boundary) with a
  // second C frame right above it, whose lua_State is the same L.
  const uint64_t second = fx.cframe + 96 + 32;
  fx.mem.put64(fx.cframe + 96 + 32 - 8, kVm + 0x80);
  fx.mem.put64(second + 16, fx.L);
  // The real chain: the first frame's link at +48 names the second frame; +32 holds a saved
  // vmstate (~LJ_VMST_INTERP in Tarantool's numbering: -1).
  fx.mem.put64(fx.cframe + 48, second);
  fx.mem.put64(fx.cframe + 32, static_cast<uint64_t>(-1));
  fx.mem.put64(second + 48, 0);  // the end of the chain
  fx.mem.put64(second + 96 - 16, 0);
  fx.mem.put64(second + 96 - 8, kCoroInit + 0x20);

  lj_luajit_info right = modern_tarantool_layout();
  lj_walk_result ok = fx.walk(right);
  // With the right offset the second entry is on the chain; the Lua stack is already exhausted
  // there (main was entered by FRAME_CP), so the walk goes on past it.
  EXPECT_EQ(ok.end, static_cast<uint32_t>(LJ_END_ROOT));

  lj_luajit_info wrong = right;
  wrong.cframe_prev_offset = 32;
  lj_walk_result bad = fx.walk(wrong);
  EXPECT_EQ(bad.end, static_cast<uint32_t>(LJ_END_CFRAME_MISMATCH));
}

}  // namespace
}  // namespace ljprof
