// proc/captured_memory.h: bytes of a young process copied by the kernel program when a sample
// first met them (bpf/abi/record_types.h lj_rec_capture: prototypes, strings, JIT traces),
// so that its Lua frames are named after the process is gone. ProcessMemory reads them before
// the process's memory: they are what the sample saw.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <vector>

namespace ljprof::proc {

class CapturedMemory {
 public:
  // Keeps `bytes` as the memory at `addr` (a newer copy of an address replaces the older one, as
  // the kernel copies an object again only when it changed). False, and nothing kept, once
  // kept bytes would pass `max_bytes`.
  bool add(uint64_t addr, std::span<const uint8_t> bytes, uint64_t max_bytes);
  // The read contract of abi/read_mem.h, served only when [addr, addr + len) lies inside one
  // copy: 0, or -EFAULT with `dst` zeroed.
  int read(uint64_t addr, void* dst, uint32_t len) const;
  bool empty() const { return copies_.empty(); }
  uint64_t bytes() const { return bytes_; }
  void clear();

 private:
  std::map<uint64_t, std::vector<uint8_t>> copies_;  // by start address
  uint64_t bytes_ = 0;
};

}  // namespace ljprof::proc
