// The fibers of a Tarantool core's cords (CoreWalker::walk_fibers for the main cord, found by its
// static symbol, walk_cord_fibers for another thread's, found by its TLS cord_ptr;
// core/fiber_list.h reads the list) and the full stack of a switched-out fiber from its saved
// context.
#include <fmt/format.h>

#include <vector>

#include "core/core_walk.h"
#include "core/thread_pointers.h"

extern "C" {
#include "abi/walk_types.h"
#include "walker/native_walk.h"
}

namespace ljprof::core {

namespace {

// tarantool third_party/coro/coro.c, x86-64 CORO_ASM coro_transfer (the same in Debian's
// /usr/bin/tarantool 2.6: objdump -d shows push rbp, rbx, r12, r13, r14, r15; mov rsp,(rdi); ...;
// pop r15..rbp; pop rcx; jmp *rcx): the saved sp points at r15, and the words above it are r14,
// r13, r12, rbx, rbp, then the return address into coro_transfer's caller.
constexpr uint64_t kX86SavedR15 = 0, kX86SavedR14 = 1, kX86SavedR13 = 2, kX86SavedR12 = 3,
                   kX86SavedRbx = 4, kX86SavedRbp = 5, kX86SavedReturn = 6, kX86SavedWords = 7;

// The same file's AArch64 CORO_ASM coro_transfer (NUM_SAVED 20): `sub sp, sp, #8 * 20`, then
// stp x19..x28, x29/x30, d8..d15 pairs at [sp, #16 * i], and the new sp into prev->sp; resuming
// reloads them and does `add sp, x3, #8 * 20; ret` (to x30). A context coro_create made and
// nothing ran yet holds x19 = the function, x20 = its argument, x30 = coro_startup, all else 0.
constexpr uint64_t kA64SavedX19 = 0, kA64SavedX29 = 10, kA64SavedX30 = 11, kA64SavedWords = 20;

constexpr uint64_t kMaxSavedWords = 20;

// The registers coro_transfer's caller sees once the fiber is switched to again, from the words
// saved at `sp`.
lj_native_regs x86_saved_context(const uint64_t* w, uint64_t sp, int dispatch_reg) {
  lj_native_regs r{};
  r.pc = w[kX86SavedReturn];
  r.sp = sp + kX86SavedWords * 8;  // after coro_transfer's `pop rcx`
  r.fp = w[kX86SavedRbp];
  r.fp_valid = 1;
  // The caller's rbx, as coro_transfer saved it (for an rbx-based CFA above, cfi_row.h
  // LJ_CFI_REG_BX). vm_x64.dasc keeps PC in rbx too; that is used only if the pc is in the VM
  // (it is not: the fiber is in coro_transfer's caller).
  r.vm_pc = w[kX86SavedRbx];
  r.bx_valid = 1;
  // The callee-saved registers coro_transfer saved, by DWARF number (luajit_info.h
  // dispatch_reg): rbx 3, rbp 6, r12..r15 12..15.
  const std::pair<int, uint64_t> callee_saved[] = {{3, w[kX86SavedRbx]},  {6, w[kX86SavedRbp]},
                                                   {12, w[kX86SavedR12]}, {13, w[kX86SavedR13]},
                                                   {14, w[kX86SavedR14]}, {15, w[kX86SavedR15]}};
  for (const auto& [reg, value] : callee_saved) {
    if (reg != dispatch_reg) continue;
    r.dispatch = value;
    r.dispatch_valid = 1;
  }
  return r;
}

lj_native_regs a64_saved_context(const uint64_t* w, uint64_t sp, int dispatch_reg) {
  lj_native_regs r{};
  r.pc = w[kA64SavedX30];  // coro_transfer's `ret`
  r.lr = w[kA64SavedX30];
  r.lr_valid = 1;
  r.sp = sp + kA64SavedWords * 8;
  r.fp = w[kA64SavedX29];
  r.fp_valid = 1;
  // x19..x28 (DWARF numbers 19..28) for luajit_info.h dispatch_reg (GL).
  if (dispatch_reg >= 19 && dispatch_reg <= 28) {
    r.dispatch = w[kA64SavedX19 + static_cast<uint64_t>(dispatch_reg - 19)];
    r.dispatch_valid = 1;
  }
  return r;
}

}  // namespace

void CoreWalker::prefetch_fibers(const std::vector<FiberName>& fibers, uint64_t cord) const {
  const luajit::FiberLayout* layout = fiber_layout();
  if (layout == nullptr) return;
  std::vector<proc::MemoryRange> ranges;
  ranges.push_back({cord != 0 ? cord : main_cord(), cord_bytes(*layout)});
  const FiberBlock block = fiber_block(*layout);
  for (const FiberName& f : fibers) {
    ranges.push_back({f.fiber + block.begin, block.end - block.begin});
    if (f.name_addr != 0) {
      ranges.push_back({f.name_addr, static_cast<uint32_t>(64 - (f.name_addr & 63))});
    }
    if (auto stamp = lua_stack_range(f.lua_state)) ranges.push_back(*stamp);
  }
  core_.prefetch(ranges);
}

const luajit::FiberLayout* CoreWalker::fiber_layout() const {
  if (!luajit_file_index_ || !tarantool_) return nullptr;
  if (!fiber_layout_) {
    fiber_layout_ = luajit::read_fiber_layout(*core_.files()[*luajit_file_index_].elf);
  }
  return fiber_layout_->ok() ? &**fiber_layout_ : nullptr;
}

// The reader of the fiber list of the cord at `cord`, main_cord's (at its runtime address) when 0.
FiberListReader CoreWalker::cord_fibers(const luajit::FiberLayout& layout, uint64_t cord) const {
  if (cord == 0) {
    return FiberListReader(core_.mem_reader(), layout, layout.main_cord + vm_bias_, "main_cord");
  }
  return FiberListReader(core_.mem_reader(), layout, cord, "cord_ptr");
}

Result<FiberName> CoreWalker::reread_fiber(const FiberName& fiber) const {
  const luajit::FiberLayout* layout = fiber_layout();
  if (layout == nullptr) return make_error("no fiber layout");
  return cord_fibers(*layout, 0).read_fiber(fiber.fiber);
}

uint64_t CoreWalker::running_fiber(uint64_t cord) const {
  const luajit::FiberLayout* layout = fiber_layout();
  if (layout == nullptr) return 0;
  return cord_fibers(*layout, cord).running();
}

Result<ThreadStack> CoreWalker::walk_fiber(const FiberName& fiber) const {
  const bool a64 = core_.arch() == elf::Arch::AArch64;
  const uint64_t count = a64 ? kA64SavedWords : kX86SavedWords;
  const ljprof_mem_reader mem = core_.mem_reader();
  const uint64_t sp = fiber.saved_sp;
  uint64_t words[kMaxSavedWords] = {};
  if (sp == 0 || (sp & (a64 ? 15 : 7)) != 0 ||
      mem.read_mem(mem.ctx, sp, words, static_cast<uint32_t>(count * 8)) != 0) {
    return make_error(
        "fiber {}: its saved context at fiber.ctx.sp {:#x} is unreadable or misaligned "
        "(coro_transfer's {} saved words)",
        fiber.id, sp, count);
  }
  const int dispatch_reg = luajit_ ? info_.dispatch_reg : -1;
  lj_native_regs regs =
      a64 ? a64_saved_context(words, sp, dispatch_reg) : x86_saved_context(words, sp, dispatch_reg);
  lj_walk_env env = walk_env();
  auto result = std::make_unique<lj_walk_result>();
  lj_walk_native(&env, luajit_ ? &info_ : nullptr, &regs, g_hint_, vm_bias_, result.get());
  ThreadStack out;
  add_frames(*result, env, out);
  if (!out.reached_root) {
    return make_error(
        "fiber {}: the walk from its saved context (pc {:#x}) ended at {}, not a root", fiber.id,
        regs.pc, out.end);
  }
  return out;
}

Result<const luajit::FiberLayout*> CoreWalker::tarantool_fiber_layout() const {
  if (!luajit_file_index_ || !tarantool_) {
    return make_error("the core's LuaJIT file is not a Tarantool executable");
  }
  if (fiber_layout() == nullptr) return fiber_layout_->error();
  return fiber_layout();
}

Result<int64_t> CoreWalker::cord_ptr_offset() const {
  LJ_ASSIGN_OR_RETURN(const luajit::FiberLayout* layout, tarantool_fiber_layout());
  auto from_tp = luajit::cord_ptr_from_tp(*layout, core_.arch());
  if (!from_tp) {
    return make_error(
        "{} has no TLS symbol cord_ptr with a PT_TLS block, so a thread's cord is not known",
        luajit_file_);
  }
  return *from_tp;
}

Result<uint64_t> CoreWalker::thread_cord(const Thread& thread) const {
  LJ_ASSIGN_OR_RETURN(const int64_t from_tp, cord_ptr_offset());
  std::optional<uint64_t> tp = thread.thread_pointer;
  if (!tp || *tp == 0) {
    // A qemu-user AArch64 core has no NT_ARM_TLS: glibc's own thread list still names it.
    auto listed = glibc_threads(core_);
    if (!listed.ok()) {
      return make_error("thread {}: the core has no thread pointer for it ({}), and {}", thread.tid,
                        core_.arch() == elf::Arch::X86_64 ? "fs_base" : "no NT_ARM_TLS note",
                        listed.message());
    }
    for (const ListedThread& t : *listed) {
      if (t.tid == thread.tid) tp = t.thread_pointer;
    }
    if (!tp) return make_error("thread {}: not on glibc's thread list", thread.tid);
  }
  const uint64_t at = *tp + static_cast<uint64_t>(from_tp);
  auto cord = core_.read_u64(at);
  if (!cord.ok()) {
    return make_error(
        "thread {}: its cord_ptr at {:#x} (thread pointer {:#x} {:+#x}) is unreadable", thread.tid,
        at, *tp, from_tp);
  }
  return *cord;
}

uint64_t CoreWalker::main_cord() const {
  const luajit::FiberLayout* layout = fiber_layout();
  return layout == nullptr ? 0 : layout->main_cord + vm_bias_;
}

Result<FiberList> CoreWalker::walk_cord_fibers(uint64_t cord) const {
  LJ_ASSIGN_OR_RETURN(const luajit::FiberLayout* layout, tarantool_fiber_layout());
  return cord_fibers(*layout, cord).walk();
}

Result<FiberList> CoreWalker::walk_fibers() const {
  return walk_cord_fibers(0);
}

}  // namespace ljprof::core
