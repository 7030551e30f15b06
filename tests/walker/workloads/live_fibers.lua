-- A running Tarantool whose fibers wait in different places, for `ljprof fibers -p PID`: one
-- asleep four Lua calls deep, one reading an empty channel, one in a box call (box.ctl.wait_ro
-- on a read-write instance). From inside itself each prints its id and name (ljprof-fiber ID
-- NAME) and its traceback on the line of the call it suspends in. Then the main fiber prints
-- fiber.info() as YAML (Debian's tarantool 2.6 lists each fiber's C backtrace there), each
-- fiber's own status() (ljprof-status ID STATUS), "ljprof-ready", and sleeps.
local fiber = require("fiber")
local function show(tag)
  local self = fiber.self()
  io.stdout:write(tag, " ", self:id(), " ", self:name(), "\n")
  io.stdout:write("ljprof-traceback-begin\n", debug.traceback("", 2), "\nljprof-traceback-end\n")
  io.stdout:flush()
end
box.cfg{log = "tarantool.log", wal_mode = "none"}
local channel = fiber.channel(1)
local function nap() show("ljprof-fiber") fiber.sleep(1000) end
local function doze() nap() return 1 end
local function rest() local r = doze() return r end
local function sleeper() rest() end
local function read2() show("ljprof-fiber") local v = channel:get() return v end
local function read1() local v = read2() return v end
local function boxwait() show("ljprof-fiber") box.ctl.wait_ro(1000) end
local names = {{"sleeper", sleeper}, {"chan reader", read1}, {"box waiter", boxwait}}
local created = {}
for _, entry in ipairs(names) do
  local f = fiber.new(entry[2])
  f:name(entry[1])
  created[#created + 1] = f
  fiber.yield()
end
io.stdout:write("ljprof-fiber-info-begin\n", require("yaml").encode(fiber.info()),
  "ljprof-fiber-info-end\n")
for _, f in ipairs(created) do io.stdout:write("ljprof-status ", f:id(), " ", f:status(), "\n") end
io.stdout:write("ljprof-ready\n")
io.stdout:flush()
fiber.sleep(1000)
