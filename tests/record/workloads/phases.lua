-- Two phases one after the other, each burning arg[1] seconds (default 0.4) of its own CPU
-- clock (os.clock) in its own function: phase_a, then phase_b. Prints "phases a=SECONDS
-- b=SECONDS" (each phase's CPU time as os.clock measured it): the oracle for a timeline's order
-- and lengths. Sleeps half a second first, unmeasured: a recorder that starts it needs a moment to
-- have its unwind context, however fast the machine.
local ffi = require("ffi")
ffi.cdef("int usleep(unsigned int usec);")
local function spin(seconds)
  local x, stop = 0, os.clock() + seconds
  while os.clock() < stop do x = x + 1 end
  return x
end
local function phase_a(seconds) return spin(seconds) end
local function phase_b(seconds) return spin(seconds) end
local seconds = tonumber(arg[1]) or 0.4
ffi.C.usleep(500000)
local t0 = os.clock()
phase_a(seconds)
local t1 = os.clock()
phase_b(seconds)
local t2 = os.clock()
io.stdout:write(string.format("phases a=%.6f b=%.6f\n", t1 - t0, t2 - t1))
