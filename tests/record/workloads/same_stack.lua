-- One stack, held for as long as the process runs, so a live recording and a core dumped with
-- gcore see the same frames: the main chunk calls `outer`, which calls `spin` forever
-- (interpreted: jit.off()); spin counts a little and then makes an FFI call that fills 16 MiB,
-- where nearly all the time goes. In the interpreter that call is a C function (the cdata's
-- __call metamethod, named `memset` by its call site) that enters libc's memset: a `cfunc`
-- frame, the VM's FFI glue, then an `ffi` frame.
--   same_stack.lua
jit.off()
local ffi = require("ffi")
ffi.cdef [[void *memset(void *s, int c, size_t n);]]
local size = 16777216
local buf = ffi.new("uint8_t[?]", size)
local function spin(n)
  local s = 0
  for i = 1, n do s = s + i % 7 end
  ffi.C.memset(buf, s % 256, size)
  return s
end
local function outer()
  while true do spin(1000) end
end
outer()
