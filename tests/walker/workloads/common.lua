-- Shared by the golden workloads: print the Lua VM's own traceback, then abort in the same
-- statement, so the core's Lua frames can be compared with it line for line.
local ffi = require("ffi")
ffi.cdef [[void abort(void);]]
local M = {}
function M.crash()
  io.stdout:write("ljprof-traceback-begin\n", debug.traceback("", 1), "\nljprof-traceback-end\n") io.stdout:flush() ffi.C.abort()
end
return M
