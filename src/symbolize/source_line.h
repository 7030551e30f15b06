// symbolize/source_line.h: the source file and line of a native pc, from the DWARF line table
// (.debug_line through libdw), for files that carry debug info. Debian's tarantool does; the
// stripped luajit, libluajit and libc give nothing, which is not an error.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "elf/elf_file.h"

namespace ljprof::symbolize {

struct SourceLine {
  std::string file;  // as the line table names it (usually an absolute path)
  int line = 0;
};

class SourceLines {
 public:
  // The line table of `file`, else of its separate debug file found by build-id as gdb and
  // addr2line find it (`debug`: the one the caller names symbols from too, opened once).
  // nullptr when neither has .debug_info and .debug_line or libdw cannot open them. The file is
  // read again from its path.
  static std::unique_ptr<SourceLines> open(const elf::ElfFile& file, elf::LazyDebugFile& debug);
  ~SourceLines();
  SourceLines(const SourceLines&) = delete;
  SourceLines& operator=(const SourceLines&) = delete;

  // The line-table row covering `link_address` (the innermost inlined source position, as
  // addr2line without -i prints it), or nullopt.
  std::optional<SourceLine> at(uint64_t link_address) const;

 private:
  struct Handles;
  explicit SourceLines(std::unique_ptr<Handles> h);
  std::unique_ptr<Handles> h_;
};

}  // namespace ljprof::symbolize
