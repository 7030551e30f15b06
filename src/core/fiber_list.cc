// Tarantool's fiber list of one cord (core/fiber_list.h).
#include "core/fiber_list.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "common/printable.h"

namespace ljprof::core {

namespace {

// FIBER_NAME_MAX is 255 in tarantool src/lib/core/fiber.h (2.x and 3.x): a name with its NUL
// fits in 256 bytes.
constexpr uint32_t kMaxFiberName = 256;
// fids count up from FIBER_ID_MAX_RESERVED (100) one per fiber created; 2^48 of them is beyond
// any process's lifetime, so a larger one is a corrupt word, not a fiber id.
constexpr uint64_t kMaxFiberId = uint64_t{1} << 48;
// struct cord's name: char name[FIBER_NAME_INLINE] (40) in 2.x and 3.x.
constexpr uint32_t kCordName = 40;

bool read_word(const ljprof_mem_reader& mem, uint64_t addr, uint64_t* v) {
  *v = 0;
  return mem.read_mem(mem.ctx, addr, v, 8) == 0;
}

// A NUL-terminated name of at most kMaxFiberName bytes, read up to the end of each 64-byte block.
Result<std::string> read_name(const ljprof_mem_reader& mem, uint64_t fid, uint64_t name) {
  std::string raw;
  while (raw.size() < kMaxFiberName) {
    char chunk[64];
    const uint64_t at = name + raw.size();
    // To the end of the 64-byte block, and no further than the name's bound (the fuzzer found
    // names of up to 319 bytes read when the bound was checked per block only).
    const uint32_t n =
        static_cast<uint32_t>(std::min<uint64_t>(64 - (at & 63), kMaxFiberName - raw.size()));
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

uint32_t cord_bytes(const luajit::FiberLayout& l) {
  return std::max({l.cord_fiber + 8, l.cord_alive + l.rlist_next + 8,
                   l.cord_ready + l.rlist_next + 8, l.cord_name + kCordName});
}

Result<FiberName> FiberListReader::read_fiber(uint64_t fiber) const {
  const FiberBlock block = fiber_block(layout_);
  std::vector<uint8_t> bytes(block.end - block.begin);
  if (mem_.read_mem(mem_.ctx, fiber + block.begin, bytes.data(),
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
  f.id = field(layout_.fiber_fid, layout_.fid_size);
  if (f.id == 0 || f.id >= kMaxFiberId) {
    return make_error("fiber {:#x}: fiber.fid {} is not a fiber id (0 or over 2^48)", fiber, f.id);
  }
  f.name_addr = field(layout_.fiber_name, 8);
  LJ_ASSIGN_OR_RETURN(f.name, read_name(mem_, f.id, f.name_addr));
  f.lua_state = field(layout_.fiber_lua_state, 8);
  f.saved_sp = field(layout_.fiber_ctx_sp, 8);
  f.csw = static_cast<uint32_t>(field(layout_.fiber_csw, 4));
  f.dead = (field(layout_.fiber_flags, 4) & layout_.flag_dead) != 0;
  f.link_next = field(layout_.fiber_link + layout_.rlist_next, 8);
  return f;
}

uint64_t FiberListReader::running() const {
  uint64_t running = 0;
  read_word(mem_, cord_ + layout_.cord_fiber, &running);
  return running;
}

// The fibers on the cord's ready list: rlist_foreach_entry(fiber, &cord->ready, state).
Result<std::set<uint64_t>> FiberListReader::read_ready() const {
  const uint64_t head = cord_ + layout_.cord_ready;
  std::set<uint64_t> ready;
  uint64_t node = 0;
  if (!read_word(mem_, head + layout_.rlist_next, &node)) {
    return make_error("{}.ready.next at {:#x} is unreadable", what_, head + layout_.rlist_next);
  }
  while (node != head) {
    if (ready.size() >= kMaxFibers) {
      return make_error("{}.ready holds over {} fibers (cap)", what_, kMaxFibers);
    }
    if (node < layout_.fiber_state || !ready.insert(node - layout_.fiber_state).second) {
      return make_error("{}.ready loops back to {:#x} or links a NULL fiber", what_, node);
    }
    if (!read_word(mem_, node + layout_.rlist_next, &node)) {
      return make_error("{}.ready: a link after {:#x} is unreadable", what_, node);
    }
  }
  return ready;
}

Result<FiberList> FiberListReader::walk() const {
  FiberList out;
  const uint64_t running_fiber = running();
  if (running_fiber == 0) {
    return make_error("{}.fiber at {:#x} is unreadable or NULL", what_, cord_ + layout_.cord_fiber);
  }
  LJ_ASSIGN_OR_RETURN(out.running, read_fiber(running_fiber));
  LJ_ASSIGN_OR_RETURN(out.ready, read_ready());
  char name[kCordName] = {};
  if (mem_.read_mem(mem_.ctx, cord_ + layout_.cord_name, name, sizeof name) == 0) {
    out.cord = printable_text(std::string(name, strnlen(name, sizeof name)));
  }
  // rlist_foreach_entry(fiber, &cord->alive, link) (src/lib/salad/rlist.h): from head.next until
  // the head again.
  const uint64_t head = cord_ + layout_.cord_alive;
  std::set<uint64_t> seen_nodes, seen_ids;
  uint64_t node = 0;
  if (!read_word(mem_, head + layout_.rlist_next, &node)) {
    return make_error("{}.alive.next at {:#x} is unreadable", what_, head + layout_.rlist_next);
  }
  while (node != head) {
    if (out.fibers.size() >= kMaxFibers) {
      return make_error("{}.alive holds over {} fibers (cap)", what_, kMaxFibers);
    }
    if (!seen_nodes.insert(node).second) {
      return make_error("{}.alive loops back to {:#x} without reaching its head", what_, node);
    }
    if (node < layout_.fiber_link) {
      return make_error("{}.alive link {:#x} is below fiber.link's offset (a NULL fiber)", what_,
                        node);
    }
    LJ_ASSIGN_OR_RETURN(FiberName f, read_fiber(node - layout_.fiber_link));
    if (!seen_ids.insert(f.id).second) {
      return make_error("{}.alive holds fiber id {} twice", what_, f.id);
    }
    node = f.link_next;
    out.fibers.push_back(std::move(f));
  }
  return out;
}

}  // namespace ljprof::core
