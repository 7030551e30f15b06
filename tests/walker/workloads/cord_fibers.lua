-- A Tarantool with box configured: besides the main (tx) cord, the iproto and wal threads run
-- cords of their own, and the tx cord gets C fibers (gc, checkpoint_daemon, memtx.gc, ...).
-- `ljprof core --all-fibers` (and `ljprof fibers -p`) must list every cord's fibers; gdb reads
-- them from the core (or the process).
local fiber = require("fiber")
local common = require("common")
box.cfg{listen = "127.0.0.1:0", log_level = 1, memtx_memory = 32 * 1024 * 1024}
-- Lets every thread reach its idle wait.
fiber.sleep(0.1)
-- LJPROF_CORDS_WAIT: stay up, idle, for `ljprof fibers -p`; else abort for a core.
if os.getenv("LJPROF_CORDS_WAIT") then
  io.stdout:write("ljprof-ready\n")
  io.stdout:flush()
  fiber.sleep(1e9)
end
common.crash()
