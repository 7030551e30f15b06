-- Runs split.lua standalone (luajit, tarantool):
--   run_split.lua SECONDS REPORT_FILE [jit_off|jit_on] [STOP_FILE]
-- Stops after SECONDS, or earlier once STOP_FILE exists (checked after every round), writes
-- REPORT_FILE and exits 0. Prints "interval N" as the throughput log gains its Nth interval
-- (split.lua), so a test can wait for a number of whole intervals instead of sleeping.
local dir = arg[0]:match('^(.*)/[^/]*$') or '.'
package.path = dir .. '/?.lua;' .. package.path
if arg[3] == 'jit_off' then jit.off() end
local split = require('split')
local stop_file = arg[4]
local function stop_requested()
  if not stop_file then return false end
  local f = io.open(stop_file)
  if f then f:close() end
  return f ~= nil
end
local stop = split.monotonic_ns() + tonumber(arg[1]) * 1e9
local intervals = 0
while split.monotonic_ns() < stop and not stop_requested() do
  split.round()
  if split.intervals() > intervals then
    intervals = split.intervals()
    io.stdout:write('interval ', intervals, '\n')
    io.stdout:flush()
  end
end
local f = assert(io.open(arg[2], 'w'))
f:write(split.report())
f:close()
os.exit(0)
