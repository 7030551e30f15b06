// cli/loader_pages.h: gives back the pages of this process's relocation tables. The dynamic
// loader reads each loaded object's DT_RELA table once, at start-up, to relocate it, and the
// pages stay resident in the process for nothing: Capstone's is 1.8 MB (its instruction tables
// are pointer arrays, a relocation each), the portable executable's 2 MB, a tenth of what the
// recorder keeps resident for one Tarantool. Only DT_RELA: DT_JMPREL is read again by lazy
// binding.
#pragma once

#include <cstdint>

namespace ljprof::cli {

struct LoaderPages {
  uint32_t objects = 0;  // loaded objects whose table was given back
  uint64_t bytes = 0;    // whole pages given back
};

// madvise(MADV_DONTNEED) on the whole pages inside every loaded object's DT_RELA table that lie
// in a read-only PT_LOAD segment (clean file pages: a later read faults them in again from the
// page cache). An object with DT_TEXTREL, or whose table is not found in such a segment, is
// left alone.
LoaderPages release_relocation_pages();

}  // namespace ljprof::cli
