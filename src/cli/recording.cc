#include "cli/recording.h"

#include "cfi/table_cache.h"
#include "record/counters.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>

namespace ljprof::cli {

Result<std::vector<uint32_t>> parse_pid_list(const std::string& text) {
  std::vector<uint32_t> pids;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(pos, comma - pos);
    char* end = nullptr;
    const unsigned long v = std::strtoul(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v == 0 || v > UINT32_MAX) {
      return make_error("-p: '{}' is not a process id", item);
    }
    pids.push_back(static_cast<uint32_t>(v));
    pos = comma + 1;
  }
  return pids;
}

void add_pid_option(Command& cmd, RecordingFlags& flags, std::string_view help) {
  cmd.option("-p,--pid", flags.pids, help);
}

void add_frequency_option(Command& cmd, RecordingFlags& flags, uint32_t default_hz,
                          uint32_t max_hz) {
  flags.freq = default_hz;
  cmd.option("-F,--freq", flags.freq,
             fmt::format("Samples per second per CPU (default {})", default_hz))
      .range(1, max_hz);
}

void add_duration_option(Command& cmd, RecordingFlags& flags, std::string_view otherwise) {
  cmd.option("-d,--duration", flags.duration,
             fmt::format("Stop after SECONDS (default: {})", otherwise))
      .non_negative();
}

void add_recording_resource_options(Command& cmd, RecordingFlags& flags,
                                    std::string_view ringbuf_help) {
  cmd.option("--ringbuf-mb", flags.ringbuf_mb, ringbuf_help).range(1, 1024);
  add_unwind_rows_option(cmd, flags.unwind_rows);
  add_table_cache_option(cmd, flags.table_cache);
}

void add_off_cpu_option(Command& cmd, RecordingFlags& flags, std::string_view help) {
  cmd.flag("--off-cpu{1ms}", flags.off_cpu,
           fmt::format("Also record time off the CPU: each time a followed thread is away at "
                       "least THRESHOLD (default 1ms; e.g. --off-cpu=10ms), the mixed stack "
                       "where it left the CPU, weighted by the time away; {}",
                       help))
      .option_text("[=THRESHOLD]");
}

void add_loop_stalls_option(Command& cmd, RecordingFlags& flags, std::string_view help) {
  cmd.option("--loop-stalls", flags.loop_stalls,
             fmt::format("Watch for event-loop stalls: a followed thread (Tarantool's tx thread, "
                         "an nginx worker) spending at least THRESHOLD (e.g. 50ms) between "
                         "returning from its loop's wait (epoll_wait) and entering the next one; "
                         "{}",
                         help))
      .type_name("THRESHOLD");
}

Result<record::RecordOptions> recording_options(const RecordingFlags& flags) {
  record::RecordOptions o;
  if (!flags.pids.empty()) {
    LJ_ASSIGN_OR_RETURN(o.pids, parse_pid_list(flags.pids));
  }
  o.frequency_hz = flags.freq;
  o.duration_s = flags.duration;
  o.ringbuf_mb = flags.ringbuf_mb;
  o.unwind_rows = flags.unwind_rows;
  o.table_cache_dir = flags.table_cache;
  if ((flags.ringbuf_mb & (flags.ringbuf_mb - 1)) != 0) {
    return make_error("--ringbuf-mb must be a power of two");
  }
  if (!flags.off_cpu.empty()) {
    LJ_ASSIGN_OR_RETURN(o.off_cpu_threshold_ns, parse_duration("--off-cpu", flags.off_cpu));
  }
  if (!flags.loop_stalls.empty()) {
    LJ_ASSIGN_OR_RETURN(o.loop_stall_ns, parse_duration("--loop-stalls", flags.loop_stalls));
  }
  return o;
}

Result<uint64_t> parse_duration(const char* flag, const std::string& text) {
  static const std::pair<const char*, double> kUnits[] = {
      {"ns", 1}, {"us", 1e3}, {"ms", 1e6}, {"s", 1e9}};
  for (const auto& [unit, scale] : kUnits) {
    const size_t n = std::strlen(unit);
    if (text.size() <= n || text.compare(text.size() - n, n, unit) != 0) continue;
    const std::string number = text.substr(0, text.size() - n);
    char* end = nullptr;
    const double v = std::strtod(number.c_str(), &end);
    if (end == number.c_str() || *end != '\0' || !(v > 0) || v * scale > 3600e9) break;
    // "ms", "us" and "ns" are tried before "s", so "10ms" is never 10 "m" seconds.
    return static_cast<uint64_t>(v * scale);
  }
  return make_error(
      "{} {}: expected a duration above 0 and up to an hour, with a unit: ns, us, ms or s "
      "(e.g. 10ms)",
      flag, text);
}

void print_record_summary(std::ostream& out, std::string_view command, const record::RecordStats& r,
                          double seconds) {
  // Walks: CPU samples, and off-CPU intervals over the threshold (--off-cpu).
  uint64_t walks = r.samples;
  for (const record::RecordStats::Reason& reason : r.reasons) {
    if (reason.metric == "off_cpu_intervals") walks += reason.count;
  }
  // Of the walks that could have unwound: a user stack (not inside execve, not exiting) and an
  // unwind context.
  std::string with_context;
  const uint64_t unwalkable = r.without_context + r.without_user_stack;
  if (unwalkable > 0 && walks > unwalkable) {
    const uint64_t had = walks - unwalkable;
    with_context = fmt::format("; {:.1f}% of the {} that had a user stack and an unwind context",
                               100.0 * r.reached_root / had, had);
  }
  out << fmt::format(
      "ljprof {}: {} samples in {:.1f} s, {} delivered, {} ({:.1f}%) unwound to a proven "
      "root{}\n",
      command, r.samples, seconds, r.delivered, r.reached_root,
      walks ? 100.0 * r.reached_root / walks : 0.0, with_context);
  for (const record::RecordStats::Reason& reason : r.reasons) {
    out << fmt::format("  {:>8}  {}\n", reason.count, reason.name);
    for (auto& [where, n] : reason.sites) out << fmt::format("  {:>8}    {} at {}\n", "", n, where);
  }
}

void add_table_cache_option(Command& cmd, std::string& dir) {
  dir = cfi::default_table_cache_dir();
  cmd.option("--table-cache", dir,
             "Keep built unwind tables in DIR between runs, keyed by build-id, so files analysed "
             "once are not analysed again ('' = off; default $LJPROF_CACHE_DIR, else "
             "$XDG_CACHE_HOME/ljprof, else ~/.cache/ljprof)")
      .type_name("DIR");
}

void add_unwind_rows_option(Command& cmd, uint32_t& rows) {
  constexpr uint32_t kMinUnwindRows = 1024;
  rows = record::RecordOptions::kDefaultUnwindRows;
  cmd.option(
         "--unwind-rows", rows,
         fmt::format(
             "Capacity of the kernel's unwind-row map: the CFI rows of every file a sampled "
             "process maps, 24 bytes of kernel memory each (never swapped out), allocated whole "
             "when recording starts (default {} = {} MiB, at most {} = {} MiB). A file takes its "
             "rows "
             "once however many processes map it (Debian 12: libc ~28k, luajit ~12k, a "
             "tarantool with its libraries ~490k) and gives them back when none does any more; "
             "a file that does not fit is sampled without them (walks stop in it, counted as "
             "'map full: CFI rows') until others free room",
             record::RecordOptions::kDefaultUnwindRows,
             record::RecordOptions::kDefaultUnwindRows * 24 >> 20, LJ_REC_MAX_ROWS_LIMIT,
             uint64_t{LJ_REC_MAX_ROWS_LIMIT} * 24 >> 20))
      .range(kMinUnwindRows, LJ_REC_MAX_ROWS_LIMIT)
      // (the range's own text prints the limit as a float)
      .option_text(fmt::format("N in [{} - {}]", kMinUnwindRows, LJ_REC_MAX_ROWS_LIMIT));
}

void print_record_gauges(std::ostream& out, std::string_view command,
                         const record::RecordStats& stats) {
  for (const record::RecordStats::Gauge& g : stats.gauges) {
    out << fmt::format("ljprof {}: {} {}\n", command, g.value, g.text);
  }
}

void print_record_cost(std::ostream& out, std::string_view command, const record::RecordCost& c) {
  out << fmt::format("ljprof {}: agent CPU {:.3f} s in all, max RSS {:.1f} MiB\n", command, c.cpu_s,
                     c.max_rss_kib / 1024.0);
  const record::ResidentParts& r = c.resident;
  if (r.total() > 0) {
    out << fmt::format(
        "ljprof {}: resident at the end {:.1f} MiB: heap {:.1f} (tables, caches, thread stacks), "
        "BPF maps {:.1f} (ring buffers, unwind rows), ljprof {:.1f}, libraries {:.1f}, mapped "
        "files {:.1f} (the targets' executables and debug files), other {:.1f}\n",
        command, r.total() / 1024.0, r.heap_kib / 1024.0, r.bpf_kib / 1024.0, r.ljprof_kib / 1024.0,
        r.libraries_kib / 1024.0, r.files_kib / 1024.0, r.other_kib / 1024.0);
  }
  if (c.steady_s > 0 && c.steady_samples > 0) {
    out << fmt::format(
        "ljprof {}: agent CPU in steady state (the last {:.1f} s): {:.3f} s for {} delivered "
        "samples, {:.2f} us per sample\n",
        command, c.steady_s, c.steady_cpu_s, c.steady_samples,
        c.steady_cpu_s * 1e6 / c.steady_samples);
  } else {
    out << fmt::format(
        "ljprof {}: agent CPU in steady state: none (no samples after the first "
        "{:.0f} s)\n",
        command, record::RecordCost::kSteadyAfterS);
  }
  if (c.walk_samples > 0) {
    out << fmt::format(
        "ljprof {}: kernel program per sample: median {:.2f} us, p90 {:.2f} us, {:.1f} frames "
        "on average ({} samples)\n",
        command, c.walk_ns_median / 1e3, c.walk_ns_p90 / 1e3, c.walk_mean_frames, c.walk_samples);
    const record::WalkWork& w = c.walk_work;
    out << fmt::format(
        "ljprof {}: kernel program per frame: {:.2f} user-memory reads ({:.1f} bytes), {:.2f} row "
        "lookups ({:.2f} answered by the row cache, {:.2f} row-map reads by the others' binary "
        "searches)\n",
        command, w.per_frame(w.reads), w.per_frame(w.read_bytes), w.per_frame(w.row_lookups),
        w.per_frame(w.row_cache_hits), w.per_frame(w.row_reads));
  }
  if (c.walk_samples > 0) {
    out << fmt::format(
        "ljprof {}: stacks: {} samples repeated a stack, {} were built on outer frames "
        "symbolized before, {} were symbolized throughout; {} frames symbolized\n",
        command, c.stacks_whole_hits, c.stacks_suffix_hits, c.stacks_symbolized,
        c.stack_units_symbolized);
  }
  out << fmt::format("ljprof {}: BPF program load (maps and the kernel verifier): {:.1f} ms CPU\n",
                     command, c.program_load_cpu_ms);
  out << fmt::format("ljprof {}: attach CPU: {} process{}, {:.1f} ms in all\n", command,
                     c.attach_count, c.attach_count == 1 ? "" : "es", c.attach_cpu_ms);
  for (const record::RecordCost::Attach& a : c.attaches) {
    out << fmt::format("  {:>8.1f} ms  pid {} ({})\n", a.cpu_ms, a.pid, a.comm);
  }
  if (c.attach_count > c.attaches.size()) {
    out << fmt::format("  ... and {} more\n", c.attach_count - c.attaches.size());
  }
  if (c.table_cache_dir.empty()) {
    out << fmt::format(
        "ljprof {}: unwind tables: no table cache (--table-cache ''; or this "
        "ljprof has no build-id)\n",
        command);
  } else {
    out << fmt::format("ljprof {}: unwind tables: {} read from the cache {}, {} built\n", command,
                       c.tables_from_cache, c.table_cache_dir, c.tables_built);
  }
  if (!c.table_cache_problem.empty()) {
    out << fmt::format("ljprof {}: table cache: {}\n", command, c.table_cache_problem);
  }
}

}  // namespace ljprof::cli
