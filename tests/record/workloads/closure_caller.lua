-- A named function called from closures that live only for one string.gsub: every round makes
-- a new callback closure, which may be collected before the recorder names a sample. `work`
-- must still be named from its caller's call site — the caller's prototype, which outlives the
-- closure, holds it.
--   closure_caller.lua SECONDS
local seconds = tonumber(arg[1]) or 3
local function work(n)
  local s = 0
  for i = 1, n do s = s + i % 7 end
  return s
end
local t0, total = os.clock(), 0
local template = string.rep("$name and $value; ", 50)
while os.clock() - t0 < seconds do
  local out = template:gsub("%$(%w+)", function(k) local r = work(2000) return k:upper() .. r end)
  total = total + #out
end
print("total " .. total)
