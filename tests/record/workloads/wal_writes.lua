-- A configured Tarantool whose Lua fiber writes to a memtx space for SECONDS (arg 1): every
-- write goes through the WAL thread's cord, so the tx, WAL and iproto threads all run fibers.
-- Then it prints each of its threads as the kernel names them (Tarantool names each thread
-- after the cord it runs; the main thread runs the cord "main") and exits:
--   thread <tid> <comm>
-- Run it in a scratch directory: box.cfg writes its snapshot and WAL files there.
local clock = require('clock')
local fio = require('fio')

local seconds = tonumber(arg[1]) or 2
box.cfg{log_level = 1, memtx_memory = 64 * 1024 * 1024}
local space = box.schema.space.create('t', {if_not_exists = true})
space:create_index('pk', {if_not_exists = true})
local payload = string.rep('x', 200)
local start, i = clock.monotonic(), 0
while clock.monotonic() - start < seconds do
  i = i + 1
  space:replace{i % 1000, payload}
end
for _, tid in ipairs(fio.listdir('/proc/self/task')) do
  local f = io.open('/proc/self/task/' .. tid .. '/comm')
  print(('thread %s %s'):format(tid, f:read('*l')))
  f:close()
end
os.exit(0)
