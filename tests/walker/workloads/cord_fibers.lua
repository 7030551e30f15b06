-- A Tarantool with box configured: besides the main (tx) cord, the iproto and wal threads run
-- cords of their own, and the tx cord gets C fibers (gc, checkpoint_daemon, memtx.gc, ...).
-- `ljprof core --all-fibers` must list every cord's fibers; gdb reads them from the core.
local fiber = require("fiber")
local common = require("common")
box.cfg{listen = "127.0.0.1:0", log_level = 1, memtx_memory = 32 * 1024 * 1024}
-- Lets every thread reach its idle wait.
fiber.sleep(0.1)
common.crash()
