-- Three named Tarantool fibers, each suspended a different number of Lua calls deep in a
-- different C call (fiber.sleep, a fiber.channel get, a fiber.cond wait). From inside itself
-- each prints its own id and name (ljprof-fiber ID NAME) and its traceback, on the line of the
-- call it suspends in; then the main fiber prints its id and name (ljprof-running ID NAME) and
-- aborts. `ljprof core --all-fibers` must name each fiber and give the same Lua frames.
-- Before aborting it prints fiber.info() as YAML between "ljprof-fiber-info-begin" and
-- "ljprof-fiber-info-end": Debian's tarantool 2.6 (ENABLE_BACKTRACE) lists each fiber's C
-- backtrace there, the oracle for the suspended fibers' native frames.
local fiber = require("fiber")
local common = require("common")
local function show(tag)
  local self = fiber.self()
  io.stdout:write(tag, " ", self:id(), " ", self:name(), "\n")
  io.stdout:write("ljprof-traceback-begin\n", debug.traceback("", 2), "\nljprof-traceback-end\n")
  io.stdout:flush()
end
local channel = fiber.channel(1)
local cond = fiber.cond()
local function sleeper() show("ljprof-fiber") fiber.sleep(100) end
local function read2() show("ljprof-fiber") local v = channel:get() return v end
local function read1() local v = read2() return v end
local function wait3() show("ljprof-fiber") cond:wait() end
local function wait2() wait3() return 1 end
local function wait1() local r = wait2() return r end
local names = {{"sleeper", sleeper}, {"chan reader", read1}, {"cond-waiter", wait1}}
for _, entry in ipairs(names) do
  local f = fiber.new(entry[2])
  f:name(entry[1])
  fiber.yield()  -- lets the new fiber run up to its suspension
end
io.stdout:write("ljprof-fiber-info-begin\n", require("yaml").encode(fiber.info()),
  "ljprof-fiber-info-end\n")
local self = fiber.self()
io.stdout:write("ljprof-running ", self:id(), " ", self:name(), "\n")
common.crash()
