#include "proc/captured_memory.h"

#include <cerrno>
#include <cstring>
#include <iterator>

namespace ljprof::proc {

bool CapturedMemory::add(uint64_t addr, std::span<const uint8_t> bytes, uint64_t max_bytes) {
  if (bytes.empty() || addr > UINT64_MAX - bytes.size()) return false;
  auto it = copies_.find(addr);
  const uint64_t replaced = it == copies_.end() ? 0 : it->second.size();
  if (bytes_ - replaced + bytes.size() > max_bytes) return false;
  bytes_ = bytes_ - replaced + bytes.size();
  copies_[addr].assign(bytes.begin(), bytes.end());
  return true;
}

int CapturedMemory::read(uint64_t addr, void* dst, uint32_t len) const {
  auto it = copies_.upper_bound(addr);
  if (it != copies_.begin()) {
    --it;
    const uint64_t offset = addr - it->first;
    if (offset <= it->second.size() && len <= it->second.size() - offset) {
      if (len != 0) std::memcpy(dst, it->second.data() + offset, len);
      return 0;
    }
  }
  if (len != 0) std::memset(dst, 0, len);
  return -EFAULT;
}

void CapturedMemory::clear() {
  copies_.clear();
  bytes_ = 0;
}

}  // namespace ljprof::proc
