-- Runs split.lua standalone (luajit, tarantool):
--   run_split.lua SECONDS REPORT_FILE [jit_off|jit_on] [STOP_FILE]
-- Stops after SECONDS, or earlier once STOP_FILE exists (checked after every round), writes
-- REPORT_FILE and exits 0.
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
while split.monotonic_ns() < stop and not stop_requested() do split.round() end
local f = assert(io.open(arg[2], 'w'))
f:write(split.report())
f:close()
os.exit(0)
