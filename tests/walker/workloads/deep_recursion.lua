-- Deep Lua recursion (not tail calls), all frames interpreted.
jit.off()
local common = require("common")
local function recurse(n)
  if n == 0 then
    common.crash()
    return 0
  end
  return 1 + recurse(n - 1)
end
print(recurse(60))
