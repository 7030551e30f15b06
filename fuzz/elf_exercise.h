// Touches every accessor of an opened ElfFile; shared by the libFuzzer target and the
// malformed-input test so both check the same thing: a file that opened is safe to use.
#pragma once

#include <cstddef>

#include "elf/elf_file.h"

namespace ljprof::elf {

inline size_t exercise_all_accessors(const ElfFile& elf) {
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
  for (auto dir : elf.runpath()) sink += dir.size();
  if (elf.build_id()) sink += elf.build_id()->size();
  if (elf.find_symbol("lua_close") != nullptr) ++sink;
  return sink;
}

}  // namespace ljprof::elf
