// libFuzzer target for the core reader: any input must give an error or a core whose threads,
// mappings and memory reads stay inside the input. Mapped files are not opened (the input's
// NT_FILE paths are attacker-controlled and the fuzzer must not touch the filesystem).
#include <cstddef>
#include <cstdint>

#include "core/core_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ljprof::core::CoreOptions options;
  options.open_mapped_files = false;
  auto core = ljprof::core::CoreFile::from_memory({data, size}, "fuzz-core", options);
  if (!core.ok()) return 0;
  uint8_t buf[64];
  uint64_t sum = 0;
  for (const ljprof::core::Thread& t : core->threads()) {
    if (core->read(t.pc, buf, sizeof(buf)).ok()) sum += buf[0];
    if (core->read(t.sp, buf, sizeof(buf)).ok()) sum += buf[63];
    auto s = core->read_c_string(t.sp, 256);
    if (s.ok()) sum += s->size();
  }
  for (const ljprof::core::Mapping& m : core->mappings()) {
    if (core->read(m.start, buf, 8).ok()) sum += buf[7];
    (void)core->file_address(m.end - 1);
  }
  for (const ljprof::core::AuxEntry& e : core->auxv()) sum += e.value;
  return sum == 0xdeadbeef ? 1 : 0;
}
