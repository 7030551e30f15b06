-- named_fibers.lua for mini_tarantool.c (arm64): three named fibers, each switched out a
-- different number of Lua calls deep inside the C function mini.yield. From inside itself each
-- prints its own id and name (ljprof-fiber ID NAME) and its traceback, on the line of the call it
-- switches out in; then the scheduler prints the running fiber's id and name (ljprof-running ID
-- NAME) and aborts. `ljprof core --all-fibers` must name each fiber and give the same Lua frames,
-- and native frames down to coro_startup.
local function sleeper() mini.show("ljprof-fiber") mini.yield() end
local function read2() mini.show("ljprof-fiber") mini.yield() return 1 end
local function read1() local v = read2() return v end
local function wait3() mini.show("ljprof-fiber") mini.yield() end
local function wait2() wait3() return 1 end
local function wait1() local r = wait2() return r end
for _, entry in ipairs({{"sleeper", sleeper}, {"chan reader", read1}, {"cond-waiter", wait1}}) do
  mini.create(entry[1], entry[2])
end
mini.run()
local id, name = mini.self()
io.stdout:write("ljprof-running ", id, " ", name, "\n")
mini.crash()
