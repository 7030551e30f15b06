-- mini_tarantool.c running for the live arm64 tests (tests/record/arm64_vm/guest_record.sh):
-- on the main cord "sleeper", parked three Lua calls deep (its id, name and traceback printed
-- first, as mini_fibers.lua does), and "spin3" and "spin1", spinning 3:1 in turns (each one's
-- CPU time counted by the scheduler around its turns, as fiber.top does); on a thread of its own
-- a cord "worker" with C fibers (c-idle parked, c-spin spinning); every other round (about
-- 10 ms) a fiber "short" that burns a millisecond and ends. Prints "ready" once every fiber has run, and
-- every 0.2 s rewrites REPORT with "spin3 SECONDS spin1 SECONDS". Ends after SECONDS.
--   tarantool mini_live.lua REPORT SECONDS
local report, seconds = arg[1], tonumber(arg[2])
local function nap() mini.show("ljprof-fiber") mini.park() end
local function doze() nap() return 1 end
local function sleeper() local r = doze() return r end
-- Pure Lua work, no call out of the loop (a syscall per iteration would weigh differently under
-- emulation than the loop); `per_ms` iterations take about a millisecond of CPU here.
local function burn(n)
  local x = 0
  for i = 1, n do x = x + i % 7 end
  return x
end
-- Calibrated after the loop is compiled (a trace's compilation, slow under emulation, would
-- count as the loop's time), on the fastest of three timings (a vCPU the host did not run still
-- counts as this thread's CPU time in the guest).
burn(1000000)
local function timed(n)
  local best = math.huge
  for _ = 1, 3 do
    local t0 = mini.thread_cpu()
    burn(n)
    best = math.min(best, mini.thread_cpu() - t0)
  end
  return best
end
local per_ms, took = 1000, 0
repeat
  per_ms = per_ms * 2
  took = timed(per_ms)
until took >= 0.02
per_ms = math.max(1, math.floor(per_ms * 0.001 / took))
io.stdout:write("per_ms ", per_ms, "\n")
local function spinner(turns)
  return function()
    while true do
      burn(per_ms * turns)
      mini.yield()
    end
  end
end
mini.create("sleeper", sleeper)
local spin3 = mini.create("spin3", spinner(3))
local spin1 = mini.create("spin1", spinner(1))
mini.cord("worker")
local function short_burn() burn(per_ms) end
local function short_body() short_burn() end
local deadline, next_report, ready, round = mini.now() + seconds, 0, false, 0
while mini.now() < deadline do
  round = round + 1
  if round % 2 == 0 then mini.create("short", short_body, true) end
  mini.run()
  if not ready then
    io.stdout:write("ready\n")
    io.stdout:flush()
    ready = true
  end
  if mini.now() >= next_report then
    local f = io.open(report .. ".tmp", "w")
    f:write(string.format("spin3 %.6f spin1 %.6f\n", mini.cpu(spin3), mini.cpu(spin1)))
    f:close()
    os.rename(report .. ".tmp", report)
    next_report = mini.now() + 0.2
  end
end
