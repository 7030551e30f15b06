# A process that is not a LuaJIT runtime when it starts and becomes one later, as a program that
# embeds Lua through a plugin does: it waits for the file named by argv[1], then loads Debian's
# libluajit-5.1.so.2 (dlopen, through ctypes) and runs a Lua loop in its own function for
# argv[2] seconds of CPU. The `ljprof record -a` test runs it (tests/record/record_test.cc).
import ctypes
import os
import sys
import time

go, seconds = sys.argv[1], float(sys.argv[2])
while not os.path.exists(go):
    time.sleep(0.05)
lj = ctypes.CDLL("libluajit-5.1.so.2")
lj.luaL_newstate.restype = ctypes.c_void_p
state = ctypes.c_void_p(lj.luaL_newstate())
lj.luaL_openlibs(state)
code = (
    "local function late_loaded_busy(t) local x, s = 0, os.clock() "
    "while os.clock() - s < t do x = x + 1 end return x end "
    "late_loaded_busy(%f)" % seconds
).encode()
if lj.luaL_loadstring(state, code) != 0 or lj.lua_pcall(state, 0, 0, 0) != 0:
    sys.exit("late_luajit.py: the Lua chunk failed")
