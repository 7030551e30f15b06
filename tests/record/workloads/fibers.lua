-- Mode "share" (default): two named fibers share Tarantool's tx thread 3:1. Each burns CPU in its
-- own function for a slice and measures the slice with the monotonic clock — fibers are
-- cooperative, so no other fiber runs inside a slice and its wall time is this fiber's CPU time
-- — then yields. Runs until the slices add up to SECONDS (arg 1), then prints each fiber's
-- measured seconds:
--   fibers heavy=<s> light=<s>
-- Mode "short": every 10 ms a new fiber named "short" burns in short_burn for about 5 ms and
-- ends, until they add up to SECONDS; prints "fibers short=<n fibers>".
local fiber = require('fiber')
local clock = require('clock')

local seconds = tonumber(arg[1]) or 3
local mode = arg[2] or 'share'

local function short_burn(deadline)
  local x = 0
  while clock.monotonic() < deadline do
    for i = 1, 1000 do x = x + i % 7 end
  end
  return x
end

if mode == 'short' then
  local spent, started = 0, 0
  while spent < seconds do
    started = started + 1
    local f = fiber.new(function()
      fiber.self():name('short')
      local t0 = clock.monotonic()
      short_burn(t0 + 0.005)
      spent = spent + clock.monotonic() - t0
    end)
    f:set_joinable(true)
    f:join()
    fiber.sleep(0.005)
  end
  print(string.format('fibers short=%d', started))
  io.stdout:flush()
  os.exit(0)
end
local spent = { heavy = 0, light = 0 }

local function burn(n)
  local x = 0
  for i = 1, n do x = x + i % 7 end
  return x
end

local function worker(name, units)
  fiber.self():name(name)
  while spent.heavy + spent.light < seconds do
    local t0 = clock.monotonic()
    for _ = 1, units do burn(20000) end
    spent[name] = spent[name] + clock.monotonic() - t0
    fiber.yield()
  end
end

local heavy = fiber.create(worker, 'heavy', 3)
local light = fiber.create(worker, 'light', 1)
while heavy:status() ~= 'dead' or light:status() ~= 'dead' do fiber.sleep(0.01) end
print(string.format('fibers heavy=%.6f light=%.6f', spent.heavy, spent.light))
io.stdout:flush()
os.exit(0)
