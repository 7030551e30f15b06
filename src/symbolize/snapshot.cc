#include "symbolize/snapshot.h"

#include <algorithm>
#include <cstring>

#include "symbolize/read_field.h"

namespace ljprof::symbolize {

namespace {

// lj_jit.h SnapShot, the layout with mcofs (upstream LuaJIT 2.1 since 2020, OpenResty's luajit2):
// mapofs u32 @0, ref u16 @4, mcofs u16 @6, nslots @8, topslot @9, nent @10, count @11. Without
// mcofs (Tarantool's fork) nslots (>= 1: the base frame's slots) sits at @6 and nent at @8, so a
// first snapshot whose mcofs is not 0 tells the two apart (lj_asm.c asm_snap_fixup_mcofs sets
// snap[0].mcofs = 0). Both are 12 bytes (4-byte alignment).
constexpr uint32_t kSnapSize = 12;
constexpr uint32_t kSnapMapofs = 0, kSnapRef = 4, kSnapMcofs = 6, kSnapNent = 10, kSnapCount = 11;
constexpr uint32_t kSnapNentWithoutMcofs = 8, kSnapCountWithoutMcofs = 9;
constexpr uint8_t kSnapCountDone = 255;  // lj_jit.h SNAPCOUNT_DONE: a side trace is linked
// lj_jit.h SnapEntry: slot << 24 | flags | IR ref.
constexpr uint32_t kSnapFrame = 0x010000;  // SNAP_FRAME
constexpr uint32_t kSnapCont = 0x020000;   // SNAP_CONT
constexpr uint32_t snap_ref(uint32_t sn) {
  return sn & 0xffff;
}
constexpr uint32_t snap_slot(uint32_t sn) {
  return sn >> 24;
}
// lj_ir.h: constants have refs below REF_BIAS; IRIns is 8 bytes with the type at byte 4;
// 64-bit constants (KNUM, and KGC with LJ_GC64) keep their value in the next IRIns.
constexpr uint32_t kRefBias = 0x8000;
constexpr uint32_t kIrInsSize = 8, kIrInsType = 4, kIrInsOp = 5, kIrtTypeMask = 0x1f;
constexpr uint8_t kIrtGuard = 0x80;  // lj_ir.h IRT_GUARD
// lj_ir.h IRDEF: LT .. UGT, EQ, NE, ABC, RETF come first in every LuaJIT ("must be properly
// aligned to flip opposites"), so an opcode below 12 is a guarded comparison. RETF (11) is one
// whose code goes on after its branch (lj_asm_*.h asm_retf: the new BASE is set there).
constexpr uint8_t kIrRetf = 11, kIrComparisonOps = 12;
constexpr uint8_t kIrtFunc = 8, kIrtNum = 14;  // lj_ir.h IRT_FUNC, IRT_NUM
// lj_obj.h: GCHeader.gct holds ~itype, and LJ_TFUNC is ~8u; FF_LUA is ffid 0.
constexpr uint8_t kGctFunc = 8;
// lj_frame.h frame link types.
constexpr uint64_t kFrameTypeMask = 3, kFrameTypePMask = 7;
constexpr uint64_t kFrameLua = 0, kFrameCont = 2, kFrameVarg = 3;
// Bounds on what one snapshot may hold: nent is a uint8; frame links are 1 + frame depth.
constexpr uint32_t kMaxSnapEntries = 1024;

uint32_t mcode_unit(const lj_luajit_info& info) {
  return info.arch == LJ_INFO_ARCH_ARM64 ? 4 : 1;  // lj_target_*.h MCode
}

// The 64-bit value of IR constant `ref` of type `irt` (lj_ir.h ir_knum / ir_kgc).
Result<uint64_t> ir_constant(const ljprof_mem_reader& mem, const TraceSnapshots& t, uint32_t ref,
                             uint8_t irt, bool wide) {
  if (ref < t.nk || ref + (wide ? 1 : 0) >= kRefBias) {
    return make_error("snapshot slot ref {:#x} of trace {:#x} is not an IR constant", ref,
                      t.gctrace);
  }
  const uint64_t ins = t.ir + uint64_t{ref} * kIrInsSize;
  LJ_ASSIGN_OR_RETURN(uint64_t type, read_uint(mem, ins + kIrInsType, 1, "IRIns.t"));
  if ((type & kIrtTypeMask) != irt) {
    return make_error("IR constant {:#x} of trace {:#x} has type {}, expected {}", ref, t.gctrace,
                      type & kIrtTypeMask, irt);
  }
  if (wide) return read_uint(mem, ins + kIrInsSize, 8, "IR 64-bit constant");
  return read_uint(mem, ins, 4, "IR constant");
}

// The prototype of a Lua function object (a constant of the trace), after checking it is one:
// GCHeader.gct (the same offset in every GC object) and ffid FF_LUA.
Result<uint64_t> lua_function_proto(const ljprof_mem_reader& mem, const lj_luajit_info& info,
                                    uint64_t gcfunc) {
  LJ_ASSIGN_OR_RETURN(uint64_t gct, read_uint(mem, gcfunc + info.tr_gct, 1, "GCfunc.gct"));
  LJ_ASSIGN_OR_RETURN(uint64_t ffid, read_uint(mem, gcfunc + info.fn_ffid, 1, "GCfunc.ffid"));
  if (gct != kGctFunc || ffid != 0) {
    return make_error("inlined frame's function {:#x} is not a Lua function", gcfunc);
  }
  return function_proto(mem, info, gcfunc);
}

// Whether bytecode address `pc` is an instruction of `proto`.
Result<bool> proto_holds(const ljprof_mem_reader& mem, const lj_luajit_info& info, uint64_t proto,
                         uint64_t pc) {
  LJ_ASSIGN_OR_RETURN(uint64_t sizebc, read_uint(mem, proto + info.pt_sizebc, 4, "GCproto.sizebc"));
  const uint64_t first = proto + info.pt_size;
  return pc >= first && pc < first + sizebc * 4 && (pc - first) % 4 == 0;
}

struct FrameSlot {
  uint32_t slot = 0;
  uint64_t gcfunc = 0;
  uint64_t link = 0;  // lj_frame.h frame link: return pc (Lua), delta|type (vararg)
};

// The frames above the trace's base in snapshot `map` (nent slot entries, then the pc and, without
// LJ_FR2, the frame links innermost first: lj_snap.c snapshot_framelinks), innermost first.
Result<std::vector<FrameSlot>> frame_slots(const ljprof_mem_reader& mem, const lj_luajit_info& info,
                                           const TraceSnapshots& t,
                                           const std::vector<uint32_t>& map, uint32_t nent,
                                           uint64_t base_proto) {
  const bool fr2 = info.gc64 != 0;
  std::vector<FrameSlot> frames;
  for (uint32_t n = 0; n < nent; ++n) {
    const uint32_t sn = map[n];
    if (!(sn & kSnapFrame)) continue;
    if (sn & kSnapCont) return make_error("snapshot holds a continuation (metamethod) frame");
    FrameSlot f;
    f.slot = snap_slot(sn);
    if (!fr2 && f.slot == 0) {
      // Without LJ_FR2 slot 0 is the base frame's function (lj_snap.c snapshot_slots keeps it
      // once the trace read it): still the walker's base function unless the trace tail-called.
      LJ_ASSIGN_OR_RETURN(uint64_t base_fn, ir_constant(mem, t, snap_ref(sn), kIrtFunc, false));
      LJ_ASSIGN_OR_RETURN(uint64_t proto, lua_function_proto(mem, info, base_fn));
      if (proto != base_proto) return make_error("trace tail-called out of its base frame");
      continue;
    }
    // Slot 1 with LJ_FR2 is the base frame's link: a frame entry there means the trace
    // tail-called out of it, so the walker's base frame is no longer the one that runs.
    if (fr2 && f.slot <= 1u) return make_error("trace tail-called out of its base frame");
    if (fr2) {
      // lj_snap.c snapshot_slots: the link slot holds the frame link as a KNUM, the function
      // sits in the slot below it.
      LJ_ASSIGN_OR_RETURN(f.link, ir_constant(mem, t, snap_ref(sn), kIrtNum, true));
      auto fn = std::find_if(map.begin(), map.begin() + n,
                             [&](uint32_t e) { return snap_slot(e) == f.slot - 1; });
      if (fn == map.begin() + n) return make_error("snapshot frame without its function slot");
      LJ_ASSIGN_OR_RETURN(f.gcfunc, ir_constant(mem, t, snap_ref(*fn), kIrtFunc, true));
    } else {
      LJ_ASSIGN_OR_RETURN(f.gcfunc, ir_constant(mem, t, snap_ref(sn), kIrtFunc, false));
    }
    frames.push_back(f);
  }
  std::reverse(frames.begin(), frames.end());
  if (!fr2) {
    // Frame links follow the pc, one per Lua or vararg frame (continuations were refused).
    const size_t nlinks = map.size() - nent - 1;
    if (nlinks != frames.size()) {
      return make_error("snapshot has {} frame links for {} frames", nlinks, frames.size());
    }
    for (size_t i = 0; i < frames.size(); ++i) frames[i].link = map[nent + 1 + i];
  }
  return frames;
}

// Whether IR instruction `ref` is a guarded comparison (lj_ir.h: IRIns.t has IRT_GUARD, IRIns.o
// is below `ops`).
bool guarded_comparison(const ljprof_mem_reader& mem, const TraceSnapshots& t, uint32_t ref,
                        uint8_t ops) {
  uint8_t ins[2] = {0, 0};  // IRIns.t, IRIns.o
  static_assert(kIrInsOp == kIrInsType + 1);
  return ref >= kRefBias &&
         mem.read_mem(mem.ctx, t.ir + uint64_t{ref} * kIrInsSize + kIrInsType, ins, 2) == 0 &&
         (ins[0] & kIrtGuard) != 0 && ins[1] < ops;
}

}  // namespace

Result<TraceSnapshots> read_trace_snapshots(const ljprof_mem_reader& mem,
                                            const lj_luajit_info& info, uint64_t gctrace) {
  TraceSnapshots t;
  t.gctrace = gctrace;
  LJ_ASSIGN_OR_RETURN(uint64_t nsnap, read_uint(mem, gctrace + info.tr_nsnap, 2, "GCtrace.nsnap"));
  LJ_ASSIGN_OR_RETURN(uint64_t nsnapmap,
                      read_uint(mem, gctrace + info.tr_nsnapmap, 4, "GCtrace.nsnapmap"));
  LJ_ASSIGN_OR_RETURN(uint64_t snap, read_uint(mem, gctrace + info.tr_snap, 8, "GCtrace.snap"));
  LJ_ASSIGN_OR_RETURN(t.snapmap, read_uint(mem, gctrace + info.tr_snapmap, 8, "GCtrace.snapmap"));
  LJ_ASSIGN_OR_RETURN(t.ir, read_uint(mem, gctrace + info.tr_ir, 8, "GCtrace.ir"));
  LJ_ASSIGN_OR_RETURN(uint64_t nk, read_uint(mem, gctrace + info.tr_nk, 4, "GCtrace.nk"));
  LJ_ASSIGN_OR_RETURN(t.mcode, read_uint(mem, gctrace + info.tr_mcode, 8, "GCtrace.mcode"));
  LJ_ASSIGN_OR_RETURN(uint64_t szmcode,
                      read_uint(mem, gctrace + info.tr_szmcode, 4, "GCtrace.szmcode"));
  t.nk = static_cast<uint32_t>(nk);
  t.szmcode = static_cast<uint32_t>(szmcode);
  if (nsnap == 0) return make_error("trace {:#x} has no snapshots", gctrace);
  std::vector<uint8_t> raw(size_t{nsnap} * kSnapSize);
  if (mem.read_mem(mem.ctx, snap, raw.data(), static_cast<uint32_t>(raw.size())) != 0) {
    return make_error("cannot read the {} snapshots of trace {:#x} at {:#x}", nsnap, gctrace, snap);
  }
  auto u32_at = [&](size_t o) {
    uint32_t v = 0;
    std::memcpy(&v, raw.data() + o, 4);
    return v;
  };
  auto u16_at = [&](size_t o) {
    uint16_t v = 0;
    std::memcpy(&v, raw.data() + o, 2);
    return uint32_t{v};
  };
  const uint32_t unit = mcode_unit(info);
  t.has_mcofs = u16_at(kSnapMcofs) == 0;
  const uint32_t nent_at = t.has_mcofs ? kSnapNent : kSnapNentWithoutMcofs;
  const uint32_t count_at = t.has_mcofs ? kSnapCount : kSnapCountWithoutMcofs;
  t.snaps.resize(nsnap);
  for (size_t i = 0; i < nsnap; ++i) {
    TraceSnapshots::Snap& s = t.snaps[i];
    s.mapofs = u32_at(i * kSnapSize + kSnapMapofs);
    s.ref = u16_at(i * kSnapSize + kSnapRef);
    if (t.has_mcofs) s.mcofs = u16_at(i * kSnapSize + kSnapMcofs) * unit;
    s.nent = raw[i * kSnapSize + nent_at];
    s.linked = raw[i * kSnapSize + count_at] == kSnapCountDone;
  }
  const uint32_t links = info.gc64 ? 2 : 1;  // the pc (64-bit with LJ_FR2), then links
  for (size_t i = 0; i < nsnap; ++i) {
    TraceSnapshots::Snap& s = t.snaps[i];
    s.end = i + 1 < nsnap ? t.snaps[i + 1].mapofs : static_cast<uint32_t>(nsnapmap);
    const bool ordered = i == 0 || (s.mcofs >= t.snaps[i - 1].mcofs && s.ref >= t.snaps[i - 1].ref);
    // mcofs may pass the code's end: lj_asm.c computes it before the tail is trimmed, so a
    // trailing snapshot can cover no code at all.
    if (!ordered || s.end > nsnapmap || s.end < s.mapofs + s.nent + links ||
        (info.gc64 && s.end != s.mapofs + s.nent + links) || s.end - s.mapofs > kMaxSnapEntries) {
      return make_error(
          "trace {:#x}: snapshot {} of {} (mapofs {}, ref {:#x}, mcofs {:#x}, {} entries, map "
          "ends at {} of {}, code {:#x} bytes) breaks lj_snap.c's layout",
          gctrace, i, nsnap, s.mapofs, s.ref, s.mcofs, s.nent, s.end, nsnapmap, t.szmcode);
    }
  }
  if (!t.has_mcofs) read_guard_exits(mem, info, t);
  return t;
}

Result<SnapshotSpan> snapshots_at(const TraceSnapshots& t, uint64_t pc) {
  if (pc < t.mcode || pc >= t.mcode + t.szmcode) {
    return make_error("pc {:#x} is outside trace {:#x}'s machine code", pc, t.gctrace);
  }
  if (t.has_mcofs) {
    // lj_trace.c lj_trace_unwind: the rightmost snapshot starting at or before the pc.
    auto after =
        std::upper_bound(t.snaps.begin(), t.snaps.end(), pc - t.mcode,
                         [](uint64_t o, const TraceSnapshots::Snap& s) { return o < s.mcofs; });
    const auto s = static_cast<uint32_t>(after - t.snaps.begin() - 1);
    return SnapshotSpan{s, s};
  }
  if (!t.exits_error.empty()) {
    return make_error(
        "this LuaJIT's snapshots carry no machine-code offsets (lj_jit.h SnapShot.mcofs) and "
        "the trace's guard exits cannot be read: {}",
        t.exits_error);
  }
  return snapshots_by_exits(t.exits, t.snap_ir, t.mcode, pc);
}

// A failure is kept, not returned: the snapshots are still valid, only no pc can be mapped.
void read_guard_exits(const ljprof_mem_reader& mem, const lj_luajit_info& info, TraceSnapshots& t) {
  const size_t n = t.snaps.size();
  t.snap_ir.assign(n, {});
  for (size_t i = 0; i < n; ++i) {
    SnapshotIr& s = t.snap_ir[i];
    const uint32_t ref = t.snaps[i].ref;
    s.empty = i + 1 < n && t.snaps[i + 1].ref == ref;
    s.opens_with_comparison = guarded_comparison(mem, t, ref, kIrComparisonOps);
    // The last snapshot's range runs to GCtrace.nins, which is not read: left false.
    s.closes_with_comparison =
        i + 1 < n && !s.empty && guarded_comparison(mem, t, t.snaps[i + 1].ref - 1, kIrRetf);
  }
  std::vector<bool> linked(n);
  for (size_t i = 0; i < n; ++i) linked[i] = t.snaps[i].linked;
  auto traceno = read_uint(mem, t.gctrace + info.tr_traceno, 2, "GCtrace.traceno");
  auto exits = traceno.ok() ? read_trace_exits(mem, info, t.mcode, t.szmcode,
                                               static_cast<uint32_t>(*traceno), linked)
                            : Result<std::vector<TraceInsn>>(traceno.error());
  if (exits.ok()) {
    t.exits = std::move(*exits);
  } else {
    t.exits_error = exits.message();
  }
}

Result<JitFrames> jit_frames_in(const ljprof_mem_reader& mem, const lj_luajit_info& info,
                                const TraceSnapshots& t, uint32_t snapshot, uint64_t base_proto) {
  if (snapshot >= t.snaps.size()) {
    return make_error("trace {:#x} has no snapshot {}", t.gctrace, snapshot);
  }
  JitFrames out;
  out.snapshot = snapshot;
  const TraceSnapshots::Snap& s = t.snaps[out.snapshot];
  std::vector<uint32_t> map(s.end - s.mapofs);
  if (mem.read_mem(mem.ctx, t.snapmap + uint64_t{s.mapofs} * 4, map.data(),
                   static_cast<uint32_t>(map.size() * 4)) != 0) {
    return make_error("cannot read snapshot {} of trace {:#x}", out.snapshot, t.gctrace);
  }
  // lj_snap.c snapshot_framelinks: the resume pc, with LJ_FR2 as pc << 8 | baseslot - 2.
  const uint64_t resume_pc =
      info.gc64 ? (uint64_t{map[s.nent + 1]} << 32 | map[s.nent]) >> 8 : map[s.nent];
  LJ_ASSIGN_OR_RETURN(std::vector<FrameSlot> slots,
                      frame_slots(mem, info, t, map, s.nent, base_proto));

  // Innermost first; a vararg frame (lj_frame.h FRAME_VARG) is the same call as the Lua frame
  // below it, which holds the return pc.
  std::vector<FrameSlot> calls;
  for (const FrameSlot& f : slots) {
    if ((f.link & kFrameTypePMask) == kFrameVarg) continue;
    if ((f.link & kFrameTypeMask) != kFrameLua || (f.link & kFrameTypePMask) == kFrameCont) {
      return make_error("snapshot frame link {:#x} is not a Lua frame", f.link);
    }
    calls.push_back(f);
  }
  uint64_t bcpc = resume_pc + 4;
  for (const FrameSlot& f : calls) {
    LJ_ASSIGN_OR_RETURN(uint64_t proto, lua_function_proto(mem, info, f.gcfunc));
    out.frames.push_back({f.gcfunc, proto, bcpc});
    bcpc = f.link;
  }
  out.frames.push_back({0, base_proto, bcpc});
  // Proven: each frame's pc is an instruction of its own prototype (a return pc one past it).
  for (const JitFrame& f : out.frames) {
    LJ_ASSIGN_OR_RETURN(bool holds, proto_holds(mem, info, f.proto, f.bcpc - 4));
    if (!holds) {
      return make_error("snapshot {} of trace {:#x}: pc {:#x} is not in prototype {:#x}",
                        out.snapshot, t.gctrace, f.bcpc - 4, f.proto);
    }
  }
  return out;
}

namespace {

// `raw`'s frames located and each but the base named by its caller.
Result<JitLuaFrames> locate(const ljprof_mem_reader& mem, const lj_luajit_info& info,
                            const JitFrames& raw, uint64_t base_gcfunc) {
  JitLuaFrames out;
  out.snapshot = raw.snapshot;
  for (size_t i = 0; i < raw.frames.size(); ++i) {
    const JitFrame& f = raw.frames[i];
    JitLuaFrame j;
    j.gcfunc = f.gcfunc;
    j.bcpc = f.bcpc;
    LJ_ASSIGN_OR_RETURN(j.lua, proto_location(mem, info, f.proto, f.bcpc));
    if (i + 1 < raw.frames.size()) {
      const JitFrame& caller = raw.frames[i + 1];
      auto name =
          call_site_name(mem, info, caller.gcfunc != 0 ? caller.gcfunc : base_gcfunc, caller.bcpc);
      if (name.ok()) {
        j.call_name = std::move(*name);
      } else {
        j.name_error = name.message();
      }
    }
    out.frames.push_back(std::move(j));
  }
  return out;
}

// Whether two snapshots' frames read the same: functions, lines and names.
bool same_frames(const JitLuaFrames& a, const JitLuaFrames& b) {
  return std::equal(a.frames.begin(), a.frames.end(), b.frames.begin(), b.frames.end(),
                    [](const JitLuaFrame& x, const JitLuaFrame& y) {
                      const bool same_name =
                          x.call_name.has_value() == y.call_name.has_value() &&
                          (!x.call_name || (x.call_name->name == y.call_name->name &&
                                            x.call_name->what == y.call_name->what));
                      return x.gcfunc == y.gcfunc && x.lua.proto == y.lua.proto &&
                             x.lua.line == y.lua.line && same_name;
                    });
}

// The most snapshots one pc may span that are compared (a loop body without guards spans the
// snapshots of its iteration).
constexpr uint32_t kMaxSpan = 16;

}  // namespace

Result<JitLuaFrames> jit_lua_frames(const ljprof_mem_reader& mem, const lj_luajit_info& info,
                                    const TraceSnapshots& t, uint64_t pc, uint64_t base_gcfunc,
                                    uint64_t base_proto) {
  LJ_ASSIGN_OR_RETURN(SnapshotSpan span, snapshots_at(t, pc));
  return jit_lua_frames(mem, info, t, span, pc, base_gcfunc, base_proto);
}

Result<JitLuaFrames> jit_lua_frames(const ljprof_mem_reader& mem, const lj_luajit_info& info,
                                    const TraceSnapshots& t, SnapshotSpan span, uint64_t pc,
                                    uint64_t base_gcfunc, uint64_t base_proto) {
  if (span.last - span.first >= kMaxSpan) {
    return make_error("pc {:#x} may be in any of snapshots {}..{} of trace {:#x}", pc, span.first,
                      span.last, t.gctrace);
  }
  std::optional<JitLuaFrames> first;
  for (uint32_t s = span.first; s <= span.last; ++s) {
    if (!t.snap_ir.empty() && t.snap_ir[s].empty) continue;  // no IR, so no code
    LJ_ASSIGN_OR_RETURN(JitFrames raw, jit_frames_in(mem, info, t, s, base_proto));
    LJ_ASSIGN_OR_RETURN(JitLuaFrames located, locate(mem, info, raw, base_gcfunc));
    if (!first) {
      first = std::move(located);
    } else if (!same_frames(*first, located)) {
      return make_error(
          "pc {:#x} lies where the code of snapshots {} and {} meets, which resume at different "
          "Lua lines; without SnapShot.mcofs that boundary is not recorded",
          pc, first->snapshot, s);
    }
  }
  if (!first) return make_error("no snapshot of trace {:#x} holds pc {:#x}", t.gctrace, pc);
  return std::move(*first);
}

}  // namespace ljprof::symbolize
