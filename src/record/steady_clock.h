// record/steady_clock.h: the clock the recorder times itself by (drain periods, and how old a
// process's context, its copies or a context the kernel built are).
#pragma once

#include <chrono>

namespace ljprof::record {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace ljprof::record
