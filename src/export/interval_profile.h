// export/interval_profile.h: one finished profile of one process over one agent interval, the
// unit every sink receives (Pyroscope ingest, the rotating output directory).
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace ljprof::exporter {

struct IntervalProfile {
  // Pyroscope's application name; the value of the "service_name" label as well.
  std::string app_name;
  // service_name, host_name, pid, runtime and the user's labels. Sinks sanitize keys and values
  // for their backend; the map's order (sorted keys) is the order they are sent in.
  std::map<std::string, std::string> labels;
  uint32_t pid = 0;
  int64_t from_unix_s = 0;  // the interval, wall clock seconds since the epoch
  int64_t until_unix_s = 0;
  uint32_t sample_rate_hz = 0;
  // What it measures: "cpu" (the recorder's samples) or "wall" (the fibers of a Tarantool,
  // record/fiber_wall.h): Pyroscope's name suffix, and part of an out-dir file name.
  std::string kind = "cpu";
  std::string pprof_gz;  // report::pprof_gzip_bytes() of the interval's Profile
};

}  // namespace ljprof::exporter
