-- Abort inside a coroutine: the coroutine's frames, then the main thread's that resumed it.
-- The main thread prints its traceback in the statement that resumes the coroutine.
jit.off()
local common = require("common")
local function worker(x)
  local y = x + 1
  common.crash()
  return y
end
local function run()
  local co = coroutine.create(worker)
  io.stdout:write("ljprof-traceback-begin\n", debug.traceback("", 1), "\nljprof-traceback-end\n") local ok, v = coroutine.resume(co, 41)
  return ok, v
end
print(run())
