-- f's hot loop calls a small g that LuaJIT compiles into f's trace (inlined: g's frame exists
-- only in the trace's snapshots). On the last iteration g's FFI call sends SIGABRT, so the core
-- is taken inside an FFI call made from the trace's machine code. Run with the argument
-- "interp", the same calls run in the interpreter (jit.off()) and at that same call g prints
-- the VM's own traceback instead: the oracle for the Lua frames of the JIT core. g is one line,
-- so every bytecode of it is on the line of the call.
local ffi = require("ffi")
ffi.cdef [[int kill(int pid, int sig); int getpid(void);]]
local interp = arg[1] == "interp"
if interp then jit.off() end
local pid = ffi.C.getpid()
local signals, last = {[0] = 0, [1] = 6}, {}
local function g(i, n) last[1] = i local sig = signals[math.floor(i / n)] if interp and sig ~= 0 then io.stdout:write("ljprof-traceback-begin\n", debug.traceback("", 1), "\nljprof-traceback-end\n") io.stdout:flush() return 0 end return ffi.C.kill(pid, sig) end
local function f(n)
  local s = 0
  for i = 1, n do s = s + g(i, n) end
  return s
end
f(100000)
