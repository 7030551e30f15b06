// libFuzzer target for the ELF reader: any input must give an error or a file whose every
// accessor stays inside the input.
#include <cstddef>
#include <cstdint>

#include "elf/elf_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = ljprof::elf::ElfFile::from_memory({data, size}, "fuzz-input");
  if (!file.ok()) return 0;
  const ljprof::elf::ElfFile& elf = **file;
  size_t sink = 0;
  for (const auto& section : elf.sections()) {
    for (uint8_t b : elf.section_data(section)) sink += b;
    sink += section.name.size();
  }
  for (const auto& sym : elf.symbols()) {
    sink += sym.name.size();
    if (const auto* hit = elf.symbol_at(sym.value)) sink += hit->name.size();
    auto bytes = elf.read(sym.value, sym.size < 64 ? sym.size : 64);
    if (bytes.ok()) {
      for (uint8_t b : *bytes) sink += b;
    }
  }
  for (const auto& seg : elf.segments()) {
    auto off = elf.file_offset(seg.vaddr);
    if (off.ok()) sink += *off;
  }
  for (auto needed : elf.needed()) sink += needed.size();
  if (elf.build_id()) sink += elf.build_id()->size();
  if (elf.find_symbol("lua_close") != nullptr) ++sink;
  return sink == 0xdeadbeef ? 1 : 0;
}
