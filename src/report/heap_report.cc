#include "report/heap_report.h"

#include <fmt/format.h>

#include "common/printable.h"

namespace ljprof::report {

namespace {

using Json = nlohmann::ordered_json;

// What the census counts: objects plus the string table's anchors (the rest of gc.total is
// the VM's own state: GG_State, JIT and FFI buffers).
uint64_t counted_bytes(const heap::Census& c) {
  return c.object_bytes() + c.string_table_bytes;
}

std::string human(uint64_t bytes) {
  if (bytes >= (uint64_t{10} << 20)) return fmt::format("{:.1f} MiB", bytes / 1048576.0);
  if (bytes >= (uint64_t{10} << 10)) return fmt::format("{:.1f} KiB", bytes / 1024.0);
  return fmt::format("{} B", bytes);
}

}  // namespace

Json heap_json(const heap::Census& c, const heap::Retainers& r, const HeapReportOptions& o) {
  Json out;
  out["total_bytes"] = counted_bytes(c);
  out["vm_total_bytes"] = c.vm_total;
  if (o.live) out["vm_total_bytes_after"] = o.total_after;
  out["object_bytes"] = c.object_bytes();
  out["string_table_bytes"] = c.string_table_bytes;
  out["string_table_count"] = c.strnum;
  Json types = Json::object();
  for (uint8_t t = heap::kMinGct; t <= heap::kMaxGct; ++t) {
    types[heap::gct_name(t)] = {{"count", c.types[t].count}, {"bytes", c.types[t].bytes}};
  }
  out["types"] = types;
  Json retainers = Json::array();
  for (size_t i = 0; i < r.top.size() && i < o.top; ++i) {
    const heap::Retainer& x = r.top[i];
    retainers.push_back({{"path", x.path},
                         {"retained_bytes", x.retained_bytes},
                         {"own_bytes", x.own_bytes},
                         {"count", x.count},
                         {"type", heap::gct_name(x.gct)},
                         {"address", fmt::format("{:#x}", x.addr)}});
  }
  out["retainers"] = retainers;
  out["unreached"] = {{"count", r.unreached_count}, {"bytes", r.unreached_bytes}};
  out["registry_found"] = c.registry != 0;
  out["edges"] = r.edges;
  out["unreadable_references"] = r.unreadable_refs;
  out["dropped_references"] = r.dropped_edges;
  Json malformed = Json::object();
  for (const auto& [why, n] : c.malformed) malformed[why] = n;
  out["malformed"] = malformed;
  out["reread_objects"] = c.reread_objects;
  out["global_state"] = fmt::format("{:#x}", c.g);
  return out;
}

std::string heap_text(const heap::Census& c, const heap::Retainers& r, const HeapReportOptions& o) {
  std::string s;
  const uint64_t counted = counted_bytes(c);
  const double pct = c.vm_total ? 100.0 * counted / c.vm_total : 0;
  s += fmt::format(
      "Lua heap of global_State {:#x}: {} in {} objects ({:.1f}% of the VM's gc.total "
      "{}; the rest is the VM's own state)\n",
      c.g, human(counted), c.objects.size(), pct, human(c.vm_total));
  if (o.live) {
    s += fmt::format("live: gc.total was {} before the walk and {} after", c.vm_total,
                     o.total_after);
    s += c.reread_objects == 0
             ? "\n"
             : fmt::format("; {} objects or links read whole only at a second look\n",
                           c.reread_objects);
  }
  s += fmt::format("\n{:<10} {:>10} {:>14}\n", "type", "count", "bytes");
  for (uint8_t t = heap::kMinGct; t <= heap::kMaxGct; ++t) {
    if (c.types[t].count == 0) continue;
    s += fmt::format("{:<10} {:>10} {:>14}\n", heap::gct_name(t), c.types[t].count,
                     c.types[t].bytes);
  }
  s += fmt::format("{:<10} {:>10} {:>14}\n", "strtab", "", c.string_table_bytes);
  s += fmt::format("\n{:>14} {:>12} {:>9}  {}\n", "retained", "own", "objects", "path");
  for (size_t i = 0; i < r.top.size() && i < o.top; ++i) {
    const heap::Retainer& x = r.top[i];
    s += fmt::format("{:>14} {:>12} {:>9}  {} ({})\n", x.retained_bytes, x.own_bytes, x.count,
                     printable_text(x.path), heap::gct_name(x.gct));
  }
  if (r.unreached_count > 0) {
    s += fmt::format("\n{} objects ({}) are reached from no root: garbage not yet collected\n",
                     r.unreached_count, human(r.unreached_bytes));
  }
  // Most of a live heap unreached is a read that raced a root (the collector or the program
  // rewriting it while it was read), not garbage: say so rather than let the paths look complete.
  if (o.live && r.unreached_count * 2 > c.objects.size()) {
    s += "warning: most objects were reached from no root: the read raced the program on a root; "
         "run it again, or with --stop for an exact snapshot\n";
  }
  if (r.dropped_edges > 0) {
    s += fmt::format("warning: {} references over what the objects' bytes can hold were dropped\n",
                     r.dropped_edges);
  }
  if (c.registry == 0) s += "warning: the registry was not found; its objects count as unreached\n";
  for (const auto& [why, n] : c.malformed) {
    s += fmt::format("warning: {} refused: {}\n", n, printable_text(why));
  }
  return s;
}

}  // namespace ljprof::report
