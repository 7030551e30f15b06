// Byte-level tests of every matcher, both architectures, from the instruction forms documented
// in ../shared/notes (upstream/OpenResty/Tarantool VM sources, Tarantool 3.3 layout). The
// bytes come from GNU as; near misses (wrong base register, wrong sign of disp32, a store of a
// non-zero register, ...) must be rejected.
//
// Modern Tarantool (>= 2.6.3, GC64, mem_L) has no Debian binary: its forms use the measured
// Tarantool 3.3.0 layout (vmstate 440, cur_L 480, mem_L 488, jit_base 496, G->dispatch 4112,
// 96-byte C frame with the link at +48, EXIT = -6, CFUNC = -4).
#include <gtest/gtest.h>

#include "luajit/asm_support.h"
#include "luajit/matchers.h"
#include "luajit/proc_info.h"

namespace ljprof {
namespace {

using elf::Arch;
using luajit::Runtime;
using test::assemble_code;

constexpr int kR14 = 14;
constexpr int kX22 = 22;

// Tarantool 3.3 GC64 x86-64 lj_vm_exit_handler core (vm_x64.dasc ->vm_exit_handler), with
// DISPATCH = G + 4112: vmstate -0xe58, cur_L -0xe30, jit_base -0xe20.
std::string tt33_exit_handler_x86(const std::string& clear = "mov qword ptr [r14 - 0xe20], 0",
                                  const std::string& set_exit = "mov dword ptr [r14 - 0xe58], -6") {
  return "mov ecx, dword ptr [r14 - 0xe58]\n" + set_exit +
         "\n"
         "mov dword ptr [r14 - 0xdc], eax\n"
         "sub rsp, 0x80\n"
         "mov rbp, qword ptr [r14 - 0xe30]\n"
         "mov rdx, qword ptr [r14 - 0xe20]\n"
         "mov qword ptr [r14 - 0xc28], rbp\n"
         "mov qword ptr [rbp + 0x20], rdx\n"
         "mov rsi, rsp\n"
         "lea rdi, [r14 - 0xca8]\n" +
         clear +
         "\n"
         "call 1f\n"
         "mov rcx, qword ptr [rbp + 0x50]\n"
         "and rcx, -4\n"
         "mov qword ptr [rcx + 0x10], rbp\n"
         "mov rdx, qword ptr [rbp + 0x20]\n"
         "mov rbx, qword ptr [rcx + 0x18]\n"
         "1: ret\n";
}

TEST(MatchLuaClose, X86Gc64) {
  auto a = assemble_code(Arch::X86_64,
                         "push rbp\n push rbx\n mov rbp, qword ptr [rdi + 0x10]\n"
                         "mov rbx, qword ptr [rbp + 0xc0]\n mov rdi, rbx\n call 1f\n"
                         "mov qword ptr [rbp + 0x170], 0\n and dword ptr [rbp + 0x380], -2\n"
                         "1: ret\n");
  auto m = luajit::match_lua_close(a.code("lua_close"));
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_EQ(m->glref_offset, 16);
  EXPECT_EQ(m->ref_width, 8);
  EXPECT_EQ(m->cur_L, 0x170);
  EXPECT_EQ(m->cur_L_store.bytes, "48 c7 85 70 01 00 00 00 00 00 00");
}

TEST(MatchLuaClose, X86NonGc64) {
  auto a = assemble_code(Arch::X86_64,
                         "push rbp\n mov rbp, rsp\n mov r12d, dword ptr [rdi + 8]\n"
                         "mov ebx, dword ptr [r12 + 0xa0]\n mov rdi, rbx\n call 1f\n"
                         "mov dword ptr [r12 + 0x118], 0\n 1: ret\n");
  auto m = luajit::match_lua_close(a.code("lua_close"));
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_EQ(m->glref_offset, 8);
  EXPECT_EQ(m->ref_width, 4);
  EXPECT_EQ(m->cur_L, 0x118);
}

TEST(MatchLuaClose, RejectsStoreThroughAnotherRegisterOrNonZero) {
  auto other = assemble_code(Arch::X86_64,
                             "mov rbp, qword ptr [rdi + 0x10]\n mov rbx, rsi\n"
                             "mov qword ptr [rbx + 0x170], 0\n ret\n");
  EXPECT_FALSE(luajit::match_lua_close(other.code("lua_close")).ok());
  auto nonzero = assemble_code(Arch::X86_64,
                               "mov rbp, qword ptr [rdi + 0x10]\n"
                               "mov qword ptr [rbp + 0x170], 1\n ret\n");
  auto r = luajit::match_lua_close(nonzero.code("lua_close"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("lua_close"), std::string::npos) << r.message();
  auto clobbered = assemble_code(Arch::X86_64,
                                 "mov rbp, qword ptr [rdi + 0x10]\n mov rbp, rsi\n"
                                 "mov qword ptr [rbp + 0x170], 0\n ret\n");
  EXPECT_FALSE(luajit::match_lua_close(clobbered.code("lua_close")).ok());
}

TEST(MatchLuaClose, Arm64AndNonZeroRegisterNearMiss) {
  auto a = assemble_code(Arch::AArch64,
                         "ldr x20, [x0, #16]\n ldr x19, [x20, #192]\n bl 1f\n"
                         "str xzr, [x20, #368]\n str wzr, [x20, #964]\n 1: ret\n");
  auto m = luajit::match_lua_close(a.code("lua_close"));
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_EQ(m->glref_offset, 16);
  EXPECT_EQ(m->ref_width, 8);
  EXPECT_EQ(m->cur_L, 368);
  EXPECT_EQ(m->cur_L_store.bytes, "9f ba 00 f9");  // f900ba9f little-endian
  auto miss = assemble_code(Arch::AArch64, "ldr x20, [x0, #16]\n str x1, [x20, #368]\n ret\n");
  EXPECT_FALSE(luajit::match_lua_close(miss.code("lua_close")).ok());
}

TEST(MatchExitHandler, ModernTarantoolX86Gc64) {
  auto a = assemble_code(Arch::X86_64, tt33_exit_handler_x86());
  auto m = luajit::match_exit_handler(a.code("lj_vm_exit_handler"));
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_EQ(m->dispatch_reg, kR14);
  EXPECT_EQ(m->ref_width, 8);
  EXPECT_EQ(m->vmstate, -0xe58);
  EXPECT_EQ(m->exit_state, -6);
  EXPECT_EQ(m->cur_L, -0xe30);
  EXPECT_EQ(m->jit_base, -0xe20);
  EXPECT_EQ(m->L_base, 0x20);
  EXPECT_EQ(m->L_cframe, 0x50);
  EXPECT_EQ(m->cframe_L, 0x10);
  EXPECT_EQ(m->cframe_PC, 0x18);
  // The exit-handler store is at the mem_L-shifted slot: G + 4112 - 0xe20 = 496, not
  // cur_L + 8 = 488 (that is mem_L).
  auto jb = luajit::choose_jit_base(Runtime::Tarantool, m, 4112, 480, 8);
  ASSERT_TRUE(jb.ok()) << jb.message();
  EXPECT_EQ(jb->value, 496);
  EXPECT_EQ(jb->source, "exit-handler");
  EXPECT_FALSE(jb->evidence.empty());
  bool saw_clear = false;
  for (const auto& e : jb->evidence) saw_clear |= e.bytes == "49 c7 86 e0 f1 ff ff 00 00 00 00";
  EXPECT_TRUE(saw_clear);
}

TEST(MatchExitHandler, WrongBaseRegisterIsRejectedAndTarantoolFailsClosed) {
  auto a = assemble_code(Arch::X86_64, tt33_exit_handler_x86("mov qword ptr [r13 - 0xe20], 0"));
  auto m = luajit::match_exit_handler(a.code("lj_vm_exit_handler"));
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message.find("lj_vm_exit_handler"), std::string::npos) << m.message();
  auto tt = luajit::choose_jit_base(Runtime::Tarantool, m, 4112, 480, 8);
  ASSERT_FALSE(tt.ok());
  EXPECT_NE(tt.message().find("mem_L"), std::string::npos) << tt.message();
  auto lj = luajit::choose_jit_base(Runtime::LuaJIT, m, 4112, 368, 8);
  ASSERT_TRUE(lj.ok());
  EXPECT_EQ(lj->value, 376);
  EXPECT_EQ(lj->source, "fallback");
}

TEST(MatchExitHandler, PositiveDisp32IsRejected) {
  std::string src = tt33_exit_handler_x86("mov qword ptr [r14 + 0x1e0], 0");
  auto a = assemble_code(Arch::X86_64, src);
  auto m = luajit::match_exit_handler(a.code("lj_vm_exit_handler"));
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("negative"), std::string::npos) << m.message();
}

TEST(MatchExitHandler, MissingExitStateIsRejected) {
  auto a = assemble_code(Arch::X86_64, tt33_exit_handler_x86("mov qword ptr [r14 - 0xe20], 0",
                                                             "mov dword ptr [r14 - 0xe58], eax"));
  auto m = luajit::match_exit_handler(a.code("lj_vm_exit_handler"));
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("EXIT"), std::string::npos) << m.message();
}

TEST(MatchExitHandler, NonGc64X86FormWith32BitAccesses) {
  // vm_x86.dasc in X64 mode (Tarantool 2.6 / upstream non-GC64): DISPATCH reloaded from the
  // exit stub, 32-bit GC refs.
  auto a = assemble_code(Arch::X86_64,
                         "mov r14d, dword ptr [rbp + 0]\n"
                         "mov ecx, dword ptr [r14 - 0xbd0]\n"
                         "mov dword ptr [r14 - 0xbd0], -4\n"
                         "mov ebp, dword ptr [r14 - 0xb30]\n"
                         "mov edx, dword ptr [r14 - 0xb2c]\n"
                         "mov qword ptr [r14 - 0xa20], rbp\n"
                         "mov dword ptr [rbp + 0x10], edx\n"
                         "mov rsi, rsp\n lea edi, [r14 - 0xa88]\n"
                         "mov dword ptr [r14 - 0xb2c], 0\n call 1f\n"
                         "mov rcx, qword ptr [rbp + 0x30]\n and rcx, -4\n mov rsp, rcx\n"
                         "mov dword ptr [rcx + 0x18], ebp\n mov edx, dword ptr [rbp + 0x10]\n"
                         "mov ebx, dword ptr [rcx + 0x1c]\n 1: ret\n");
  auto m = luajit::match_exit_handler(a.code());
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_EQ(m->ref_width, 4);
  EXPECT_EQ(m->jit_base, -0xb2c);
  EXPECT_EQ(m->cur_L, -0xb30);
  EXPECT_EQ(m->vmstate, -0xbd0);
  EXPECT_EQ(m->exit_state, -4);
  EXPECT_EQ(m->L_base, 0x10);
  EXPECT_EQ(m->L_cframe, 0x30);
  EXPECT_EQ(m->cframe_L, 0x18);
  EXPECT_EQ(m->cframe_PC, 0x1c);
}

// Tarantool 3.3 arm64 (vm_arm64.dasc ->vm_exit_handler): GL = x22 = G, jit_base #496.
std::string tt33_exit_handler_arm64(const std::string& clear = "str xzr, [x22, #496]") {
  return "mov w3, #-6\n"
         "ldr x23, [x22, #480]\n"
         "ldr x19, [x22, #496]\n"
         "str w3, [x22, #440]\n"
         "str x19, [x23, #32]\n"
         "str x23, [x22, #856]\n" +
         clear +
         "\n"
         "add x0, x22, #0x2d8\n mov x1, sp\n bl 1f\n"
         "ldr x1, [x23, #80]\n ldr x19, [x23, #32]\n and sp, x1, #-4\n"
         "ldr x21, [sp, #8]\n str x23, [sp, #16]\n 1: ret\n";
}

TEST(MatchExitHandler, ModernTarantoolArm64) {
  auto a = assemble_code(Arch::AArch64, tt33_exit_handler_arm64());
  auto m = luajit::match_exit_handler(a.code("lj_vm_exit_handler"));
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_EQ(m->dispatch_reg, kX22);
  EXPECT_EQ(m->jit_base, 496);
  EXPECT_EQ(m->cur_L, 480);
  EXPECT_EQ(m->vmstate, 440);
  EXPECT_EQ(m->exit_state, -6);
  EXPECT_EQ(m->L_base, 32);
  EXPECT_EQ(m->L_cframe, 80);
  EXPECT_EQ(m->cframe_PC, 8);
  EXPECT_EQ(m->cframe_L, 16);
  auto jb = luajit::choose_jit_base(Runtime::Tarantool, m, 0, 480, 8);
  ASSERT_TRUE(jb.ok()) << jb.message();
  EXPECT_EQ(jb->value, 496);
  bool saw = false;
  for (const auto& e : jb->evidence) saw |= e.bytes == "df fa 00 f9";  // 0xf900fadf
  EXPECT_TRUE(saw);
}

TEST(MatchExitHandler, Arm64NonZeroRegisterOrWrongBaseIsRejected) {
  auto nonzero = assemble_code(Arch::AArch64, tt33_exit_handler_arm64("str x1, [x22, #496]"));
  EXPECT_FALSE(luajit::match_exit_handler(nonzero.code()).ok());
  auto base = assemble_code(Arch::AArch64, tt33_exit_handler_arm64("str xzr, [x21, #496]"));
  EXPECT_FALSE(luajit::match_exit_handler(base.code()).ok());
}

TEST(MatchVmstates, TarantoolNumberingFromFunccAndExitInterp) {
  auto funcc = assemble_code(Arch::X86_64,
                             "mov dword ptr [rbp + 0x28], eax\n"
                             "mov dword ptr [r14 - 0xe58], -4\n call r15\n"
                             "mov qword ptr [r14 - 0xe30], rbp\n"
                             "mov dword ptr [r14 - 0xe58], -2\n ret\n");
  auto c = luajit::match_c_call_state(funcc.code("lj_BC_FUNCC"), kR14, -0xe58);
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->state, -4);
  auto interp = assemble_code(Arch::X86_64,
                              "mov qword ptr [rbp + 0x20], rdx\n"
                              "mov qword ptr [r14 - 0xe20], 0\n"
                              "mov dword ptr [r14 - 0xe58], -1\n mov eax, dword ptr [rbx]\n");
  auto i = luajit::match_exit_interp(interp.code("vm_exit_interp"), kR14, -0xe20, -0xe58);
  ASSERT_TRUE(i.ok()) << i.message();
  EXPECT_EQ(i->state, -1);
  auto n = luajit::classify_vmstate_numbering(-1, -4, -6);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, luajit::VmstateNumbering::Tarantool);
  auto up = luajit::classify_vmstate_numbering(-1, -2, -4);
  ASSERT_TRUE(up.ok());
  EXPECT_EQ(*up, luajit::VmstateNumbering::Upstream);
  EXPECT_FALSE(luajit::classify_vmstate_numbering(-1, -4, -4).ok());
  EXPECT_FALSE(luajit::classify_vmstate_numbering(-1, -3, -5).ok());
}

TEST(MatchVmstates, Arm64ConstantThroughARegister) {
  auto funcc = assemble_code(Arch::AArch64,
                             "mov w8, #-4\n mov x0, x23\n str w8, [x22, #440]\n blr x3\n ret\n");
  auto c = luajit::match_c_call_state(funcc.code(), kX22, 440);
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->state, -4);
  // A register whose value is not a known constant is not a vmstate store.
  auto unknown = assemble_code(Arch::AArch64, "ldr w8, [x0]\n str w8, [x22, #440]\n blr x3\n");
  EXPECT_FALSE(luajit::match_c_call_state(unknown.code(), kX22, 440).ok());
  auto interp = assemble_code(Arch::AArch64,
                              "str xzr, [x22, #496]\n mov w3, #-1\n ldrb w17, [x21]\n"
                              "str w3, [x22, #440]\n ret\n");
  auto i = luajit::match_exit_interp(interp.code(), kX22, 496, 440);
  ASSERT_TRUE(i.ok()) << i.message();
  EXPECT_EQ(i->state, -1);
}

TEST(MatchDispatchSetup, X86AgreeingAndDisagreeingSites) {
  auto a = assemble_code(Arch::X86_64,
                         "mov r14, qword ptr [rbp + 0x10]\n mov r15, qword ptr [rbp + 0x50]\n"
                         "add r14, 0x1010\n ret\n"
                         "mov r14, qword ptr [rbx + 0x10]\n add r14, 0x1010\n ret\n");
  auto m = luajit::match_dispatch_setup(a.code(), 16, 8);
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_EQ(m->dispatch_reg, kR14);
  EXPECT_EQ(m->dispatch_distance, 0x1010);
  EXPECT_EQ(m->sites, 2u);
  EXPECT_FALSE(m->register_is_g);
  auto bad = assemble_code(Arch::X86_64,
                           "mov r14, qword ptr [rbp + 0x10]\n add r14, 0x1010\n ret\n"
                           "mov r14, qword ptr [rbx + 0x10]\n add r14, 0xf80\n ret\n");
  EXPECT_FALSE(luajit::match_dispatch_setup(bad.code(), 16, 8).ok());
  auto width = assemble_code(Arch::X86_64, "mov r14d, dword ptr [rbp + 0x10]\n add r14d, 0x1010\n");
  EXPECT_FALSE(luajit::match_dispatch_setup(width.code(), 16, 8).ok());
}

TEST(MatchDispatchSetup, Arm64MostUsedSmallestDisplacement) {
  const std::string next = "add x9, x22, w16, uxtb #3\n ldr x8, [x9, #3944]\n br x8\n";
  auto a = assemble_code(Arch::AArch64, "ldr x22, [x23, #16]\n" + next + next + next +
                                            "add x9, x22, w16, uxtb #3\n ldr x8, [x9, #5176]\n"
                                            "br x8\n");
  auto m = luajit::match_dispatch_setup(a.code(), 16, 8);
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_EQ(m->dispatch_reg, kX22);
  EXPECT_TRUE(m->register_is_g);
  EXPECT_EQ(m->dispatch_distance, 3944);
  auto no_glref = assemble_code(Arch::AArch64, next);
  EXPECT_FALSE(luajit::match_dispatch_setup(no_glref.code(), 16, 8).ok());
}

TEST(MatchCframeLink, TarantoolNinetySixByteFrameAndCfiCrossCheck) {
  auto a = assemble_code(Arch::X86_64,
                         "mov ebp, edi\n mov r14, qword ptr [rbp + 0x10]\n"
                         "mov r15, qword ptr [rbp + 0x50]\n mov qword ptr [rsp + 0x30], r15\n"
                         "mov qword ptr [rsp + 0x10], rbp\n add r14, 0x1010\n"
                         "mov qword ptr [rbp + 0x50], rsp\n ret\n");
  auto m = luajit::match_cframe_link(a.code(), 0x50);
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_EQ(m->prev_offset, 48);
  luajit::VmCframe frame;
  frame.arch = Arch::X86_64;
  frame.cfa_base = LJ_CFI_REG_SP;
  frame.cfa_offset = 96;
  EXPECT_TRUE(luajit::check_cframe_against_cfi(Arch::X86_64, 48, frame).ok());
  EXPECT_FALSE(luajit::check_cframe_against_cfi(Arch::X86_64, 32, frame).ok());
  frame.cfa_offset = 80;
  EXPECT_TRUE(luajit::check_cframe_against_cfi(Arch::X86_64, 32, frame).ok());
  EXPECT_FALSE(luajit::check_cframe_against_cfi(Arch::X86_64, 48, frame).ok());
  // Storing the previous cframe somewhere other than the stack is not the link.
  auto miss = assemble_code(Arch::X86_64,
                            "mov r15, qword ptr [rbp + 0x50]\n mov qword ptr [rbx + 0x30], r15\n"
                            "mov qword ptr [rbp + 0x50], rsp\n ret\n");
  EXPECT_FALSE(luajit::match_cframe_link(miss.code(), 0x50).ok());
}

TEST(MatchCframeLink, Arm64LinkAtSpZero) {
  auto a = assemble_code(Arch::AArch64,
                         "ldr x28, [x0, #80]\n str w2, [sp, #40]\n mov x23, x0\n"
                         "str x0, [sp, #16]\n ldr x22, [x23, #16]\n mov x19, x1\n"
                         "str x0, [sp, #8]\n mov x8, sp\n str x28, [sp]\n str x8, [x23, #80]\n");
  auto m = luajit::match_cframe_link(a.code(), 80);
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_EQ(m->prev_offset, 0);
  luajit::VmCframe frame;
  frame.arch = Arch::AArch64;
  frame.cfa_base = LJ_CFI_REG_FP;
  frame.cfa_offset = 16;
  EXPECT_TRUE(luajit::check_cframe_against_cfi(Arch::AArch64, 0, frame).ok());
  EXPECT_FALSE(luajit::check_cframe_against_cfi(Arch::AArch64, 8, frame).ok());
}

TEST(MatchJloop, BothArchesAndWrongJumpRegister) {
  auto x = assemble_code(Arch::X86_64,
                         "mov rcx, qword ptr [r14 - 0xb28]\n mov rcx, qword ptr [rcx + rax*8]\n"
                         "mov rax, qword ptr [rcx + 0x58]\n mov qword ptr [r14 - 0xe20], rdx\n"
                         "sub rsp, 0x10\n jmp rax\n");
  auto m = luajit::match_jloop(x.code("lj_BC_JLOOP"), kR14);
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_EQ(m->trace_array, -0xb28);
  EXPECT_EQ(m->trace_mcode, 0x58);
  auto wrong = assemble_code(Arch::X86_64,
                             "mov rcx, qword ptr [r14 - 0xb28]\n mov rcx, qword ptr [rcx + rax*8]\n"
                             "mov rax, qword ptr [rcx + 0x58]\n jmp rbx\n");
  EXPECT_FALSE(luajit::match_jloop(wrong.code(), kR14).ok());
  auto a = assemble_code(Arch::AArch64,
                         "ldr x0, [x22, #1088]\n mov w1, #0\n ldr x28, [x0, x28, lsl #3]\n"
                         "str w1, [x22, #184]\n ldr x27, [x28, #88]\n str x19, [x22, #376]\n"
                         "sub sp, sp, #16\n br x27\n");
  auto am = luajit::match_jloop(a.code(), kX22);
  ASSERT_TRUE(am.ok()) << am.message();
  EXPECT_EQ(am->trace_array, 1088);
  EXPECT_EQ(am->trace_mcode, 88);
}

TEST(MatchTraceinfo, JitChecktraceThroughG) {
  auto x = assemble_code(Arch::X86_64,
                         "push rbp\n mov rbx, rdi\n call 1f\n mov ecx, dword ptr [rbx + 8]\n"
                         "cmp eax, dword ptr [rcx + 0x33c]\n jae 1f\n"
                         "mov rcx, qword ptr [rcx + 0x330]\n mov eax, eax\n"
                         "mov r12d, dword ptr [rcx + rax*4]\n 1: ret\n");
  auto m = luajit::match_traceinfo(x.code("lj_cf_jit_util_traceinfo"), 8, 4);
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_EQ(m->trace_array, 0x330);
  // G loaded from something other than L->glref is not G.
  EXPECT_FALSE(luajit::match_traceinfo(x.code(), 16, 8).ok());
  auto a = assemble_code(Arch::AArch64,
                         "mov x19, x0\n ldr x2, [x19, #16]\n ldr w3, [x2, #1100]\n"
                         "ldr x2, [x2, #1088]\n ldr x20, [x2, w1, uxtw #3]\n ret\n");
  auto am = luajit::match_traceinfo(a.code(), 16, 8);
  ASSERT_TRUE(am.ok()) << am.message();
  EXPECT_EQ(am->trace_array, 1088);
}

// tarantool/luajit GC64 built for arm64 by aarch64-linux-gnu-gcc 12 -O2 (the any-build issue,
// from aarch64-linux-gnu-objdump -d of lj_cf_jit_util_traceinfo after lj_lib_checkint): the
// J->trace displacement is split between an `add` and the load's own offset, 0x348 + 360.
TEST(MatchTraceinfo, Arm64DisplacementSplitByAdd) {
  const std::string head = "mov x19, x0\n bl 1f\n mov w1, w0\n ldr x2, [x19, #16]\n";
  const std::string tail =
      "ldr w3, [x2, #372]\n cmp w1, w3\n b.cs 1f\n"
      "ldr x2, [x2, #360]\n ldr x20, [x2, w1, uxtw #3]\n 1: ret\n";
  auto a = assemble_code(Arch::AArch64, head + "add x2, x2, #0x348\n" + tail);
  auto m = luajit::match_traceinfo(a.code("lj_cf_jit_util_traceinfo"), 16, 8);
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_EQ(m->trace_array, 0x348 + 360);
  EXPECT_EQ(m->evidence.size(), 4u);  // G load, the add, J->trace, J->trace[traceno]
  // An offset added to a register that does not hold G says nothing about J->trace.
  auto other = assemble_code(Arch::AArch64, head + "add x2, x3, #0x348\n" + tail);
  EXPECT_FALSE(luajit::match_traceinfo(other.code(), 16, 8).ok());
  // The same split on x86-64 (`lea` into another register, then the load).
  auto x = assemble_code(Arch::X86_64,
                         "mov rbx, rdi\n call 1f\n mov rcx, qword ptr [rbx + 0x10]\n"
                         "lea rdx, [rcx + 0x348]\n cmp eax, dword ptr [rdx + 0x174]\n jae 1f\n"
                         "mov rdx, qword ptr [rdx + 0x168]\n mov eax, eax\n"
                         "mov r12, qword ptr [rdx + rax*8]\n 1: ret\n");
  auto xm = luajit::match_traceinfo(x.code(), 16, 8);
  ASSERT_TRUE(xm.ok()) << xm.message();
  EXPECT_EQ(xm->trace_array, 0x348 + 0x168);
}

TEST(MatchTolstring, HeaderSizesOfBothLayouts) {
  auto gc64 = assemble_code(Arch::X86_64,
                            "test rbx, rbx\n je 1f\n mov ecx, dword ptr [rax + 0x14]\n"
                            "mov qword ptr [rbx], rcx\n 1: add rax, 0x18\n add rsp, 0x28\n"
                            "pop rbx\n ret\n");
  auto m = luajit::match_tolstring(gc64.code("lua_tolstring"));
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_EQ(m->len_offset, 0x14);
  EXPECT_EQ(m->data_offset, 24);
  auto tt = assemble_code(Arch::X86_64,
                          "mov ebx, dword ptr [rax + 0xc]\n mov qword ptr [rdx], rbx\n"
                          "add rax, 0x10\n pop rbx\n ret\n");
  auto t = luajit::match_tolstring(tt.code());
  ASSERT_TRUE(t.ok()) << t.message();
  EXPECT_EQ(t->len_offset, 12);
  EXPECT_EQ(t->data_offset, 16);
  auto a = assemble_code(Arch::AArch64,
                         "ldr w0, [x3, #20]\n str x0, [x19]\n add x0, x3, #0x18\n"
                         "ldp x21, x30, [sp, #16]\n ret\n");
  auto am = luajit::match_tolstring(a.code());
  ASSERT_TRUE(am.ok()) << am.message();
  EXPECT_EQ(am->data_offset, 24);
  // No return after the pointer arithmetic: not the strdata() return.
  auto miss = assemble_code(Arch::X86_64,
                            "mov ecx, dword ptr [rax + 0x14]\n add rax, 0x18\n mov rax, rcx\n"
                            "ret\n");
  EXPECT_FALSE(luajit::match_tolstring(miss.code()).ok());
}

TEST(MatchGettop, BothArches) {
  auto x = assemble_code(Arch::X86_64,
                         "mov rax, qword ptr [rdi + 0x28]\n sub rax, qword ptr [rdi + 0x20]\n"
                         "sar rax, 3\n ret\n");
  auto m = luajit::match_gettop(x.code());
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_EQ(m->top_offset, 0x28);
  EXPECT_EQ(m->base_offset, 0x20);
  auto a = assemble_code(Arch::AArch64,
                         "ldp x1, x0, [x0, #32]\n sub x0, x0, x1\n ubfx x0, x0, #3, #32\n ret\n");
  auto am = luajit::match_gettop(a.code());
  ASSERT_TRUE(am.ok()) << am.message();
  EXPECT_EQ(am->top_offset, 40);
  EXPECT_EQ(am->base_offset, 32);
  auto swapped = assemble_code(Arch::X86_64,
                               "mov rax, qword ptr [rdi + 0x20]\n sub rax, qword ptr [rdi + 0x28]\n"
                               "ret\n");
  EXPECT_FALSE(luajit::match_gettop(swapped.code()).ok());
}

// Undecodable bytes (disasm's Gap instructions) end every window: no pattern matches across
// them, on either architecture. Each input is one the tests above match without the gap.
bool gap_before(const test::Assembled& a, luajit::InsnKind next) {
  for (size_t i = 0; i + 1 < a.insns.size(); ++i) {
    if (a.insns[i].kind == luajit::InsnKind::Gap && a.insns[i + 1].kind == next) return true;
  }
  return false;
}

TEST(MatchAcrossGap, X86LuaCloseStoreAfterUndecodableByte) {
  const std::string head =
      "push rbp\n push rbx\n mov rbp, qword ptr [rdi + 0x10]\n"
      "mov rbx, qword ptr [rbp + 0xc0]\n mov rdi, rbx\n call 1f\n";
  const std::string tail = "mov qword ptr [rbp + 0x170], 0\n 1: ret\n";
  auto whole = assemble_code(Arch::X86_64, head + tail);
  ASSERT_TRUE(luajit::match_lua_close(whole.code("lua_close")).ok());
  // 0x06 (push es) is invalid in 64-bit mode.
  auto split = assemble_code(Arch::X86_64, head + ".byte 0x06\n" + tail);
  ASSERT_TRUE(gap_before(split, luajit::InsnKind::Mov));
  auto m = luajit::match_lua_close(split.code("lua_close"));
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("no zero store through g"), std::string::npos) << m.message();
}

TEST(MatchAcrossGap, X86ExitHandlerClearThenGapThenCall) {
  auto a = assemble_code(Arch::X86_64,
                         tt33_exit_handler_x86("mov qword ptr [r14 - 0xe20], 0\n .byte 0x06"));
  ASSERT_TRUE(gap_before(a, luajit::InsnKind::CallDirect));
  EXPECT_FALSE(luajit::match_exit_handler(a.code("lj_vm_exit_handler")).ok());
  // vm_exit_interp: a Gap right after the jit_base clear may hide a call.
  auto interp = assemble_code(Arch::X86_64,
                              "mov qword ptr [r14 - 0xe20], 0\n .byte 0x06\n"
                              "mov dword ptr [r14 - 0xe58], -1\n mov eax, dword ptr [rbx]\n");
  ASSERT_TRUE(gap_before(interp, luajit::InsnKind::Mov));
  EXPECT_FALSE(luajit::match_exit_interp(interp.code(), kR14, -0xe20, -0xe58).ok());
}

TEST(MatchAcrossGap, Arm64ExitHandlerAndJloop) {
  // 0x00000000 is in no allocated AArch64 encoding space.
  auto eh = assemble_code(Arch::AArch64,
                          tt33_exit_handler_arm64("str xzr, [x22, #496]\n .inst 0x00000000"));
  ASSERT_TRUE(gap_before(eh, luajit::InsnKind::Add));
  EXPECT_FALSE(luajit::match_exit_handler(eh.code()).ok());
  auto jloop = assemble_code(Arch::AArch64,
                             "ldr x0, [x22, #1088]\n .inst 0x00000000\n"
                             "ldr x28, [x0, x28, lsl #3]\n ldr x27, [x28, #88]\n br x27\n");
  ASSERT_TRUE(gap_before(jloop, luajit::InsnKind::Load));
  EXPECT_FALSE(luajit::match_jloop(jloop.code(), kX22).ok());
}

}  // namespace
}  // namespace ljprof
