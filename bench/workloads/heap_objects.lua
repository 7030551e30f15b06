-- A Tarantool whose Lua heap holds about arg[1] million objects (default 1): a global table of
-- small tables, each with a unique string and a nested table. Prints "ljprof-ready OBJECTS KIB"
-- (the objects it made, collectgarbage("count")) once built, then idles in its event loop.
local fiber = require("fiber")
local n = math.floor((tonumber(arg[1]) or 1) * 1e6 / 3)
held = {}
for i = 1, n do
  held[i] = {name = "object " .. i, inner = {}}
end
collectgarbage()
io.stdout:write(string.format("ljprof-ready %d %.0f\n", 3 * n, collectgarbage("count")))
io.stdout:flush()
fiber.sleep(1e9)
