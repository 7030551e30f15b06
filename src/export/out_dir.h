// export/out_dir.h: a directory of rotating pprof files, one per process per interval, for
// hosts without a profiling backend (or next to one): `go tool pprof`, `ljprof report` and any
// pprof viewer read them as they are.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/result.h"
#include "export/interval_profile.h"
#include "export/sink.h"

namespace ljprof::exporter {

struct OutDirOptions {
  std::string dir;
  // Retention, applied after every write: the oldest files beyond either limit are deleted
  // (0: no limit). The file just written is always kept, even when it alone exceeds keep_bytes.
  size_t keep_files = 1000;
  uint64_t keep_bytes = 1ull << 30;
};

// Creates `dir` (and its parents) if needed, checks it is a writable directory, and removes
// temporary files that writers which no longer run left behind.
//
// Each delivery writes IntervalProfile::pprof_gz to a temporary file in `dir` (a dot file that
// no reader and no retention pass takes for a profile), then renames it to
// out_dir_file_name() — readers never see a partial file — without replacing an existing file
// (a ".N" suffix before ".pb.gz" makes the name unique). Out of space, quota and I/O errors are
// retryable; any other write error rejects the profile.
Result<std::unique_ptr<Sink>> make_out_dir_sink(OutDirOptions options);

// "<UTC start of the interval, yyyymmddThhmmssZ>-<app>-<pid>.pb.gz" for a CPU profile, and
// "...-<pid>.<kind>.pb.gz" for another kind ("wall"): names sort by time. The app
// keeps [A-Za-z0-9_.-] (anything else becomes '_'), at most 64 bytes, "unknown" when empty.
std::string out_dir_file_name(const IntervalProfile& profile);

// Whether `name` is a file of this naming pattern (the only files retention ever deletes).
bool is_out_dir_file_name(const std::string& name);

}  // namespace ljprof::exporter
