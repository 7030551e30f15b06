// report/pprof.h: gzip-compressed pprof profile.proto — the format `go tool pprof`, Pyroscope,
// Parca and Grafana read — written from a Profile, and read back by `ljprof report`.
#pragma once

#include <cstdint>
#include <string>

#include "common/result.h"
#include "profile/profile.h"

namespace ljprof::report {

// Layout of what write_pprof() writes:
// - sample types samples/count and cpu/nanoseconds (count * period_ns); period_type
//   cpu/nanoseconds, period = period_ns, time_nanos, duration_nanos. A wall-clock fiber profile
//   (Profile::value_type Wall) says wall/nanoseconds instead of cpu/nanoseconds (Pyroscope's
//   wall type), and its samples carry the fiber's state as the string label "state". A profile
//   with off-CPU time (Sample::off_cpu_ns) gets a third sample type off_cpu/nanoseconds. A
//   stall profile (value_type LoopStall) says loop_stall/nanoseconds: a CPU sample's count *
//   period_ns, an off-CPU sample's (one with a "state" label) off_cpu_ns.
// - one Location per distinct Frame (address = Frame::address, one Line with Frame::line;
//   no Line for a native frame without a symbol, which pprof then shows by address),
//   one Function per distinct (kind, name, file, start_line); Function.system_name is
//   "KIND:NAME" (e.g. "lua:handler"), which is how the frame kind survives a round trip.
// - one Mapping per (module, build_id, load bias = address - module_offset). pprof wants
//   [memory_start, memory_limit) plus file_offset; a sample only tells us the pcs it saw, so
//   memory_start/limit are the lowest/highest pc seen in that module (+1) and file_offset is
//   memory_start's module offset. pprof's own rule, offset = pc - memory_start + file_offset,
//   then gives back exactly Frame::module_offset. The mapping is marked has_functions (the
//   names are already symbolized; pprof must not re-symbolize).
// - non-zero Sample pid/tid as numeric labels "pid"/"tid"; a sample's fiber (SampleFiber::present)
//   as the string label "fiber" (its name; left out when empty) and the numeric label
//   "fiber_id" (the id's 64 bits as int64); one numeric label "trace" per frame of kind Trace,
//   leaf first (the JIT trace that ran it); Profile::counters as comments "counter NAME=VALUE".
// - every string is printable text (common/printable.h; protobuf requires UTF-8): a byte that
//   is not part of a printable UTF-8 character is written as \xNN, the one thing that does not
//   round-trip byte for byte.
Status write_pprof(const profile::Profile& profile, const std::string& path);

// Which labels a sample's fiber gets. NameOnly leaves out "fiber_id": a backend that makes every
// sample label a series label (Pyroscope's ingest) would make a series of every fiber ever
// created, since ids are never reused.
enum class FiberLabels { NameAndId, NameOnly };

// The bytes write_pprof() writes to its file (the gzip-compressed serialized profile.proto), for
// a consumer that sends them elsewhere (export/: Pyroscope ingest, the rotating output
// directory).
Result<std::string> pprof_gzip_bytes(const profile::Profile& profile,
                                     FiberLabels fibers = FiberLabels::NameAndId);

// Caps on what read_pprof() accepts, so a hostile file cannot make it allocate without bound.
struct PprofReadLimits {
  uint64_t max_file_bytes = 512ull << 20;          // the file as stored (gzip or raw)
  uint64_t max_decompressed_bytes = 512ull << 20;  // the serialized profile.proto
  uint64_t max_samples = 1ull << 24;
  uint64_t max_locations = 1ull << 24;
  uint64_t max_total_frames = 1ull << 25;  // frames over all samples after expanding inlining
};

// Reads what write_pprof() writes exactly (kinds, modules, offsets, pid/tid, fibers, counters),
// and any other pprof file (gzip or raw), its strings made printable text as the walk's are
// (common/printable.h): functions without a "KIND:" system_name become Native, inlined Lines
// become separate frames, a "fiber" label without a "fiber_id" is a fiber of unknown id, the count
// is the "samples" value (else the last sample type, pprof's default). Malformed input (bad
// gzip, bad protobuf, string/ID indexes out of range, caps exceeded) is an error naming the
// file and the reason.
Result<profile::Profile> read_pprof(const std::string& path, const PprofReadLimits& limits = {});

}  // namespace ljprof::report
