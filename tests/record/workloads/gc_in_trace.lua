-- A loop whose trace allocates a table per iteration, so the collector runs from inside the
-- trace (lj_gc.c lj_gc_step_jit, with vmstate switched to GC).
--   gc_in_trace.lua SECONDS REPORT_FILE
-- Writes "alloc LINEDEFINED" (debug.getinfo, the VM's own view) to REPORT_FILE and exits 0.
jit.on()
local function alloc(n)
  local t
  for i = 1, n do t = {i, i + 1} end
  return t
end
local stop = os.time() + tonumber(arg[1])
while os.time() < stop do
  for _ = 1, 100 do alloc(1000) end
end
local f = assert(io.open(arg[2], 'w'))
f:write(string.format('alloc %d\n', debug.getinfo(alloc, 'S').linedefined))
f:close()
os.exit(0)
