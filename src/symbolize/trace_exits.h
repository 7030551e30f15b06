// symbolize/trace_exits.h: which snapshot a trace's machine code is in at a pc, for a LuaJIT
// whose SnapShot has no mcofs (Tarantool's fork, every version): from the exit numbers of the
// guard branches around the pc.
//
// Every guard of a trace branches to the exit stub of the snapshot it would restore (lj_asm.c
// asm_guardcc uses as->snapno), and the assembler emits IR in order, so exit numbers never
// decrease along the code. A pc between two guards of the same snapshot is in that snapshot.
// Between a guard of snapshot a and the first guard of a later snapshot b, the code may belong
// to any snapshot from a to b; the ends are ruled out where the code shows it:
//   - b, when b's first IR instruction is a guarded comparison (whose code is operand loads,
//     the compare and the branch) and an instruction no comparison emits (a call, a store,
//     arithmetic) lies at or after the pc before b's branch — the case of a call made from a
//     trace, whose return address the walker sees in every frame but the innermost;
//   - a, when a's last IR instruction is a guarded comparison (nothing of a follows its branch
//     but operand reloads) and such an instruction lies after that branch, at or before the pc —
//     the body of a loop whose only guard is its condition.
// The caller accepts what remains when every snapshot in it resumes at the same Lua lines.
//
// Exit stubs (decoded from the target's memory, never assumed):
//   x86-64 (lj_asm_x86.h asm_exitstub_gen): groups of 32 shared by all traces, each stub
//     `push imm8 (exitno & 0xff)`, short jumps to the group's `push imm8 (exitno >> 8)`.
//   arm64 (lj_asm_arm64.h asm_exitstub_setup): per trace, right after its code, `str lr, [sp];
//     bl ->vm_exit_handler; movz w0, #traceno`, then one `bl` back to that start per exit,
//     the one for exit n n+3 instructions after it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "abi/read_mem.h"
#include "common/result.h"

extern "C" {
#include "abi/luajit_info.h"
}

namespace ljprof::symbolize {

// One machine instruction of a trace, as the exit-based lookup needs it.
struct TraceInsn {
  enum class Role : uint8_t {
    MaybeComparison,  // a load, move, compare or constant: may be part of a guard's comparison
    Body,             // no comparison emits it: calls, stores, arithmetic, other branches
    Exit,             // a guard branch to the exit stub of snapshot `exit`
    UnknownExit,      // a branch out whose exit is not known (patched to a side trace, a link)
  };
  uint32_t offset = 0;  // from GCtrace.mcode
  Role role = Role::Body;
  uint16_t exit = 0;
};

// What the lookup needs of each snapshot, from the trace's IR.
struct SnapshotIr {
  bool empty = false;                   // its IR range is empty (the next snapshot has its ref)
  bool opens_with_comparison = false;   // its first IR instruction is a guarded comparison
  bool closes_with_comparison = false;  // its last IR instruction is a guarded comparison
};

// The trace's code `[mcode, mcode + szmcode)`, decoded, each branch out resolved to its exit:
// from its exit stub, or, for a guard patched to jump to a side trace, from `linked` (per
// snapshot: it has a side trace, SnapShot.count == SNAPCOUNT_DONE) where that leaves one
// choice. Exits out of order (a side trace's stack check exits through its parent's number) are
// left unknown.
Result<std::vector<TraceInsn>> read_trace_exits(const ljprof_mem_reader& mem,
                                                const lj_luajit_info& info, uint64_t mcode,
                                                uint32_t szmcode, uint32_t traceno,
                                                const std::vector<bool>& linked);

// The snapshots whose code may hold `pc` (a leaf pc, or a return address - 1), consecutive:
// one when the guards around it prove it, else every snapshot from the last guard's before it
// to the next guard's after it. The caller accepts a span of several only where all of its
// snapshots resume at the same Lua lines (a loop without guards in its body is one line).
struct SnapshotSpan {
  uint32_t first = 0, last = 0;
};
Result<SnapshotSpan> snapshots_by_exits(std::span<const TraceInsn> code,
                                        std::span<const SnapshotIr> snaps, uint64_t mcode,
                                        uint64_t pc);

}  // namespace ljprof::symbolize
