// The oracle of the signal-frame recordings (workloads/signal_interrupted.lua with the C handler
// of workloads/signal_handler.c), x86-64 and arm64: how many samples went through the handler,
// and of those how many continued into the Lua loop the signal interrupted, at the line the
// workload names itself (debug.getinfo).
#pragma once

#include <string>

namespace ljprof::record_oracle {

struct SignalTally {
  double walked = 0, rooted = 0;
  double in_handler = 0;       // `<signal handler called>` with on_alarm above it
  double interrupted_lua = 0;  // ... and `spin` below it
  double at_loop = 0;          // ... at the inner loop's line: interrupted in the interpreter
  double at_clock = 0;         // ... at os.clock's call: interrupted in it (its system call)
};

// The frames `spin` has at the two lines the workload names ("clock_line=N loop_line=M").
struct SignalLines {
  std::string clock, loop;  // "spin (signal_interrupted.lua:N)"; empty if not printed
};
SignalLines signal_lines(const std::string& workload_out);

SignalTally tally_signal_stacks(const std::string& folded_path, const SignalLines& lines);

}  // namespace ljprof::record_oracle
