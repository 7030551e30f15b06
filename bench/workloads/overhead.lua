-- bench/record_overhead's CPU-bound target: deep, varied mixed stacks on purpose — recursion in
-- Lua (fib), Lua called back from a C function (table.sort's comparator, below 20 Lua frames)
-- and JIT-compiled loops.   luajit overhead.lua ROUNDS
-- Prints the wall time of its work loop alone (start-up excluded), measured with
-- CLOCK_MONOTONIC through the FFI.
local function fib(n) if n < 2 then return n end return fib(n - 1) + fib(n - 2) end
local function cmp(a, b) return a < b end
local function sorter(depth)
  if depth > 0 then return sorter(depth - 1) end
  local t = {}
  for i = 1, 3000 do t[i] = (i * 7919) % 3001 end
  table.sort(t, cmp)
end
local ffi = require('ffi')
ffi.cdef [[ typedef struct { long s; long ns; } bench_ts; int clock_gettime(int, bench_ts *); ]]
local ts = ffi.new('bench_ts')
local function now() ffi.C.clock_gettime(1, ts) return tonumber(ts.s) + tonumber(ts.ns) * 1e-9 end
local t0, c0 = now(), os.clock()
for _ = 1, tonumber(arg[1]) or 1000 do fib(24) sorter(20) end
-- Wall seconds of the loop, then its CPU seconds (os.clock: the process's CPU clock, which
-- includes what the sampler's interrupts cost it and little of what other processes do).
print(string.format('%.6f %.6f', now() - t0, os.clock() - c0))
