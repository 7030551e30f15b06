-- Two fibers that never stop switching: each calls fiber.yield() one or three Lua calls deep,
-- alternately, so its stack changes between every two reads of `ljprof fibers`; and a third that
-- does the same with fiber.sleep(0.1), whose stack holds still long enough to be read. Each
-- prints its traceback at both depths once (ljprof-traceback blocks, "ljprof-fiber ID NAME"
-- before each), then "ljprof-ready" is printed and they go on forever.
local fiber = require("fiber")
local printed, shown = {}, 0
local function show(depth)
  local self = fiber.self()
  local key = self:id() .. ":" .. depth
  if printed[key] then return end
  printed[key] = true
  shown = shown + 1
  io.stdout:write("ljprof-fiber ", self:id(), " ", self:name(), "\n")
  io.stdout:write("ljprof-traceback-begin\n", debug.traceback("", 2), "\nljprof-traceback-end\n")
  io.stdout:flush()
end
local pause = {}
local function d1(depth) show(depth) pause[fiber.self():id()](0.1) end
local function d2(depth) d1(depth) return depth end
local function d3(depth) local r = d2(depth) return r end
local function flip()
  while true do
    d1(1)
    d3(3)
  end
end
for _, name in ipairs({"flip a", "flip b", "flip slow"}) do
  local f = fiber.new(flip)
  f:name(name)
  -- C functions both, so the stack's Lua frames are the traceback's: yield ignores the 0.1.
  pause[f:id()] = name == "flip slow" and fiber.sleep or fiber.yield
end
while shown < 6 do fiber.sleep(0.01) end
io.stdout:write("ljprof-ready\n")
io.stdout:flush()
while true do fiber.sleep(0.001) end
