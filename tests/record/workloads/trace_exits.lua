-- A loop whose trace exits all the time: side traces are never compiled (hotexit is out of
-- reach), so every exit goes through the trace exit handler and lj_trace_exit, which restores
-- the snapshot (lj_snap_restore) before the interpreter resumes `work`.
--   trace_exits.lua SECONDS REPORT_FILE
-- Writes "work LINEDEFINED" (debug.getinfo, the VM's own view) to REPORT_FILE and exits 0.
jit.on()
jit.opt.start('hotexit=1000000000', 'hotloop=1')
local function work(n)
  local s = 0
  for i = 1, n do
    if i % 3 == 0 then s = s + 1 else s = s + 2 end
  end
  return s
end
local stop = os.time() + tonumber(arg[1])
while os.time() < stop do
  for _ = 1, 100 do work(1000) end
end
local f = assert(io.open(arg[2], 'w'))
f:write(string.format('work %d\n', debug.getinfo(work, 'S').linedefined))
f:close()
os.exit(0)
