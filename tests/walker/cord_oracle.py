# gdb Python, run on a Tarantool core: each thread's cord (its TLS cord_ptr, read by gdb through
# libthread_db and the DWARF) and that cord's fibers (cord.alive, linked through fiber.link),
# printed one per line for tests/walker/fiber_stacks_test.cc:
#   cord TID NAME RUNNING_FID
#   fiber TID FID SAVED_RETURN_PC SYMBOL NAME
# SAVED_RETURN_PC is the word coro_transfer saved above the six callee-saved registers at
# fiber.ctx.sp; SYMBOL the function gdb's `info symbol` names at it.
import gdb

char_p = gdb.lookup_type("char").pointer()
fiber_p = gdb.lookup_type("struct fiber").pointer()
link_offset = int(gdb.parse_and_eval("(long)&((struct fiber *)0)->link"))
for thread in gdb.selected_inferior().threads():
    thread.switch()
    cord = gdb.parse_and_eval("cord_ptr")
    if int(cord) == 0:
        continue
    tid = thread.ptid[1]
    print("cord", tid, cord["name"].string(), int(cord["fiber"]["fid"]))
    head = cord["alive"].address
    node = cord["alive"]["next"]
    while int(node) != int(head):
        f = (node.cast(char_p) - link_offset).cast(fiber_p)
        if int(f) != int(cord["fiber"]):
            ret = int(f["ctx"]["sp"][6])
            symbol = gdb.execute("info symbol %d" % ret, to_string=True).split(" ")[0]
            print("fiber", tid, int(f["fid"]), hex(ret), symbol, f["name"].string())
        node = node["next"]
