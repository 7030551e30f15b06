// report/heap_report.h: `ljprof heap`'s text and JSON — objects by type against the VM's own
// gc.total, and the biggest retainers with their paths from the roots.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "heap/heap_census.h"
#include "heap/heap_graph.h"

namespace ljprof::report {

struct HeapReportOptions {
  size_t top = 20;
  bool live = false;         // a running process: gc.total was read before and after
  uint64_t total_after = 0;  // g->gc.total after the walk (live)
};

// {"total_bytes", "vm_total_bytes", "types": {name: {"count", "bytes"}}, "retainers": [{"path",
// "retained_bytes", "own_bytes", "count", "type", "address"}], "unreached": {...},
// "malformed": {reason: count}, ...}
nlohmann::ordered_json heap_json(const heap::Census& census, const heap::Retainers& retainers,
                                 const HeapReportOptions& options);

std::string heap_text(const heap::Census& census, const heap::Retainers& retainers,
                      const HeapReportOptions& options);

}  // namespace ljprof::report
