// symbolize/snapshot.h: the Lua frames a JIT trace's machine code runs at one pc, from the
// trace's snapshots — the stack the VM would restore if the trace exited there (lj_snap.c
// lj_snap_restore is the reference; lj_trace.c lj_trace_unwind finds the snapshot of a pc the
// same way).
//
// A snapshot covers the machine code from its SnapShot.mcofs to the next one's; it names the
// bytecode pc execution resumes at and, in its frame slots, the functions the trace inlined
// (calls compiled into the trace, whose frames exist only in the snapshot until an exit). The
// frames are proven before they are shown: every inlined function is a constant GCfunc of the
// trace's IR whose prototype holds the pc its callee returns to, the innermost prototype holds
// the snapshot's pc, and the outermost frame's pc lies in the prototype of the Lua frame the
// walker found at the trace's base. A LuaJIT whose SnapShot has no mcofs (Tarantool's fork)
// finds the snapshot from the guards' exits instead (trace_exits.h). Anything else — a pc
// between two snapshots that cannot be told apart, a metamethod continuation frame, a
// non-constant function — is an error, and the caller falls back to the trace's start.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "abi/read_mem.h"
#include "common/result.h"
#include "symbolize/call_site.h"
#include "symbolize/symbolize.h"
#include "symbolize/trace_exits.h"

extern "C" {
#include "abi/luajit_info.h"
}

namespace ljprof::symbolize {

// What the snapshot lookup needs of one trace, read once (record mode caches it per trace).
struct TraceSnapshots {
  uint64_t gctrace = 0;
  uint64_t mcode = 0;  // GCtrace.mcode
  uint32_t szmcode = 0;
  uint64_t ir = 0;  // GCtrace.ir (biased: constants below REF_BIAS)
  uint32_t nk = 0;  // lowest constant ref
  struct Snap {
    uint32_t mapofs = 0;
    uint32_t ref = 0;    // its first IR instruction
    uint32_t mcofs = 0;  // in bytes (SnapShot.mcofs counts MCode units); 0 without has_mcofs
    uint32_t nent = 0;
    uint32_t end = 0;     // one past its last snapmap entry (the next snapshot's mapofs)
    bool linked = false;  // a side trace is attached to its exit (count == SNAPCOUNT_DONE)
  };
  // false: this LuaJIT's SnapShot has no mcofs (its first snapshot's is not 0); a pc is then
  // mapped by the exits of the guards around it (`exits`, `snap_ir`: trace_exits.h).
  bool has_mcofs = false;
  std::vector<Snap> snaps;
  uint64_t snapmap = 0;  // GCtrace.snapmap: SnapEntry (uint32) array
  std::vector<TraceInsn> exits;
  std::vector<SnapshotIr> snap_ir;
  std::string exits_error;  // why `exits` could not be read (then every lookup fails with it)
};

// One Lua frame a trace runs at a pc, innermost first in JitFrames::frames.
struct JitFrame {
  uint64_t gcfunc = 0;  // 0 for the base frame (the walker's own Lua frame)
  uint64_t proto = 0;
  // A return pc, as symbolize::proto_location takes it: one past the instruction the frame
  // is at (the snapshot's resume pc + 4 for the innermost, the call for the others).
  uint64_t bcpc = 0;
};

struct JitFrames {
  uint32_t snapshot = 0;
  // Innermost first; the last is the trace's base frame (proto = the base prototype given).
  std::vector<JitFrame> frames;
};

Result<TraceSnapshots> read_trace_snapshots(const ljprof_mem_reader& mem,
                                            const lj_luajit_info& info, uint64_t gctrace);

// Reads t.exits and t.snap_ir (or t.exits_error): read_trace_snapshots does when the LuaJIT has
// no mcofs. On one that has, the tests call it to check the exit-based lookup against mcofs.
void read_guard_exits(const ljprof_mem_reader& mem, const lj_luajit_info& info, TraceSnapshots& t);

// The snapshots whose code may hold machine-code `pc` (the leaf pc, or a return address - 1):
// exactly one by mcofs where the LuaJIT has it, else by the guards' exits (trace_exits.h).
Result<SnapshotSpan> snapshots_at(const TraceSnapshots& t, uint64_t pc);

// The Lua frames trace `t` would restore at `snapshot`, the outermost of which is the walker's
// Lua frame at the trace's base, of prototype `base_proto`.
Result<JitFrames> jit_frames_in(const ljprof_mem_reader& mem, const lj_luajit_info& info,
                                const TraceSnapshots& t, uint32_t snapshot, uint64_t base_proto);

// One of those frames as people read it: its location and, for every frame but the base, the
// name its caller (the next frame out) gave it, as in the VM's own traceback.
struct JitLuaFrame {
  uint64_t gcfunc = 0;  // 0: the base frame
  uint64_t bcpc = 0;
  LuaLocation lua;
  std::optional<CallSiteName> call_name;
  std::string name_error;
};
struct JitLuaFrames {
  uint32_t snapshot = 0;            // the snapshot (the first, when a span of them agrees)
  std::vector<JitLuaFrame> frames;  // innermost first; the last is the base frame
};

// The Lua frames trace `t` runs at machine-code `pc`, each located and named: those of the
// snapshot that holds `pc`, or of every snapshot that may hold it when they all resume at the
// same functions, lines and names (else an error: the pc is where their code meets).
// `base_gcfunc`: the walker's base-frame function.
Result<JitLuaFrames> jit_lua_frames(const ljprof_mem_reader& mem, const lj_luajit_info& info,
                                    const TraceSnapshots& t, uint64_t pc, uint64_t base_gcfunc,
                                    uint64_t base_proto);
// The same for the snapshots snapshots_at gave for a pc: every pc of one span has the same
// frames, so a caller may keep them per span (`pc` only names the place in messages).
Result<JitLuaFrames> jit_lua_frames(const ljprof_mem_reader& mem, const lj_luajit_info& info,
                                    const TraceSnapshots& t, SnapshotSpan span, uint64_t pc,
                                    uint64_t base_gcfunc, uint64_t base_proto);

}  // namespace ljprof::symbolize
