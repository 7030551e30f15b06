-- A process that lives a set time by its own clock and exits: the main chunk calls
-- `short_lived_loop`, which counts until `ms` milliseconds of CPU (os.clock) have passed, the
-- loop's body on one line. With a REPORT path it writes, as the VM itself reports them
-- (debug.getinfo), "short_lived_loop LINEDEFINED LOOP_LINE" there first.
--   luajit short_lived.lua MS [REPORT]
local ms, report = tonumber(arg[1]), arg[2]
local function short_lived_loop(deadline)
  local x = 0
  repeat for i = 1, 1000 do x = x + i % 7 end until os.clock() >= deadline
  return x
end
if report then
  local info = debug.getinfo(short_lived_loop, "S")
  local f = assert(io.open(report, "w"))
  -- The loop's line is the function's third: its first is the `function` line itself.
  f:write(string.format("short_lived_loop %d %d\n", info.linedefined, info.linedefined + 2))
  f:close()
end
short_lived_loop(os.clock() + ms / 1000)
