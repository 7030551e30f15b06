// cfi/table_cache.h: built unwind tables kept on disk, keyed by build-id, so a binary analysed
// once on a host is not analysed again by the next run. Attaching to a Tarantool process builds
// the tables of ~50 files (the binary, libc, libcrypto, ICU, ...): 0.7 s of CPU, most of it in
// libdw running CFI programs; read back from the cache the same tables cost a few milliseconds.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "cfi/cfi.h"
#include "common/result.h"
#include "elf/elf_file.h"

namespace ljprof::cfi {

// $LJPROF_CACHE_DIR, else $XDG_CACHE_HOME/ljprof, else $HOME/.cache/ljprof; "" when none is set.
std::string default_table_cache_dir();

class TableCache {
 public:
  // Tables under `dir`, created (mode 0700) at the first store. The key is the file's GNU
  // build-id, architecture and section headers (a stripped copy keeps the build-id, but without
  // .symtab its table differs) and this program's own build-id (another ljprof build may build
  // other rows from the same file): a file or a program without a build-id is never cached. An
  // empty `dir` gives a cache that neither finds nor stores anything.
  explicit TableCache(std::string dir);

  // The cached table of `file`, or nullopt. A cache file that is not a regular file owned by
  // this user and writable by no one else, or that fails UnwindTable::from_bytes or its header
  // check, is not used; `why` (when given) then says so, naming the file.
  std::optional<UnwindTable> load(const elf::ElfFile& file, std::string* why = nullptr);
  // Writes `table` for `file` (a temporary file renamed into place). Fails naming the path. The
  // first store of a TableCache also prunes the directory: cache files (*.cfi, and temporary
  // ones left by a killed run) not written or read for kPruneAfterDays go, whichever ljprof
  // build wrote them; load() marks a file it uses as read now.
  Status store(const elf::ElfFile& file, const UnwindTable& table);
  static constexpr int kPruneAfterDays = 30;

  bool enabled() const { return !dir_.empty() && !program_build_id_.empty(); }
  const std::string& dir() const { return dir_; }
  // The cache file of `file`, or "" when it has no key.
  std::string path_of(const elf::ElfFile& file) const;

  struct Counts {
    uint64_t hits = 0;
    uint64_t misses = 0;    // no file for the key (a first analysis)
    uint64_t rejected = 0;  // a file that was there but not used (`why`)
    uint64_t stored = 0;
    uint64_t store_failed = 0;
    uint64_t pruned = 0;
  };
  const Counts& counts() const { return counts_; }
  // The first reason a cache file was not used or could not be written, "" if none.
  const std::string& first_problem() const { return first_problem_; }

  // Cache files larger than this are not read (the largest table ljprof builds is a few MiB).
  static constexpr uint64_t kMaxFileBytes = 256u << 20;

 private:
  std::string dir_;
  std::string program_build_id_;
  void prune();
  void note_problem(const std::string& message);  // keeps the first for first_problem()
  Status store_failed(std::string message);       // counts it, notes it, returns it
  Counts counts_;
  std::string first_problem_;
  bool pruned_ = false;
};

}  // namespace ljprof::cfi
