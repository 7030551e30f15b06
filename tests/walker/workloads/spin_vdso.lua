-- A loop in the interpreter that calls clock_gettime through the FFI: libc's clock_gettime
-- calls the kernel's vDSO, so a gcore often finds the leaf there (the vDSO is in the core's
-- memory, in no NT_FILE entry). Like spin_interpreter.lua, the traceback is printed from the
-- loop's line in its first iteration.
jit.off()
local ffi = require("ffi")
ffi.cdef [[typedef struct { long sec, nsec; } ljprof_timespec; int clock_gettime(int, ljprof_timespec *);]]
local ts = ffi.new("ljprof_timespec")
local function spin()
  local printed = false while true do if not printed then printed = true io.stdout:write("ljprof-traceback-begin\n", debug.traceback("", 1), "\nljprof-traceback-end\n") io.stdout:flush() end ffi.C.clock_gettime(1, ts) end
end
local function outer()
  spin()
  return 1
end
outer()
