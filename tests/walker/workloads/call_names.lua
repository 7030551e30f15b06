-- Every way a call site names its callee (lj_debug.c lj_debug_slotname): a local, a global, a
-- table field, a method, an upvalue, a metamethod (__index), the generic-for iterator
-- ("(for generator)"), and functions that get no name (called by pcall, or through an
-- expression such as a table element).
jit.off()
local common = require("common")
local obj = {}
function obj:method()
  local r = common.crash()
  return r
end
local function iterate()
  local calls = 0
  return function()
    calls = calls + 1
    if calls > 1 then return nil end
    local r = obj:method()
    return r
  end
end
local function loop()
  for v in iterate() do
    return v
  end
end
local mt = setmetatable({}, {__index = function()
  local r = loop()
  return r
end})
local viaup = function()
  local r = mt.missing
  return r
end
local function unnamed_level()
  local f = viaup
  local r = f()
  return r
end
function global_entry()
  local r = ({unnamed_level})[1]()
  return r
end
local function entry()
  local r = global_entry()
  return r
end
print(pcall(entry))
