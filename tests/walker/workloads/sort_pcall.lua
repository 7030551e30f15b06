-- A table.sort comparator (Lua called from C) inside pcall inside xpcall.
jit.off()
local common = require("common")
local function compare(a, b)
  if a == 3 or b == 3 then common.crash() end
  return a < b
end
local function sorter()
  local t = {5, 3, 1, 4, 2}
  table.sort(t, compare)
  return t
end
local function protected()
  local ok, err = pcall(sorter)
  return ok, err
end
print(xpcall(protected, debug.traceback))
