// profile/profile.h: the profile every output is written from (pprof, folded stacks, flame
// graph, top). Producers — `ljprof record` (live eBPF samples) and `ljprof report` (a saved
// pprof file) — fill it with symbolized mixed stacks, leaf first; writers aggregate identical
// stacks themselves, so a producer may append one Sample per event.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "symbolize/frame.h"

namespace ljprof::profile {

// The frame kinds of DESIGN.md ("Frame model"), symbolize/frame.h's.
using symbolize::frame_kind_from_name;
using symbolize::frame_kind_name;
using symbolize::FrameKind;

// One frame as profiles show and aggregate it (profile::profile_frames makes it from the walk's
// symbolize::Frame; `ljprof report` reads it back from a pprof file). Kind Trace is Lua code
// that ran as JIT-compiled machine code: `function` names the Lua function, like a Lua frame.
// Its strings are printable text (common/printable.h) when it comes from the walk or a file.
struct Frame {
  FrameKind kind = FrameKind::Native;
  // What a person reads: native symbol (demangled), Lua function name ("alpha", else
  // "function <app.lua:12>" or "main chunk"), "[unknown: reason]".
  std::string function;
  std::string file;            // Lua: the chunk's file as loaded; native: source file if known
  int64_t line = 0;            // current line (0 = unknown)
  int64_t start_line = 0;      // Lua: the function's first line (GCproto firstline)
  std::string module;          // native/cfunc/root: path of the mapped file; "" if none
  std::string build_id;        // hex GNU build-id of `module`, "" if it has none
  uint64_t address = 0;        // native/root/cfunc: runtime pc
  uint64_t module_offset = 0;  // address - load bias (link-time address)
  uint32_t trace = 0;          // kind Trace: the JIT trace whose machine code ran (0: unknown)

  friend bool operator==(const Frame&, const Frame&) = default;
  friend auto operator<=>(const Frame&, const Frame&) = default;
};

// The Tarantool fiber a sample ran on (DESIGN.md "Labels ride on samples"): pprof labels
// `fiber` and `fiber_id`. Neither id nor name: no fiber (not Tarantool, not its tx thread, or not
// readable). A name without an id: a fiber read back from a profile that carried only its name
// (the agent's, report/pprof.h FiberLabels::NameOnly).
struct SampleFiber {
  uint64_t id = 0;   // fiber.fid: never reused within its cord; 0 when unknown
  std::string name;  // fiber.name at sample time, printable text
  // The label `cord`: the Tarantool cord the fiber belongs to (one per thread: "main", "iproto",
  // "wal", ...), its cord.name, printable text; "" when not known. Fiber ids and names repeat
  // across cords (each starts at 101 and has a "main").
  std::string cord;
  bool present() const { return id != 0 || !name.empty(); }
  friend bool operator==(const SampleFiber&, const SampleFiber&) = default;
  friend auto operator<=>(const SampleFiber&, const SampleFiber&) = default;
};

struct Sample {
  std::vector<Frame> frames;  // leaf first
  int64_t count = 1;          // CPU or wall samples (0 in an off-CPU sample)
  // Nanoseconds off the CPU at these frames (record --off-cpu): pprof's off_cpu/nanoseconds.
  int64_t off_cpu_ns = 0;
  // A heap profile's bytes at these frames (ljprof heap): pprof's inuse_space/bytes; `count`
  // is then its objects (inuse_objects/count).
  int64_t bytes = 0;
  uint32_t pid = 0;
  uint32_t tid = 0;
  SampleFiber fiber;
  // The label `state`: a wall-clock fiber sample's fiber state (core/fiber_snapshot.h: running,
  // ready, suspended, dead), or why an off-CPU sample's thread was off (blocked, preempted);
  // "" in a CPU sample.
  std::string state;
};

// An event-loop stall (record --loop-stalls): thread `tid` of `pid` spent `duration_ns` between
// returning from its loop's wait and entering the next one, from `start_ns` (CLOCK_MONOTONIC, the
// kernel's clock); `samples` are the CPU samples and off-CPU intervals taken inside it.
struct LoopStall {
  uint32_t pid = 0;
  uint32_t tid = 0;
  int64_t start_ns = 0;
  int64_t duration_ns = 0;
  std::vector<Sample> samples;
};

// What a sample's weight measures (DESIGN.md "Profile types"): CPU time of the thread that was
// sampled, wall-clock time of a fiber whether it ran or waited (Pyroscope's `wall` type), the
// time inside event-loop stalls (the agent's --loop-stalls profile: a CPU sample weighs a
// period, an off-CPU one its off_cpu_ns), or a memory profile of live objects (`ljprof heap`:
// pprof's inuse_objects and inuse_space, what go tool pprof and Pyroscope's memory type read).
enum class ValueType { Cpu, Wall, LoopStall, Heap };

// Every sample of a recording in time order (record --speedscope): the aggregate outputs keep
// how often a stack ran, a timeline keeps when. `stacks` holds each distinct stack once (its
// pid, fiber and frames; count unused); each point is one CPU sample or off-CPU interval of
// thread `tid`, at `time_ns` (CLOCK_MONOTONIC, the kernel's clock; an off-CPU interval at its
// end).
struct Timeline {
  struct Point {
    int64_t time_ns = 0;
    int64_t off_cpu_ns = 0;  // 0: a CPU sample (it stands for one sampling period)
    uint32_t tid = 0;
    uint32_t stack = 0;  // index into stacks
  };
  std::vector<Sample> stacks;
  std::vector<Point> points;  // by thread, in time order within each thread
};

struct Profile {
  std::vector<Sample> samples;
  ValueType value_type = ValueType::Cpu;
  int64_t period_ns = 0;      // sampling period (1e9 / frequency); 0 if unknown
  int64_t start_time_ns = 0;  // wall clock, nanoseconds since the epoch
  int64_t duration_ns = 0;
  // Named per-reason counters of the producer (e.g. "read fault", "map full"); written
  // as pprof comments so a saved profile still says how good it is.
  std::map<std::string, uint64_t> counters;
  // What Sample::count counts, as the top table and the flame graph word it: "samples", or "us
  // off-CPU" in an off-CPU view (report/views.h). Not written to pprof.
  std::string count_unit = "samples";
  // record --loop-stalls: every stall over the threshold, in the order they ended. Not in pprof.
  std::vector<LoopStall> stalls;
  // record --speedscope: the samples in time order. Not in pprof.
  Timeline timeline;
};

}  // namespace ljprof::profile
