-- A stack of a chosen depth held still, for the kernel walker's time per sample
-- (bench/record_overhead): Lua recursion of LEVELS levels, every fifth one called back from C
-- (string.gsub with a function replacement: lua_call from lj_cf_string_gsub), with an
-- interpreted loop at the bottom for SECONDS.   luajit depth.lua LEVELS SECONDS
jit.off()  -- interpreted frames throughout: the walk does the same work on every sample
local levels, seconds = tonumber(arg[1]) or 20, tonumber(arg[2]) or 5
local deadline = os.clock() + seconds
local function spin()
  local x = 0
  while os.clock() < deadline do
    for i = 1, 10000 do x = (x * 31 + i) % 1000003 end
  end
  return x
end
local function level(n)
  if n <= 1 then return spin() end
  if n % 5 == 0 then
    local r
    string.gsub('x', 'x', function() r = level(n - 1) end)
    return r
  end
  return level(n - 1) + 0  -- not a tail call: every level keeps its frame
end
level(levels)
