-- N fibers (arg[1], default 1000) of Tarantool's main cord, each waking at random on average
-- every arg[2] seconds (default 10) to run a few Lua calls deep and sleep again: what
-- `bench/fiber_wall` samples.
local fiber = require("fiber")
local n = tonumber(arg[1]) or 1000
local mean = tonumber(arg[2]) or 10
local function work(i) local s = 0 for k = 1, 100 do s = s + k * i end return s end
local function nap(i) work(i) fiber.sleep(math.random() * 2 * mean) end
local function loop(i) while true do nap(i) end end
for i = 1, n do fiber.new(loop, i):name("f" .. i) end
io.stdout:write("ljprof-ready\n")
io.stdout:flush()
fiber.sleep(1e9)
