-- signal_parked.lua LIB: calls park_in_handler of LIB (tests/record/workloads/signal_handler.c)
-- from the interpreter, which raises SIGUSR1 and never returns from its handler: a core of this
-- process has the handler's frames stacked on raise, the FFI call and the Lua frames. The
-- traceback is printed from the call's line.
jit.off()
local ffi = require("ffi")
ffi.cdef("void park_in_handler(void);")
local lib = ffi.load(arg[1])
local function park()
  io.stdout:write("ljprof-traceback-begin\n", debug.traceback("", 1), "\nljprof-traceback-end\n") io.stdout:flush() lib.park_in_handler()
end
local function outer()
  park()
  return 1
end
outer()
