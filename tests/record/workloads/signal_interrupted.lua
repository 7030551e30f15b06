-- signal_interrupted.lua LIB SECONDS [QUIET]: the interpreter (JIT off) spins in `spin` for
-- SECONDS of its own CPU clock while the C handler of LIB (signal_handler.c) takes SIGALRM every
-- 4 ms and spins 2 ms in handler_spin: a signal frame stacked on Lua code, which the signal
-- mostly finds running bytecode (the clock is read once per 10000 additions). QUIET seconds
-- without signals come first: time for a recorder on an emulated CPU to analyse LIB.
local ffi = require("ffi")
ffi.cdef([[
int start_signals(int interval_us, int spin_us);
void stop_signals(void);
]])
local lib = ffi.load(arg[1])
jit.off()

local function spin(seconds)
  local t0, x = os.clock(), 0
  -- The two lines a signal can find `spin` at: the clock's call and the inner loop.
  local here = debug.getinfo(1, "l").currentline
  io.write("clock_line=", here + 2, " loop_line=", here + 3, "\n")
  while os.clock() - t0 < seconds do
    for i = 1, 10000 do x = x + i end
  end
  return x
end

spin(tonumber(arg[3]) or 0)
assert(lib.start_signals(4000, 2000) == 0)
spin(tonumber(arg[2]))
lib.stop_signals()
