-- Coroutines that are not running when the process dies: one suspended three calls deep, one
-- suspended inside a pcall, one never started. Each suspended one's own debug.traceback(co)
-- is printed first; `ljprof core --all-fibers` must find them on the GC list and match.
jit.off()
local common = require("common")
local function show(co)
  io.stdout:write("ljprof-traceback-begin\n", debug.traceback(co), "\nljprof-traceback-end\n")
end
local function inner(x) local r = coroutine.yield(x) return r end
local function middle(x) local r = inner(x + 1) return r end
local deep = coroutine.create(function(a) local r = middle(a) return r end)
coroutine.resume(deep, 1)
local protected = coroutine.create(function()
  local ok, v = pcall(function() local r = coroutine.yield(2) return r end)
  return ok, v
end)
coroutine.resume(protected)
local fresh = coroutine.create(function() end)
show(deep)
show(protected)
common.crash(fresh)
