-- mini_tarantool.c running for the live arm64 tests (tests/record/arm64_vm/guest_record.sh):
-- on the main cord "sleeper", parked three Lua calls deep (its id, name and traceback printed
-- first, as mini_fibers.lua does), and "spin3" and "spin1", spinning 3:1 in turns, each adding
-- the CPU time of its own turns (this thread's clock); on a thread of its own a cord "worker"
-- with C fibers (c-idle parked, c-spin spinning). Prints "ready" once every fiber has run, and
-- every 0.2 s rewrites REPORT with "spin3 SECONDS spin1 SECONDS". Ends after SECONDS.
--   tarantool mini_live.lua REPORT SECONDS
local report, seconds = arg[1], tonumber(arg[2])
local cpu = {spin3 = 0, spin1 = 0}
local function nap() mini.show("ljprof-fiber") mini.park() end
local function doze() nap() return 1 end
local function sleeper() local r = doze() return r end
local function burn(s)
  local stop, x = mini.thread_cpu() + s, 0
  while mini.thread_cpu() < stop do x = x + 1 end
  return x
end
local function spinner(name, turns)
  return function()
    while true do
      local t0 = mini.thread_cpu()
      burn(0.001 * turns)
      cpu[name] = cpu[name] + mini.thread_cpu() - t0
      mini.yield()
    end
  end
end
mini.create("sleeper", sleeper)
mini.create("spin3", spinner("spin3", 3))
mini.create("spin1", spinner("spin1", 1))
mini.cord("worker")
local deadline, next_report, ready = mini.now() + seconds, 0, false
while mini.now() < deadline do
  mini.run()
  if not ready then
    io.stdout:write("ready\n")
    io.stdout:flush()
    ready = true
  end
  if mini.now() >= next_report then
    local f = io.open(report .. ".tmp", "w")
    f:write(string.format("spin3 %.6f spin1 %.6f\n", cpu.spin3, cpu.spin1))
    f:close()
    os.rename(report .. ".tmp", report)
    next_report = mini.now() + 0.2
  end
end
