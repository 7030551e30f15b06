-- Tarantool fibers switched out inside fiber.sleep (a C call): their lua_States are "normal"
-- with a C frame. Each prints its traceback on the line of its sleep; `ljprof core
-- --all-fibers` must find them on the GC list and give the same Lua frames.
local fiber = require("fiber")
local common = require("common")
local function wait() io.stdout:write("ljprof-traceback-begin\n", debug.traceback("", 1), "\nljprof-traceback-end\n") io.stdout:flush() fiber.sleep(100) end
local function worker() wait() end
fiber.create(worker)
common.crash()
