-- A hot loop compiled to a JIT trace that calls kill() through the FFI on every iteration; the
-- last iteration's call sends SIGABRT, so the core is taken inside an FFI call made from trace
-- machine code. The loop is one line: the frames printed in its first iteration (still in the
-- interpreter, before the loop is hot) name the line the trace runs.
local ffi = require("ffi")
local oracle = require("jit_oracle")
ffi.cdef [[int kill(int pid, int sig); int getpid(void);]]
oracle.watch_traces()
local function hot(n)
  local pid, s, printed = ffi.C.getpid(), 0, false
  for i = 1, n do if not printed then printed = true oracle.frames() end s = s + ffi.C.kill(pid, math.floor(i / n) * 6) end
  return s
end
local function outer(n)
  local s = hot(n)
  return s
end
outer(100000)
