-- A busy loop in the interpreter (no C call in progress): dumped live with gcore, so the leaf pc
-- is inside the VM and only the BASE/PC registers know the innermost frame. The loop is one
-- line (with the locals it starts from: a dump taken while the VM is jumping back to the loop
-- head sees the instruction before the head), so the traceback printed in its first iteration
-- names the line the dump finds.
jit.off()
local function spin()
  local x, printed = 0, false while true do if not printed then printed = true io.stdout:write("ljprof-traceback-begin\n", debug.traceback("", 1), "\nljprof-traceback-end\n") io.stdout:flush() end x = x + 1 end
end
local function outer()
  spin()
  return 1
end
outer()
