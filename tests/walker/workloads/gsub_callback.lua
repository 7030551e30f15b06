-- Lua -> C (string.gsub) -> Lua callback, below a few levels of non-tail recursion.
jit.off()
local common = require("common")
local function on_match(c)
  common.crash()
end
local function descend(n)
  if n == 0 then
    local s = string.gsub("ab", "%w", on_match)
    return s
  end
  return 1 + descend(n - 1)
end
print(descend(3))
