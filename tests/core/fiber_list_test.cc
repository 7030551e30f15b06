// The fiber-list walk (core/fiber_list.h) over memory laid out here by the rules of tarantool's
// src/lib/core/fiber.h (a cord with its running fiber on its alive list), at a synthetic layout:
// the bounds it promises, which the fiber fuzzer (fuzz/fiber_fuzzer.cc) checks on random bytes.
// A name is a NUL-terminated string of at most 255 bytes (FIBER_NAME_MAX): the fuzzer found
// names of up to 319 bytes accepted when the bound was checked per 64-byte block.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/fiber_list.h"

namespace ljprof::core {
namespace {

constexpr uint64_t kBase = 0x10000, kCord = kBase, kFiber = kBase + 0x100, kName = kBase + 0x200;

struct Memory {
  std::vector<uint8_t> bytes = std::vector<uint8_t>(0x400);
  void put(uint64_t addr, uint64_t v) { std::memcpy(&bytes[addr - kBase], &v, 8); }
  static int read(void* ctx, uint64_t addr, void* out, uint32_t len) {
    auto* m = static_cast<Memory*>(ctx);
    if (addr < kBase || addr - kBase + len > m->bytes.size()) return -1;
    std::memcpy(out, &m->bytes[addr - kBase], len);
    return 0;
  }
};

luajit::FiberLayout layout() {
  luajit::FiberLayout l;
  l.cord_alive = 8;
  l.cord_ready = 24;
  l.cord_name = 40;
  l.rlist_next = 8;
  l.fiber_fid = 16;
  l.fid_size = 8;
  l.fiber_name = 24;
  l.fiber_state = 32;
  l.fiber_csw = 48;
  l.fiber_flags = 52;
  l.flag_dead = 1;
  l.fiber_lua_state = 56;
  l.fiber_ctx_sp = 64;
  return l;
}

// One fiber, id 101, running and alone on the alive list; its name `name` then a NUL.
Result<FiberList> walk_with_name(const std::string& name) {
  Memory m;
  m.put(kCord, kFiber);           // cord.fiber
  m.put(kCord + 8, kFiber);       // cord.alive.prev
  m.put(kCord + 16, kFiber);      // cord.alive.next (fiber.link at offset 0)
  m.put(kCord + 32, kCord + 24);  // cord.ready.next: empty
  m.put(kFiber, kCord + 8);       // fiber.link.prev
  m.put(kFiber + 8, kCord + 8);   // fiber.link.next: back to the head
  m.put(kFiber + 16, 101);        // fiber.fid
  m.put(kFiber + 24, kName);      // fiber.name
  std::memcpy(&m.bytes[kName - kBase], name.data(), name.size());
  const luajit::FiberLayout l = layout();
  return FiberListReader({&Memory::read, &m}, l, kCord).walk();
}

TEST(FiberList, NamesUpTo255BytesAreReadAndLongerOnesFailTheList) {
  auto ok = walk_with_name(std::string(255, 'a'));
  ASSERT_TRUE(ok.ok()) << ok.message();
  ASSERT_EQ(ok->fibers.size(), 1u);
  EXPECT_EQ(ok->fibers[0].id, 101u);
  EXPECT_EQ(ok->fibers[0].name, std::string(255, 'a'));
  EXPECT_EQ(ok->running.name, ok->fibers[0].name);

  for (size_t len : {256, 300}) {
    auto bad = walk_with_name(std::string(len, 'a'));
    ASSERT_FALSE(bad.ok()) << len;
    EXPECT_NE(bad.message().find("has no NUL in 256 bytes"), std::string::npos) << bad.message();
  }
}

TEST(FiberList, ANameIsPrintable) {
  auto ok = walk_with_name(std::string("tx\x1b[2J\x8e", 7));
  ASSERT_TRUE(ok.ok()) << ok.message();
  EXPECT_EQ(ok->fibers[0].name, "tx\\x1b[2J\\x8e");
}

}  // namespace
}  // namespace ljprof::core
