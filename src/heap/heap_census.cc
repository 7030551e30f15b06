#include "heap/heap_census.h"

#include <fmt/format.h>

#include <algorithm>

namespace ljprof::heap {

const char* gct_name(uint8_t gct) {
  switch (static_cast<Gct>(gct)) {
    case Gct::Str:
      return "string";
    case Gct::Upval:
      return "upvalue";
    case Gct::Thread:
      return "thread";
    case Gct::Proto:
      return "proto";
    case Gct::Func:
      return "function";
    case Gct::Trace:
      return "trace";
    case Gct::Cdata:
      return "cdata";
    case Gct::Tab:
      return "table";
    case Gct::Udata:
      return "userdata";
  }
  return "unknown";
}

uint64_t Census::object_bytes() const {
  uint64_t sum = 0;
  for (const TypeTotal& t : types) sum += t.bytes;
  return sum;
}

int64_t Census::index_of(uint64_t addr) const {
  if (!address_index.empty()) return address_index.find(objects, addr);
  auto it = std::lower_bound(objects.begin(), objects.end(), addr,
                             [](const Object& o, uint64_t a) { return o.addr() < a; });
  if (it == objects.end() || it->addr() != addr) return -1;
  return it - objects.begin();
}

namespace {

// lj_def.h limits: LJ_MAX_STR and LJ_MAX_UDATA 0x7fffff00, LJ_MAX_HBITS 26, LJ_MAX_ASIZE
// 2^27 + 1 slots; LJ_STACK_MAX 65500 slots plus the error-handling extra (lj_state.c).
constexpr uint64_t kMaxStr = 0x7fffff00;
constexpr uint64_t kMaxHashNodes = uint64_t{1} << 26;
constexpr uint64_t kMaxArray = (uint64_t{1} << 27) + 1;
constexpr uint64_t kMaxStackSlots = uint64_t{1} << 17;
constexpr uint64_t kMaxProtoBytes = uint64_t{1} << 30;
constexpr uint64_t kTValue = 8;     // sizeof(TValue) in both GC64 modes
constexpr uint64_t kIRIns = 8;      // lj_ir.h sizeof(IRIns)
constexpr uint64_t kSnapShot = 12;  // lj_jit.h sizeof(SnapShot)
constexpr uint64_t kSnapEntry = 4;  // lj_jit.h SnapEntry (uint32_t)
constexpr uint64_t kCdataVar = 8;   // lj_obj.h sizeof(GCcdataVar): offset, extra, len
constexpr uint32_t kCtAttrib = 8;   // lj_ctype.h CT_ATTRIB
constexpr uint32_t kCtHasSize = 5;  // lj_ctype.h CT_HASSIZE (= CT_ENUM)
constexpr uint64_t kCtSizePtr = 8;  // CTSIZE_PTR on 64-bit targets

Result<uint64_t> table_bytes(const Memory& mem, uint64_t t) {
  const lj_luajit_info& in = mem.info();
  auto asize = mem.get<uint32_t>(t + in.tab_asize);
  auto hmask = mem.get<uint32_t>(t + in.tab_hmask);
  auto colo = mem.get<int8_t>(t + in.tab_colo);
  if (!asize || !hmask || !colo) return make_error("table {:#x} is unreadable", t);
  const uint64_t nodes = uint64_t{*hmask} + 1;
  if (nodes > kMaxHashNodes || (nodes & (nodes - 1)) != 0) {
    return make_error("table {:#x}: hmask {:#x} is not 2^n - 1 under 2^26", t, *hmask);
  }
  if (*asize > kMaxArray) return make_error("table {:#x}: asize {} over 2^27", t, *asize);
  // lj_tab.c lj_tab_free: hash part unless it is the shared nilnode (hmask 0), array part
  // unless colocated, the header (with the colocated array, sizetabcolo).
  uint64_t bytes = *hmask > 0 ? nodes * static_cast<uint64_t>(in.node_size) : 0;
  if (*asize > 0 && *colo <= 0) bytes += kTValue * *asize;
  if (*colo != 0) {
    bytes += (static_cast<uint64_t>(static_cast<uint8_t>(*colo)) & 0x7f) * kTValue +
             static_cast<uint64_t>(in.tab_size);
  } else {
    bytes += static_cast<uint64_t>(in.tab_size);
  }
  return bytes;
}

Result<uint64_t> thread_bytes(const Memory& mem, uint64_t L, bool main_thread,
                              uint64_t lua_state_size) {
  const lj_luajit_info& in = mem.info();
  auto stacksize = mem.get<uint32_t>(L + in.L_stacksize);
  if (!stacksize) return make_error("lua_State {:#x} is unreadable", L);
  if (*stacksize > kMaxStackSlots) {
    return make_error("lua_State {:#x}: stacksize {} over 2^17 slots", L, *stacksize);
  }
  // lj_state.c lj_state_free: the stack, then the lua_State (the main one is in GG_State).
  return kTValue * *stacksize + (main_thread ? 0 : lua_state_size);
}

Result<uint64_t> function_bytes(const Memory& mem, uint64_t fn) {
  const lj_luajit_info& in = mem.info();
  auto ffid = mem.get<uint8_t>(fn + in.fn_ffid);
  auto n = mem.get<uint8_t>(fn + in.fn_nupvalues);
  if (!ffid || !n) return make_error("function {:#x} is unreadable", fn);
  // lj_func.c lj_func_free: sizeLfunc / sizeCfunc by the upvalue count.
  if (*ffid == 0) return static_cast<uint64_t>(in.fn_uvptr) + uint64_t{in.ref_size} * *n;
  return static_cast<uint64_t>(in.fn_cupvalue) + kTValue * *n;
}

Result<uint64_t> trace_bytes(const Memory& mem, uint64_t tr) {
  const lj_luajit_info& in = mem.info();
  auto nins = mem.get<uint32_t>(tr + in.tr_nins);
  auto nk = mem.get<uint32_t>(tr + in.tr_nk);
  auto nsnap = mem.get<uint16_t>(tr + in.tr_nsnap);
  auto nsnapmap = mem.get<uint32_t>(tr + in.tr_nsnapmap);
  if (!nins || !nk || !nsnap || !nsnapmap) return make_error("trace {:#x} is unreadable", tr);
  if (*nins < *nk || *nins - *nk > (1u << 24) || *nsnapmap > (1u << 24)) {
    return make_error("trace {:#x}: nins {} / nk {} / nsnapmap {} out of range", tr, *nins, *nk,
                      *nsnapmap);
  }
  // lj_trace.c lj_trace_free.
  return ((static_cast<uint64_t>(in.tr_size) + 7) & ~uint64_t{7}) + (*nins - *nk) * kIRIns +
         *nsnap * kSnapShot + *nsnapmap * kSnapEntry;
}

Result<uint64_t> cdata_bytes(const Memory& mem, const SizeContext& ctypes, uint64_t cd) {
  const lj_luajit_info& in = mem.info();
  auto marked = mem.get<uint8_t>(cd + in.gc_marked);
  auto id = mem.get<uint16_t>(cd + in.cd_ctypeid);
  if (!marked || !id) return make_error("cdata {:#x} is unreadable", cd);
  // lj_cdata.c lj_cdata_free: a variable-length cdata frees its GCcdataVar prefix's len +
  // extra; any other the header and its C type's size (a pointer's for a function).
  if (*marked & kMarkCdataVar) {
    auto len = mem.get<uint32_t>(cd - kCdataVar + 4);
    auto extra = mem.get<uint16_t>(cd - kCdataVar + 2);
    if (!len || !extra) return make_error("cdata {:#x}: its GCcdataVar is unreadable", cd);
    if (*len > kMaxStr) return make_error("cdata {:#x}: length {} over 2^31", cd, *len);
    return uint64_t{*len} + *extra;
  }
  if (ctypes.tab == 0) return make_error("cdata {:#x} but the VM has no C type table", cd);
  uint32_t cid = *id;
  for (int hops = 0; hops < 16; ++hops) {
    if (cid >= ctypes.top) return make_error("cdata {:#x}: C type {} out of range", cd, cid);
    const uint64_t ct = ctypes.tab + uint64_t{cid} * static_cast<uint64_t>(in.ct_size);
    auto info = mem.get<uint32_t>(ct);
    auto size = mem.get<uint32_t>(ct + 4);
    if (!info || !size) return make_error("cdata {:#x}: C type {} is unreadable", cd, cid);
    const uint32_t kind = *info >> 28;
    if (kind == kCtAttrib) {  // ctype_raw: skip attributes to the type they qualify
      cid = *info & 0xffff;
      continue;
    }
    const uint64_t payload = kind <= kCtHasSize ? *size : kCtSizePtr;
    if (payload > kMaxStr) return make_error("cdata {:#x}: C type size {} too big", cd, payload);
    return static_cast<uint64_t>(in.cd_size) + payload;
  }
  return make_error("cdata {:#x}: C type attributes nest over 16 deep", cd);
}

}  // namespace

Result<uint64_t> object_bytes(const Memory& mem, const SizeContext& ctypes, uint64_t addr,
                              uint8_t gct, bool main_thread) {
  const lj_luajit_info& in = mem.info();
  switch (static_cast<Gct>(gct)) {
    case Gct::Str: {
      auto len = mem.get<uint32_t>(addr + in.str_len);
      if (!len) return make_error("string {:#x} is unreadable", addr);
      if (*len > kMaxStr) return make_error("string {:#x}: length {} over 2^31", addr, *len);
      if (upstream_interning(in)) return static_cast<uint64_t>(in.str_data) + ((*len + 4) & ~3u);
      return static_cast<uint64_t>(in.str_data) + *len + 1;
    }
    case Gct::Upval:
      return static_cast<uint64_t>(in.uv_size);  // lj_func.c lj_func_freeuv
    case Gct::Thread:
      return thread_bytes(mem, addr, main_thread, ctypes.lua_state_size);
    case Gct::Proto: {
      auto sizept = mem.get<uint32_t>(addr + in.pt_sizept);
      if (!sizept) return make_error("prototype {:#x} is unreadable", addr);
      if (*sizept < static_cast<uint32_t>(in.pt_size) || *sizept > kMaxProtoBytes) {
        return make_error("prototype {:#x}: sizept {} out of range", addr, *sizept);
      }
      return *sizept;  // lj_func.c lj_func_freeproto
    }
    case Gct::Func:
      return function_bytes(mem, addr);
    case Gct::Trace:
      return trace_bytes(mem, addr);
    case Gct::Cdata:
      return cdata_bytes(mem, ctypes, addr);
    case Gct::Tab:
      return table_bytes(mem, addr);
    case Gct::Udata: {
      auto len = mem.get<uint32_t>(addr + in.ud_len);
      if (!len) return make_error("userdata {:#x} is unreadable", addr);
      if (*len > kMaxStr) return make_error("userdata {:#x}: length {} over 2^31", addr, *len);
      return static_cast<uint64_t>(in.ud_size) + *len;  // lj_udata.c lj_udata_free
    }
  }
  return make_error("object {:#x}: type tag {} is no collectable type", addr, gct);
}

}  // namespace ljprof::heap
