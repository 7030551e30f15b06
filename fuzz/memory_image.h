// fuzz/memory_image.h: a fuzz input as a target's memory at a fixed address, read through the
// walkers' ljprof_mem_reader interface (abi/read_mem.h), and the fuzzers' assertion. Shared by
// the fuzzers of code that reads a process's memory (heap_fuzzer.cc, fiber_fuzzer.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace ljprof::fuzz {

// Where the input's first byte is in the target's address space.
constexpr uint64_t kBase = 0x10000;

struct Image {
  const uint8_t* data;
  size_t size;
};

// An ljprof_read_mem_fn over an Image (`ctx`): -1 for anything not wholly inside it.
inline int read_image(void* ctx, uint64_t addr, void* out, uint32_t len) {
  const Image* im = static_cast<const Image*>(ctx);
  if (addr < kBase || len > im->size || addr - kBase > im->size - len) return -1;
  std::memcpy(out, im->data + (addr - kBase), len);
  return 0;
}

// A property that must hold whatever the bytes: a finding when it does not.
inline void require(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace ljprof::fuzz
