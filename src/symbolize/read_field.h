// symbolize/read_field.h: one bounded read of an unsigned LuaJIT field (1, 2, 4 or 8 bytes,
// little-endian into a uint64) through the walker's memory reader, with an error naming the
// field and the address. Shared by the symbolizer's readers (prototypes, call sites,
// snapshots); not part of the public interface.
#pragma once

#include <cstdint>

#include "abi/read_mem.h"
#include "common/result.h"

namespace ljprof::symbolize {

Result<uint64_t> read_uint(const ljprof_mem_reader& mem, uint64_t addr, uint32_t size,
                           const char* what);

}  // namespace ljprof::symbolize
