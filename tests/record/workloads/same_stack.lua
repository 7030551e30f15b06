-- One stack, held for as long as the process runs: the main chunk calls `outer`, which calls
-- `spin` forever (interpreted: jit.off()), so a live recording and a core dumped with gcore
-- see the same Lua frames.
--   same_stack.lua
jit.off()
local function spin(n)
  local s = 0
  for i = 1, n do s = s + i % 7 end
  return s
end
local function outer()
  while true do spin(1000000) end
end
outer()
