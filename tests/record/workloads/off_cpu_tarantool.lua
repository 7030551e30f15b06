-- A Tarantool whose tx thread is idle in its event loop but for one fiber that blocks the whole
-- thread in a C call (FFI usleep, 100 ms) every 0.4 s; with arg[1] "idle", no fiber blocks.
-- Prints "ljprof-ready" once started.
local fiber = require("fiber")
local ffi = require("ffi")
ffi.cdef("int usleep(unsigned int usec);")
local function block_tx() ffi.C.usleep(100000) end
if arg[1] ~= "idle" then
  fiber.create(function() while true do fiber.sleep(0.4) block_tx() end end)
end
io.stdout:write("ljprof-ready\n")
io.stdout:flush()
fiber.sleep(1e9)
