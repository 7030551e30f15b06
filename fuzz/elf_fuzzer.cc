// libFuzzer target for the ELF reader: any input must give an error or a file whose every
// accessor stays inside the input.
#include <cstddef>
#include <cstdint>

#include "elf/elf_file.h"
#include "elf_exercise.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = ljprof::elf::ElfFile::from_memory({data, size}, "fuzz-input");
  if (!file.ok()) return 0;
  return ljprof::elf::exercise_all_accessors(**file) == 0xdeadbeef ? 1 : 0;
}
