-- Runs split.lua standalone (luajit, tarantool): run_split.lua SECONDS REPORT_FILE [jit_off]
-- Writes REPORT_FILE when done and exits 0.
local dir = arg[0]:match('^(.*)/[^/]*$') or '.'
package.path = dir .. '/?.lua;' .. package.path
if arg[3] == 'jit_off' then jit.off() end
local split = require('split')
local stop = split.monotonic_ns() + tonumber(arg[1]) * 1e9
while split.monotonic_ns() < stop do split.round() end
local f = assert(io.open(arg[2], 'w'))
f:write(split.report())
f:close()
os.exit(0)
