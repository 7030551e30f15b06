-- Many kinds of JIT-compiled code, then SIGABRT from an FFI call: the core holds traces with
-- table, string, float and FFI work, inlined calls, side traces attached to hot guards (the
-- branch in `mixed` flips often enough to be compiled), and recursion (fib: up- and
-- down-recursive traces, traces that return to the interpreter, whose trailing snapshot's
-- mcofs lies past the trimmed end of their code). The trace tests decode every trace of
-- this core two ways — SnapShot.mcofs, and the guards' exits — and compare them.
local ffi = require("ffi")
ffi.cdef [[int kill(int pid, int sig); int getpid(void); double sqrt(double);]]
local function sq(x) return x * x end
local function mixed(n)
  local t, s = {}, 0
  for i = 1, n do
    if i % 3 == 0 then s = s + sq(i) else s = s - ffi.C.sqrt(i) end
    t[i % 64 + 1] = s
  end
  return t[1]
end
local function strings(n)
  local parts = {}
  for i = 1, n do parts[#parts + 1] = ("k" .. (i % 10)):upper() end
  return #table.concat(parts)
end
local function floats(n)
  local a = 0.5
  for i = 1, n do a = math.sin(a) + math.floor(i / 7) * 1e-9 end
  return a
end
local function fib(n) if n < 2 then return n end return fib(n - 1) + fib(n - 2) end
mixed(20000)
strings(2000)
floats(20000)
fib(24)
local pid = ffi.C.getpid()
for i = 1, 1000 do ffi.C.kill(pid, i == 1000 and 6 or 0) end
