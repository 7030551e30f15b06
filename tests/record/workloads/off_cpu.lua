-- Off-CPU time in two places: each round long_wait blocks in the FFI call usleep 3 x 30 ms and
-- short_wait 1 x 10 ms. Each measures its own time in usleep with the monotonic clock; at the
-- end it prints "off_cpu long=SECONDS short=SECONDS": the oracle for the off-CPU profile's split
-- and total. Runs for arg[1] seconds (default 3) after a first, unmeasured half-second asleep in
-- the main chunk: a recorder that starts it needs a moment to have its unwind context, however
-- fast the machine, and that moment must not fall in the measured part.
local ffi = require("ffi")
ffi.cdef([[
int usleep(unsigned int usec);
typedef struct { long tv_sec; long tv_nsec; } ljprof_timespec;
int clock_gettime(int clk, ljprof_timespec *tp);
]])
local ts = ffi.new("ljprof_timespec")
local function now()
  ffi.C.clock_gettime(1, ts) -- CLOCK_MONOTONIC
  return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
end
local waited = {long = 0, short = 0}
local function timed_sleep(which, us)
  local t0 = now()
  ffi.C.usleep(us)
  waited[which] = waited[which] + (now() - t0)
end
local function long_wait() for _ = 1, 3 do timed_sleep("long", 30000) end end
local function short_wait() timed_sleep("short", 10000) end
ffi.C.usleep(500000)
local stop = now() + (tonumber(arg[1]) or 3)
while now() < stop do
  long_wait()
  short_wait()
end
io.stdout:write(string.format("off_cpu long=%.6f short=%.6f\n", waited.long, waited.short))
