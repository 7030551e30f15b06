-- Shared by the JIT-trace workloads: what the Lua VM itself says, printed for the test.
--  * every trace the JIT finishes (jit.attach "trace" events: "stop" carries the number);
--  * the caller's frames (debug.getinfo: source, current line, first line, what), innermost
--    first, starting at the function that calls frames().
local M = {}
function M.watch_traces()
  jit.attach(function(what, tr)
    if what == "stop" then io.stdout:write("ljprof-trace-stop ", tr, "\n") io.stdout:flush() end
  end, "trace")
end
function M.frames()
  local out = {"ljprof-frames-begin\n"}
  local level = 2
  while true do
    local info = debug.getinfo(level, "Sl")
    if not info then break end
    out[#out + 1] = string.format("%s %s %d %d\n", info.what, info.short_src, info.currentline,
                                  info.linedefined)
    level = level + 1
  end
  out[#out + 1] = "ljprof-frames-end\n"
  io.stdout:write(table.concat(out)) io.stdout:flush()
end
return M
