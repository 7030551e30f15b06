-- Builds known structures on the Lua heap, measures each with the VM's own accounting
-- (collectgarbage("count") before and after, with the collector stopped, so nothing is freed in
-- between), prints those sizes and the VM's total, then aborts (or parks, for a live read):
-- `ljprof heap` on the core (or the process) must find each structure at its path with that
-- retained size, and the same total.
-- The interpreter only: the JIT's buffers (IR, snapshots) grow inside gc.total while a loop is
-- recorded, which would blur the measured sizes.
jit.off()
local common = require("common")
local ffi = require("ffi")

local function kib() return collectgarbage("count") end
local sizes = {}
local function measure(name, build)
  local before = kib()
  local result = build()
  sizes[#sizes + 1] = string.format("ljprof-heap %s %d", name, math.floor((kib() - before) * 1024 + 0.5))
  return result
end

collectgarbage()
collectgarbage("stop")
-- Warm what the measured code grows inside gc.total without making objects (the string
-- buffer, the C type table), so that growth is not measured.
local warm = {string.format("s%015d", 0), string.format("ljprof-heap %s %d", "x", 0),
              string.rep("w", 8192), ffi.new("char[64]"), newproxy(false)}

-- A global table of N unique strings of 16 characters. Its size is computed from the sizes of
-- its parts, each measured: adding N strings also grows the string table (anchors the heap
-- counts apart), which a before/after of the whole would include.
local N = 20000
names = {}
local before = kib()
for i = 1, N do names[i] = i end
local array_bytes = (kib() - before) * 1024
for i = 1, N do names[i] = string.format("s%015d", i) end
before = kib()
local one_string = string.format("s%015d", N + 1)
local string_bytes = (kib() - before) * 1024
sizes[#sizes + 1] = string.format("ljprof-heap names %d", math.floor(array_bytes + N * string_bytes + 0.5))

-- A cache held only by an upvalue of a global function.
local function make_cache()
  local cache = {}
  return function() return cache end, cache
end
local get_cache, cache_table = make_cache()
get_cache_fn = get_cache
measure("cache", function()
  for i = 1, 5000 do cache_table[i] = {i} end
end)
cache_table = nil

-- Tables held only by a local of a suspended coroutine.
held_thread = coroutine.create(function()
  local held = {}
  local before = kib()
  for i = 1, 3000 do held[i] = {i, i} end
  -- Suspended at this line, which it reports with its size.
  coroutine.yield(math.floor((kib() - before) * 1024 + 0.5), debug.getinfo(1, "l").currentline)
  return held
end)
local _, held_bytes, held_line = coroutine.resume(held_thread)
sizes[#sizes + 1] = string.format("ljprof-heap held %d", held_bytes)
local held_at = string.format("ljprof-heap-held-line %d", held_line)

-- A cycle of two tables, held by a global.
cycle = measure("cycle", function()
  local a, b = {pad = string.rep("a", 3000)}, {pad = string.rep("b", 3000)}
  a.other, b.other = b, a
  return a
end)

-- Userdata (newproxy) and cdata.
proxies = measure("proxies", function()
  local t = {}
  for i = 1, 200 do t[i] = newproxy(false) end
  return t
end)
cdatas = measure("cdatas", function()
  local t = {}
  for i = 1, 200 do t[i] = ffi.new("char[64]") end
  return t
end)

-- Tarantool: tables held only by a local of a sleeping fiber, which reports its id, the line it
-- sleeps at and the tables' size (paths name a fiber's locals by the fiber).
local has_fiber, fiber = pcall(require, "fiber")
if has_fiber then
  local holder = fiber.new(function()
    local kept = {}
    local before = kib()
    for i = 1, 2000 do kept[i] = {i, i, i} end
    local size = math.floor((kib() - before) * 1024 + 0.5)
    local function report(line)
      io.stdout:write(string.format("ljprof-heap-fiber %d %d %d\n", fiber.id(), line, size))
    end
    -- Sleeps at the line it reports.
    report(debug.getinfo(1, "l").currentline) fiber.sleep(1e9)
    return kept
  end)
  holder:name("ljprof-holder")
  fiber.yield()
end

for _, line in ipairs(sizes) do io.stdout:write(line, "\n") end
io.stdout:write(held_at, "\n")
io.stdout:write(string.format("ljprof-heap-gc64 %s\n", tostring(ffi.abi("gc64"))))
io.stdout:write(string.format("ljprof-heap-total %d\n", math.floor(kib() * 1024 + 0.5)))
io.stdout:flush()
-- LJPROF_HEAP_PARK: stay alive, blocked in a C call (so no thread's registers show the VM), for
-- `ljprof heap -p` to read; else abort for a core.
if os.getenv("LJPROF_HEAP_PARK") then
  ffi.cdef("int poll(void *fds, unsigned long nfds, int timeout);")
  io.stdout:write("ljprof-heap-parked\n")
  io.stdout:flush()
  ffi.C.poll(nil, 0, -1)
end
common.crash()
