-- One fiber ("waiter") that spends about 75% of each round asleep in sleep_part and 25% waiting
-- on an empty channel in chan_part. It measures both with the monotonic clock and, every round,
-- rewrites wall_fiber.out with "SLEEP_S CHAN_S" so far: the oracle for the wall profile's split
-- within that fiber. Prints "ljprof-ready" after the first round.
local fiber = require("fiber")
local clock = require("clock")
local channel = fiber.channel(1)
local sleep_s, chan_s = 0, 0
local function sleep_part() fiber.sleep(0.075) end
local function chan_part() channel:get(0.025) end
local function waiter()
  local round = 0
  while true do
    local t0 = clock.monotonic()
    sleep_part()
    local t1 = clock.monotonic()
    chan_part()
    local t2 = clock.monotonic()
    sleep_s, chan_s = sleep_s + (t1 - t0), chan_s + (t2 - t1)
    local f = io.open("wall_fiber.out", "w")
    f:write(string.format("%.6f %.6f\n", sleep_s, chan_s))
    f:close()
    round = round + 1
    if round == 1 then io.stdout:write("ljprof-ready\n") io.stdout:flush() end
  end
end
fiber.new(waiter):name("waiter")
fiber.sleep(100000)
