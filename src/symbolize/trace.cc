#include "symbolize/trace.h"

namespace ljprof::symbolize {

Result<TraceInfo> trace_info(const ljprof_mem_reader& mem, const lj_luajit_info& info,
                             uint64_t gctrace) {
  TraceInfo out;
  uint16_t traceno = 0;
  if (mem.read_mem(mem.ctx, gctrace + info.tr_traceno, &traceno, 2) != 0) {
    return make_error("cannot read GCtrace.traceno at {:#x}", gctrace + info.tr_traceno);
  }
  out.traceno = traceno;
  // lj_jit.h GCtrace: GCRef startpt; MRef startpc — both ref_size wide, adjacent.
  uint64_t startpt = 0, startpc = 0;
  if (mem.read_mem(mem.ctx, gctrace + info.tr_startpt, &startpt, info.ref_size) != 0 ||
      mem.read_mem(mem.ctx, gctrace + info.tr_startpt + info.ref_size, &startpc, info.ref_size) !=
          0) {
    return make_error("cannot read GCtrace.startpt/startpc at {:#x}", gctrace + info.tr_startpt);
  }
  // proto_location takes a return pc (one past the instruction), so pass startpc + 4.
  LJ_ASSIGN_OR_RETURN(out.start, proto_location(mem, info, startpt, startpc + 4));
  return out;
}

}  // namespace ljprof::symbolize
