// The main cord's fibers in a Tarantool core (CoreWalker::walk_fibers). Every read is checked and
// the walk is bounded; anything inconsistent fails the whole list, so a fiber is never named from
// a corrupt one.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <vector>

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

// The bytes of struct fiber that read_fiber uses, read at once: a live process is read through
// one pread per call, and a fiber's fields are a few hundred bytes apart at most.
struct FiberBlock {
  uint32_t begin = 0, end = 0;  // offsets in struct fiber
};

FiberBlock fiber_block(const luajit::FiberLayout& l) {
  const uint32_t offsets[] = {
      l.fiber_fid, l.fiber_name,  l.fiber_lua_state,          l.fiber_ctx_sp,
      l.fiber_csw, l.fiber_flags, l.fiber_link + l.rlist_next};
  FiberBlock b{UINT32_MAX, 0};
  for (uint32_t o : offsets) {
    b.begin = std::min(b.begin, o);
    b.end = std::max(b.end, o + 8);
  }
  return b;
}

// A NUL-terminated name of at most kMaxFiberName bytes, read up to the end of each 64-byte block.
Result<std::string> read_name(const ljprof_mem_reader& mem, uint64_t fid, uint64_t name) {
  std::string raw;
  while (raw.size() < kMaxFiberName) {
    char chunk[64];
    const uint64_t at = name + raw.size();
    const uint32_t n = static_cast<uint32_t>(64 - (at & 63));
    if (mem.read_mem(mem.ctx, at, chunk, n) != 0) {
      // The block may end past a readable page: read byte by byte up to the NUL.
      for (uint32_t i = 0; i < n; ++i) {
        if (mem.read_mem(mem.ctx, at + i, chunk + i, 1) != 0) {
          return make_error("fiber {}: its name at {:#x} is unreadable", fid, at + i);
        }
        if (chunk[i] == '\0') break;
      }
    }
    const void* nul = std::memchr(chunk, 0, n);
    if (nul != nullptr) {
      raw.append(chunk, static_cast<const char*>(nul) - chunk);
      return printable_text(raw);
    }
    raw.append(chunk, n);
  }
  return make_error("fiber {}: its name at {:#x} has no NUL in {} bytes", fid, name, kMaxFiberName);
}

}  // namespace

Result<FiberName> CoreWalker::read_fiber(const luajit::FiberLayout& layout, uint64_t fiber) const {
  const ljprof_mem_reader mem = core_.mem_reader();
  const FiberBlock block = fiber_block(layout);
  std::vector<uint8_t> bytes(block.end - block.begin);
  if (mem.read_mem(mem.ctx, fiber + block.begin, bytes.data(),
                   static_cast<uint32_t>(bytes.size())) != 0) {
    return make_error("fiber {:#x}: its fields at {:#x}..{:#x} are unreadable", fiber,
                      fiber + block.begin, fiber + block.end);
  }
  auto field = [&](uint32_t offset, uint32_t size) {
    uint64_t v = 0;
    std::memcpy(&v, bytes.data() + (offset - block.begin), size);
    return v;
  };
  FiberName f;
  f.fiber = fiber;
  f.id = field(layout.fiber_fid, layout.fid_size);
  if (f.id == 0 || f.id >= kMaxFiberId) {
    return make_error("fiber {:#x}: fiber.fid {} is not a fiber id (0 or over 2^48)", fiber, f.id);
  }
  f.name_addr = field(layout.fiber_name, 8);
  LJ_ASSIGN_OR_RETURN(f.name, read_name(mem, f.id, f.name_addr));
  f.lua_state = field(layout.fiber_lua_state, 8);
  f.saved_sp = field(layout.fiber_ctx_sp, 8);
  f.csw = static_cast<uint32_t>(field(layout.fiber_csw, 4));
  f.dead = (field(layout.fiber_flags, 4) & layout.flag_dead) != 0;
  f.link_next = field(layout.fiber_link + layout.rlist_next, 8);
  return f;
}

void CoreWalker::prefetch_fibers(const std::vector<FiberName>& fibers) const {
  const luajit::FiberLayout* layout = fiber_layout();
  if (layout == nullptr) return;
  std::vector<proc::MemoryRange> ranges;
  const uint32_t cord_end = std::max({layout->cord_fiber + 8, layout->cord_alive + 16,
                                      layout->cord_ready + 16, layout->cord_name + 40});
  ranges.push_back({layout->main_cord + vm_bias_, cord_end});
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

Result<FiberName> CoreWalker::reread_fiber(const FiberName& fiber) const {
  const luajit::FiberLayout* layout = fiber_layout();
  if (layout == nullptr) return make_error("no fiber layout");
  return read_fiber(*layout, fiber.fiber);
}

uint64_t CoreWalker::running_fiber() const {
  const luajit::FiberLayout* layout = fiber_layout();
  uint64_t running = 0;
  if (layout != nullptr) {
    read_word(core_.mem_reader(), layout->main_cord + vm_bias_ + layout->cord_fiber, &running);
  }
  return running;
}

// The fibers on `cord`'s ready list: rlist_foreach_entry(fiber, &cord->ready, state).
Result<std::set<uint64_t>> CoreWalker::read_ready(const luajit::FiberLayout& layout,
                                                  uint64_t cord) const {
  const ljprof_mem_reader mem = core_.mem_reader();
  const uint64_t head = cord + layout.cord_ready;
  std::set<uint64_t> ready;
  uint64_t node = 0;
  if (!read_word(mem, head + layout.rlist_next, &node)) {
    return make_error("main_cord.ready.next at {:#x} is unreadable", head + layout.rlist_next);
  }
  while (node != head) {
    if (ready.size() >= kMaxFibers) {
      return make_error("main_cord.ready holds over {} fibers (cap)", kMaxFibers);
    }
    if (node < layout.fiber_state || !ready.insert(node - layout.fiber_state).second) {
      return make_error("main_cord.ready loops back to {:#x} or links a NULL fiber", node);
    }
    if (!read_word(mem, node + layout.rlist_next, &node)) {
      return make_error("main_cord.ready: a link after {:#x} is unreadable", node);
    }
  }
  return ready;
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
  if (fiber_layout() == nullptr) return fiber_layout_->error();
  const luajit::FiberLayout& layout = *fiber_layout();
  const ljprof_mem_reader mem = core_.mem_reader();
  const uint64_t cord = layout.main_cord + vm_bias_;
  FiberList out;
  uint64_t running = 0;
  if (!read_word(mem, cord + layout.cord_fiber, &running) || running == 0) {
    return make_error("main_cord.fiber at {:#x} is unreadable or NULL", cord + layout.cord_fiber);
  }
  LJ_ASSIGN_OR_RETURN(out.running, read_fiber(layout, running));
  LJ_ASSIGN_OR_RETURN(out.ready, read_ready(layout, cord));
  char name[40] = {};
  if (mem.read_mem(mem.ctx, cord + layout.cord_name, name, sizeof name) == 0) {
    out.cord = printable_text(std::string(name, strnlen(name, sizeof name)));
  }
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
    node = f.link_next;
    out.fibers.push_back(std::move(f));
  }
  return out;
}

}  // namespace ljprof::core
