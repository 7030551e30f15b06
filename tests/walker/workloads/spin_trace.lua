-- A busy loop compiled to a JIT trace with no calls and no exits: dumped live with gcore, so the
-- leaf pc is in trace machine code. One line, so the frames printed in its first iteration name
-- the line the trace runs.
local oracle = require("jit_oracle")
oracle.watch_traces()
local function spin()
  local x, printed = 0, false while true do if not printed then printed = true oracle.frames() end x = x + 1 end
end
local function outer()
  spin()
  return 1
end
outer()
