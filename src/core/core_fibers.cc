// The main cord's fibers in a Tarantool core (CoreWalker::walk_fibers). Every read is checked and
// the walk is bounded; anything inconsistent fails the whole list, so a fiber is never named from
// a corrupt one.
#include <fmt/format.h>

#include <set>

#include "common/printable.h"
#include "core/core_walk.h"

extern "C" {
#include "abi/walk_types.h"
#include "walker/native_walk.h"
}

namespace ljprof::core {

namespace {

constexpr uint64_t kMaxFibers = 1u << 16;
// FIBER_NAME_MAX is 255 in tarantool src/lib/core/fiber.h (2.x and 3.x): a name with its NUL
// fits in 256 bytes.
constexpr uint32_t kMaxFiberName = 256;
// fids count up from FIBER_ID_MAX_RESERVED (100) one per fiber created; 2^48 of them is beyond
// any process's lifetime, so a larger one is a corrupt word, not a fiber id.
constexpr uint64_t kMaxFiberId = uint64_t{1} << 48;

// tarantool third_party/coro/coro.c, x86-64 CORO_ASM coro_transfer (the same in Debian's
// /usr/bin/tarantool 2.6: objdump -d shows push rbp, rbx, r12, r13, r14, r15; mov rsp,(rdi); ...;
// pop r15..rbp; pop rcx; jmp *rcx): the saved sp points at r15, and the words above it are r14,
// r13, r12, rbx, rbp, then the return address into coro_transfer's caller.
constexpr uint64_t kSavedR15 = 0, kSavedR14 = 8, kSavedR13 = 16, kSavedR12 = 24, kSavedRbx = 32,
                   kSavedRbp = 40, kSavedReturn = 48, kSavedWords = 7;

bool read_word(const ljprof_mem_reader& mem, uint64_t addr, uint64_t* v, uint32_t size = 8) {
  *v = 0;
  return mem.read_mem(mem.ctx, addr, v, size) == 0;
}

}  // namespace

Result<FiberName> CoreWalker::read_fiber(const luajit::FiberLayout& layout, uint64_t fiber) const {
  const ljprof_mem_reader mem = core_.mem_reader();
  FiberName f;
  f.fiber = fiber;
  if (!read_word(mem, fiber + layout.fiber_fid, &f.id, layout.fid_size)) {
    return make_error("fiber {:#x}: fiber.fid at {:#x} is unreadable", fiber,
                      fiber + layout.fiber_fid);
  }
  if (f.id == 0 || f.id >= kMaxFiberId) {
    return make_error("fiber {:#x}: fiber.fid {} is not a fiber id (0 or over 2^48)", fiber, f.id);
  }
  uint64_t name = 0;
  if (!read_word(mem, fiber + layout.fiber_name, &name)) {
    return make_error("fiber {:#x}: fiber.name at {:#x} is unreadable", fiber,
                      fiber + layout.fiber_name);
  }
  std::string raw;
  for (uint32_t i = 0;; ++i) {
    if (i == kMaxFiberName) {
      return make_error("fiber {}: its name at {:#x} has no NUL in {} bytes", f.id, name,
                        kMaxFiberName);
    }
    char c = 0;
    if (mem.read_mem(mem.ctx, name + i, &c, 1) != 0) {
      return make_error("fiber {}: its name at {:#x} is unreadable", f.id, name + i);
    }
    if (c == '\0') break;
    raw.push_back(c);
  }
  f.name = printable_text(raw);
  if (!read_word(mem, fiber + layout.fiber_lua_state, &f.lua_state)) {
    return make_error("fiber {}: fiber.storage.lua.stack at {:#x} is unreadable", f.id,
                      fiber + layout.fiber_lua_state);
  }
  if (!read_word(mem, fiber + layout.fiber_ctx_sp, &f.saved_sp)) {
    return make_error("fiber {}: fiber.ctx.sp at {:#x} is unreadable", f.id,
                      fiber + layout.fiber_ctx_sp);
  }
  return f;
}

Result<ThreadStack> CoreWalker::walk_fiber(const FiberName& fiber) const {
  if (core_.arch() != elf::Arch::X86_64) {
    return make_error("fiber {}: saved contexts are read on x86-64 only (Lua frames only)",
                      fiber.id);
  }
  const ljprof_mem_reader mem = core_.mem_reader();
  const uint64_t sp = fiber.saved_sp;
  uint64_t words[kSavedWords] = {};
  if (sp == 0 || (sp & 7) != 0 ||
      mem.read_mem(mem.ctx, sp, words, static_cast<uint32_t>(sizeof words)) != 0) {
    return make_error(
        "fiber {}: its saved context at fiber.ctx.sp {:#x} is unreadable (coro_transfer's {} "
        "saved words)",
        fiber.id, sp, kSavedWords);
  }
  auto saved = [&](uint64_t offset) { return words[offset / 8]; };
  lj_native_regs regs{};
  regs.pc = saved(kSavedReturn);
  regs.sp = sp + kSavedWords * 8;  // after coro_transfer's `pop rcx`
  regs.fp = saved(kSavedRbp);
  regs.fp_valid = 1;
  // vm_x64.dasc keeps PC in rbx; it is used only if the pc is in the VM (it is not: the fiber is
  // in coro_transfer's caller).
  regs.vm_pc = saved(kSavedRbx);
  if (luajit_) {
    // DWARF numbers of the callee-saved registers coro_transfer saved (luajit_info.h dispatch_reg).
    const std::pair<uint8_t, uint64_t> callee_saved[] = {
        {3, saved(kSavedRbx)},  {6, saved(kSavedRbp)},  {12, saved(kSavedR12)},
        {13, saved(kSavedR13)}, {14, saved(kSavedR14)}, {15, saved(kSavedR15)}};
    for (const auto& [reg, value] : callee_saved) {
      if (reg != info_.dispatch_reg) continue;
      regs.dispatch = value;
      regs.dispatch_valid = 1;
    }
  }
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

Result<FiberList> CoreWalker::walk_fibers() const {
  if (!luajit_file_index_ || !tarantool_) {
    return make_error("the core's LuaJIT file is not a Tarantool executable");
  }
  const MappedFile& file = core_.files()[*luajit_file_index_];
  LJ_ASSIGN_OR_RETURN(luajit::FiberLayout layout, luajit::read_fiber_layout(*file.elf));
  const ljprof_mem_reader mem = core_.mem_reader();
  const uint64_t cord = layout.main_cord + vm_bias_;
  FiberList out;
  uint64_t running = 0;
  if (!read_word(mem, cord + layout.cord_fiber, &running) || running == 0) {
    return make_error("main_cord.fiber at {:#x} is unreadable or NULL", cord + layout.cord_fiber);
  }
  LJ_ASSIGN_OR_RETURN(out.running, read_fiber(layout, running));
  // rlist_foreach_entry(fiber, &cord->alive, link) (src/lib/salad/rlist.h): from head.next until
  // the head again.
  const uint64_t head = cord + layout.cord_alive;
  std::set<uint64_t> seen_nodes, seen_ids;
  uint64_t node = 0;
  if (!read_word(mem, head + layout.rlist_next, &node)) {
    return make_error("main_cord.alive.next at {:#x} is unreadable", head + layout.rlist_next);
  }
  while (node != head) {
    if (out.fibers.size() >= kMaxFibers) {
      return make_error("main_cord.alive holds over {} fibers (cap)", kMaxFibers);
    }
    if (!seen_nodes.insert(node).second) {
      return make_error("main_cord.alive loops back to {:#x} without reaching its head", node);
    }
    if (node < layout.fiber_link)
      return make_error("main_cord.alive link {:#x} is below fiber.link's offset (a NULL fiber)",
                        node);
    LJ_ASSIGN_OR_RETURN(FiberName f, read_fiber(layout, node - layout.fiber_link));
    if (!seen_ids.insert(f.id).second) {
      return make_error("main_cord.alive holds fiber id {} twice", f.id);
    }
    out.fibers.push_back(std::move(f));
    if (!read_word(mem, node + layout.rlist_next, &node)) {
      return make_error("main_cord.alive: the link after fiber {} is unreadable",
                        out.fibers.back().id);
    }
  }
  return out;
}

}  // namespace ljprof::core
