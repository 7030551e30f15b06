-- A known structure in an nginx-lua worker's heap, for `ljprof heap -p WORKER`: 3000 small
-- tables held only by this module's upvalue `kept`, measured by the VM's own accounting
-- (collectgarbage("count") before and after, the collector stopped in between).
local M = {}
local kept

-- Builds it on the first call; returns its size in bytes and the VM's total after it.
function M.build()
  if not kept then
    collectgarbage()
    collectgarbage("stop")
    local before = collectgarbage("count")
    kept = {}
    for i = 1, 3000 do kept[i] = {i, i} end
    M.size = math.floor((collectgarbage("count") - before) * 1024 + 0.5)
    collectgarbage("restart")
  end
  return M.size, math.floor(collectgarbage("count") * 1024 + 0.5)
end

return M
