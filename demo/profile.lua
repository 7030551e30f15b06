-- `make demo` profiling workload for Tarantool: three named fibers (checksum, orders, render)
-- doing Lua work, JSON encoding in C
-- (a C function called from Lua), string building with a Lua callback under string.gsub, and
-- an FFI call. Runs for the number of seconds in arg[1] (default 5) and exits.
local fiber = require('fiber')
local json = require('json')
local ffi = require('ffi')
ffi.cdef [[ void *memset(void *s, int c, size_t n); ]]
local buf = ffi.new('uint8_t[?]', 1048576)
local seconds = tonumber(arg[1]) or 5

local function checksum(n)
  local x = 0
  for i = 1, n do x = (x * 31 + i) % 1000003 end
  return x
end

local function encode_orders(n)
  local orders = {}
  for i = 1, n do orders[i] = { id = i, qty = i % 7, sku = 'sku-' .. i } end
  return #json.encode(orders)
end

local function render(template)
  return (template:gsub('%$(%w+)', function(k) return k:upper() .. checksum(200) end))
end

local function clear_buffers(n)
  for i = 1, n do ffi.C.memset(buf, i % 256, 1048576) end
end

local function worker(kind)
  local deadline = fiber.clock() + seconds
  while fiber.clock() < deadline do
    if kind == 1 then checksum(200000) elseif kind == 2 then encode_orders(2000)
    else render(string.rep('$name and $value; ', 200)) clear_buffers(20) end
    fiber.yield()
  end
end

local fibers, names = {}, { 'checksum', 'orders', 'render' }
for kind = 1, 3 do
  fibers[kind] = fiber.new(worker, kind)
  fibers[kind]:name(names[kind])
  fibers[kind]:set_joinable(true)
end
for _, f in ipairs(fibers) do f:join() end
os.exit(0)
