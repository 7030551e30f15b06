-- content_by_lua_file handler of the nginx-lua worker in the `ljprof record` and `heap` tests.
-- It runs the known split of split.lua (CPU measured per part with the VM's own os.clock), one
-- round per request, so a local HTTP load loop keeps the worker's Lua busy:
--   /round   split.round() (tens of milliseconds of CPU), answers "ok"
--   /report  split.report(): the worker's own per-part CPU seconds since it started
--   /pid     the worker's pid, for `ljprof record -p`
--   /block   blocks the worker in os.execute("sleep 0.05") (record --off-cpu, --loop-stalls)
--   /heap    builds nginx_heap.lua's structure once: "SIZE TOTAL" (ljprof heap -p)
-- The module stays loaded across requests (lua_code_cache is on), so the totals accumulate.
local split = require('split')
-- A handler that blocks the whole worker: every request waiting on it waits for the shell too.
local function blocking_handler()
  os.execute("sleep 0.05")
end
local uri = ngx.var.uri
if uri == '/report' then
  ngx.print(split.report())
elseif uri == '/pid' then
  ngx.print(ngx.worker.pid())
elseif uri == '/heap' then
  ngx.print(string.format('%d %d', require('nginx_heap').build()))
elseif uri == '/block' then
  blocking_handler()
  ngx.print('ok\n')
else
  split.round()
  ngx.print('ok\n')
end
