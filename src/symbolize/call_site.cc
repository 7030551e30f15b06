#include "symbolize/call_site.h"

#include <array>
#include <vector>

#include "symbolize/read_field.h"

namespace ljprof::symbolize {

namespace {

using A = BcOperandA;

// lj_bc.h BCDEF, in opcode order: name, operand A mode, metamethod ("___" is nullptr).
constexpr std::array<BytecodeOp, 97> kOps = {{
    {"ISLT", A::Var, "lt"},         {"ISGE", A::Var, "lt"},        {"ISLE", A::Var, "le"},
    {"ISGT", A::Var, "le"},         {"ISEQV", A::Var, "eq"},       {"ISNEV", A::Var, "eq"},
    {"ISEQS", A::Var, "eq"},        {"ISNES", A::Var, "eq"},       {"ISEQN", A::Var, "eq"},
    {"ISNEN", A::Var, "eq"},        {"ISEQP", A::Var, "eq"},       {"ISNEP", A::Var, "eq"},
    {"ISTC", A::Dst, nullptr},      {"ISFC", A::Dst, nullptr},     {"IST", A::None, nullptr},
    {"ISF", A::None, nullptr},      {"ISTYPE", A::Var, nullptr},   {"ISNUM", A::Var, nullptr},
    {"MOV", A::Dst, nullptr},       {"NOT", A::Dst, nullptr},      {"UNM", A::Dst, "unm"},
    {"LEN", A::Dst, "len"},         {"ADDVN", A::Dst, "add"},      {"SUBVN", A::Dst, "sub"},
    {"MULVN", A::Dst, "mul"},       {"DIVVN", A::Dst, "div"},      {"MODVN", A::Dst, "mod"},
    {"ADDNV", A::Dst, "add"},       {"SUBNV", A::Dst, "sub"},      {"MULNV", A::Dst, "mul"},
    {"DIVNV", A::Dst, "div"},       {"MODNV", A::Dst, "mod"},      {"ADDVV", A::Dst, "add"},
    {"SUBVV", A::Dst, "sub"},       {"MULVV", A::Dst, "mul"},      {"DIVVV", A::Dst, "div"},
    {"MODVV", A::Dst, "mod"},       {"POW", A::Dst, "pow"},        {"CAT", A::Dst, "concat"},
    {"KSTR", A::Dst, nullptr},      {"KCDATA", A::Dst, nullptr},   {"KSHORT", A::Dst, nullptr},
    {"KNUM", A::Dst, nullptr},      {"KPRI", A::Dst, nullptr},     {"KNIL", A::Base, nullptr},
    {"UGET", A::Dst, nullptr},      {"USETV", A::Uv, nullptr},     {"USETS", A::Uv, nullptr},
    {"USETN", A::Uv, nullptr},      {"USETP", A::Uv, nullptr},     {"UCLO", A::RBase, nullptr},
    {"FNEW", A::Dst, "gc"},         {"TNEW", A::Dst, "gc"},        {"TDUP", A::Dst, "gc"},
    {"GGET", A::Dst, "index"},      {"GSET", A::Var, "newindex"},  {"TGETV", A::Dst, "index"},
    {"TGETS", A::Dst, "index"},     {"TGETB", A::Dst, "index"},    {"TGETR", A::Dst, "index"},
    {"TSETV", A::Var, "newindex"},  {"TSETS", A::Var, "newindex"}, {"TSETB", A::Var, "newindex"},
    {"TSETM", A::Base, "newindex"}, {"TSETR", A::Var, "newindex"}, {"CALLM", A::Base, "call"},
    {"CALL", A::Base, "call"},      {"CALLMT", A::Base, "call"},   {"CALLT", A::Base, "call"},
    {"ITERC", A::Base, "call"},     {"ITERN", A::Base, "call"},    {"VARG", A::Base, nullptr},
    {"ISNEXT", A::Base, nullptr},   {"RETM", A::Base, nullptr},    {"RET", A::RBase, nullptr},
    {"RET0", A::RBase, nullptr},    {"RET1", A::RBase, nullptr},   {"FORI", A::Base, nullptr},
    {"JFORI", A::Base, nullptr},    {"FORL", A::Base, nullptr},    {"IFORL", A::Base, nullptr},
    {"JFORL", A::Base, nullptr},    {"ITERL", A::Base, nullptr},   {"IITERL", A::Base, nullptr},
    {"JITERL", A::Base, nullptr},   {"LOOP", A::RBase, nullptr},   {"ILOOP", A::RBase, nullptr},
    {"JLOOP", A::RBase, nullptr},   {"JMP", A::RBase, nullptr},    {"FUNCF", A::RBase, nullptr},
    {"IFUNCF", A::RBase, nullptr},  {"JFUNCF", A::RBase, nullptr}, {"FUNCV", A::RBase, nullptr},
    {"IFUNCV", A::RBase, nullptr},  {"JFUNCV", A::RBase, nullptr}, {"FUNCC", A::RBase, nullptr},
    {"FUNCCW", A::RBase, nullptr},
}};
constexpr uint32_t kMov = 18, kKnil = 44, kUget = 45, kGget = 54, kTgets = 57, kIterc = 69;

// Caps on what one name may cost to read: bytecode scanned backwards from the call (LuaJIT's
// own limit on a prototype is 2^26 instructions, far more than a call site needs), the debug
// info streams, and one name.
constexpr uint64_t kMaxScanInsns = 1u << 20;
constexpr uint32_t kMaxDebugInfoBytes = 1u << 20;
constexpr uint32_t kMaxNameBytes = 1024;

uint32_t bc_op(uint32_t ins) {
  return ins & 0xff;
}
uint32_t bc_a(uint32_t ins) {
  return (ins >> 8) & 0xff;
}
uint32_t bc_b(uint32_t ins) {
  return ins >> 24;
}
uint32_t bc_c(uint32_t ins) {
  return (ins >> 16) & 0xff;
}
uint32_t bc_d(uint32_t ins) {
  return ins >> 16;
}

// A forward reader over a debug info stream (lj_debug.c reads these byte by byte; their length
// is not stored), capped at kMaxDebugInfoBytes.
class DebugStream {
 public:
  DebugStream(const ljprof_mem_reader& mem, uint64_t addr, const char* what)
      : mem_(mem), addr_(addr), what_(what) {}
  Result<uint8_t> byte() {
    if (used_ >= kMaxDebugInfoBytes) {
      return make_error("{} at {:#x} runs past the {} byte cap", what_, addr_ - used_,
                        kMaxDebugInfoBytes);
    }
    uint8_t b = 0;
    if (mem_.read_mem(mem_.ctx, addr_, &b, 1) != 0) {
      return make_error("cannot read {} at {:#x}", what_, addr_);
    }
    ++addr_;
    ++used_;
    return b;
  }
  // lj_buf.c lj_buf_ruleb128: at most 5 bytes for a 32-bit value.
  Result<uint32_t> uleb128() {
    uint32_t v = 0;
    for (int shift = 0; shift < 35; shift += 7) {
      LJ_ASSIGN_OR_RETURN(uint8_t b, byte());
      v |= static_cast<uint32_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return v;
    }
    return make_error("{}: ULEB128 at {:#x} is longer than 5 bytes", what_, addr_);
  }
  // A NUL-terminated name whose first byte was already read.
  Result<std::string> rest_of_name(uint8_t first) {
    std::string s(1, static_cast<char>(first));
    for (;;) {
      LJ_ASSIGN_OR_RETURN(uint8_t b, byte());
      if (b == 0) return s;
      if (s.size() >= kMaxNameBytes) {
        return make_error("{}: name at {:#x} is longer than {} bytes", what_, addr_ - s.size(),
                          kMaxNameBytes);
      }
      s.push_back(static_cast<char>(b));
    }
  }

 private:
  const ljprof_mem_reader& mem_;
  uint64_t addr_;
  const char* what_;
  uint32_t used_ = 0;
};

struct Proto {
  uint64_t pt = 0;
  uint64_t bc = 0;  // first instruction (the FUNCF header)
  uint32_t sizebc = 0;
};

// lj_debug.c debug_varname: the local variable `slot` live at bytecode position `pos`, from
// the varinfo stream (name or VARNAME_* code, then ULEB128 start and length, relative to the
// previous start), or nullopt.
Result<std::optional<std::string>> local_name(const ljprof_mem_reader& mem,
                                              const lj_luajit_info& info, const Proto& p,
                                              uint64_t pos, uint32_t slot) {
  // lj_parse.c VARNAMEDEF: the internal variables, codes 1..6 (0 ends the stream).
  static const char* const kInternal[] = {nullptr,        "(for index)",     "(for limit)",
                                          "(for step)",   "(for generator)", "(for state)",
                                          "(for control)"};
  LJ_ASSIGN_OR_RETURN(uint64_t varinfo,
                      read_uint(mem, p.pt + info.pt_varinfo, info.ref_size, "GCproto.varinfo"));
  if (varinfo == 0) return std::optional<std::string>{};  // stripped (luajit -bs)
  DebugStream in(mem, varinfo, "GCproto varinfo");
  uint64_t lastpc = 0;
  for (;;) {
    LJ_ASSIGN_OR_RETURN(uint8_t vn, in.byte());
    std::string name;
    if (vn == 0) break;
    if (vn < std::size(kInternal)) {
      name = kInternal[vn];
    } else {
      LJ_ASSIGN_OR_RETURN(name, in.rest_of_name(vn));
    }
    LJ_ASSIGN_OR_RETURN(uint32_t start_delta, in.uleb128());
    const uint64_t startpc = lastpc + start_delta;
    lastpc = startpc;
    if (startpc > pos) break;
    LJ_ASSIGN_OR_RETURN(uint32_t length, in.uleb128());
    if (pos < startpc + length && slot-- == 0) return std::optional<std::string>{name};
  }
  return std::optional<std::string>{};
}

// lj_debug.c lj_debug_uvname: the idx-th name of the uvinfo stream ("" when stripped).
Result<std::string> upvalue_name(const ljprof_mem_reader& mem, const lj_luajit_info& info,
                                 const Proto& p, uint32_t idx) {
  LJ_ASSIGN_OR_RETURN(uint64_t uvinfo,
                      read_uint(mem, p.pt + info.pt_uvinfo, info.ref_size, "GCproto.uvinfo"));
  if (uvinfo == 0) return std::string();
  DebugStream in(mem, uvinfo, "GCproto uvinfo");
  for (;;) {
    LJ_ASSIGN_OR_RETURN(uint8_t b, in.byte());
    if (idx == 0) {
      if (b == 0) return std::string();
      return in.rest_of_name(b);
    }
    if (b == 0) --idx;
  }
}

// lj_obj.h proto_kgc(pt, ~d): the string constant d, counted down from k.
Result<std::string> string_constant(const ljprof_mem_reader& mem, const lj_luajit_info& info,
                                    const Proto& p, uint32_t d) {
  LJ_ASSIGN_OR_RETURN(uint64_t k, read_uint(mem, p.pt + info.pt_k, info.ref_size, "GCproto.k"));
  LJ_ASSIGN_OR_RETURN(uint64_t sizekgc,
                      read_uint(mem, p.pt + info.pt_sizekgc, 4, "GCproto.sizekgc"));
  if (d >= sizekgc) {
    return make_error("GC constant {} of the prototype at {:#x} is past its {} constants", d, p.pt,
                      sizekgc);
  }
  LJ_ASSIGN_OR_RETURN(uint64_t str, read_uint(mem, k - (uint64_t{d} + 1) * info.ref_size,
                                              info.ref_size, "GC constant"));
  // lj_obj.h GCHeader: the type byte follows nextgc and marked; a string is ~LJ_TSTR (= 4).
  LJ_ASSIGN_OR_RETURN(uint64_t gct, read_uint(mem, str + info.ref_size + 1, 1, "GCstr.gct"));
  if (gct != 4) {
    return make_error("GC constant {} of the prototype at {:#x} is not a string (gct {})", d, p.pt,
                      gct);
  }
  LJ_ASSIGN_OR_RETURN(uint64_t len, read_uint(mem, str + info.str_len, 4, "GCstr.len"));
  if (len > kMaxNameBytes) {
    return make_error("string constant at {:#x} is longer than {} bytes", str, kMaxNameBytes);
  }
  std::string s(len, '\0');
  if (len > 0 &&
      mem.read_mem(mem.ctx, str + info.str_data, s.data(), static_cast<uint32_t>(len)) != 0) {
    return make_error("cannot read the string constant at {:#x}", str + info.str_data);
  }
  return s;
}

}  // namespace

std::span<const BytecodeOp> luajit21_bytecodes() {
  return kOps;
}

Result<std::optional<CallSiteName>> call_site_name(const ljprof_mem_reader& mem,
                                                   const lj_luajit_info& info,
                                                   uint64_t caller_gcfunc, uint64_t caller_bcpc) {
  LJ_ASSIGN_OR_RETURN(uint64_t bc,
                      read_uint(mem, caller_gcfunc + info.fn_pc, info.ref_size, "GCfuncL.pc"));
  return call_site_name_in_proto(mem, info, bc - info.pt_size, caller_bcpc);
}

Result<std::optional<CallSiteName>> call_site_name_in_proto(const ljprof_mem_reader& mem,
                                                            const lj_luajit_info& info,
                                                            uint64_t caller_proto,
                                                            uint64_t caller_bcpc) {
  using Name = std::optional<CallSiteName>;
  Proto p;
  p.pt = caller_proto;
  p.bc = caller_proto + info.pt_size;
  LJ_ASSIGN_OR_RETURN(uint64_t sizebc, read_uint(mem, p.pt + info.pt_sizebc, 4, "GCproto.sizebc"));
  p.sizebc = static_cast<uint32_t>(sizebc);
  // lj_debug.c debug_framepc: the instruction before the return pc. A pc outside the bytecode
  // (unknown, or JLOOP's trace-exit pc) names nothing.
  if (caller_bcpc < p.bc + 4 || (caller_bcpc - p.bc) % 4 != 0) return Name{};
  uint64_t pos = (caller_bcpc - p.bc) / 4 - 1;
  if (pos >= p.sizebc) return Name{};
  if (pos > kMaxScanInsns) {
    return make_error(
        "call site at bytecode {} of the prototype at {:#x} is past the {} "
        "instruction scan cap",
        pos, p.pt, kMaxScanInsns);
  }
  std::vector<uint32_t> bc(pos + 1);
  if (mem.read_mem(mem.ctx, p.bc, bc.data(), static_cast<uint32_t>(bc.size() * 4)) != 0) {
    return make_error("cannot read {} bytecode instructions at {:#x}", bc.size(), p.bc);
  }
  auto op_of = [&](uint32_t ins) -> Result<const BytecodeOp*> {
    if (bc_op(ins) >= kOps.size()) {
      return make_error(
          "bytecode {:#010x} in the prototype at {:#x} has opcode {}, past the {} "
          "LuaJIT 2.1 opcodes",
          ins, p.pt, bc_op(ins), kOps.size());
    }
    return &kOps[bc_op(ins)];
  };
  const uint32_t call = bc[pos];
  LJ_ASSIGN_OR_RETURN(const BytecodeOp* op, op_of(call));
  if (op->metamethod == nullptr) return Name{};
  if (std::string_view(op->metamethod) != "call") {
    return Name{CallSiteName{"metamethod", std::string("__") + op->metamethod}};
  }
  uint32_t slot = bc_a(call);
  if (bc_op(call) == kIterc) slot -= 3;  // the iterator function sits 3 slots below A

  // lj_debug.c lj_debug_slotname: a named local, else the instruction that last wrote the slot.
  const uint32_t fr2 = info.gc64 ? 1 : 0;
  uint64_t at = pos;
  for (;;) {
    LJ_ASSIGN_OR_RETURN(std::optional<std::string> local, local_name(mem, info, p, at, slot));
    if (local) return Name{CallSiteName{"local", *local}};
    bool restart = false;
    while (!restart && --at > 0) {
      const uint32_t ins = bc[at];
      LJ_ASSIGN_OR_RETURN(const BytecodeOp* w, op_of(ins));
      const uint32_t ra = bc_a(ins);
      if (w->a == A::Base) {
        if (slot >= ra && (bc_op(ins) != kKnil || slot <= bc_d(ins))) return Name{};
      } else if (w->a == A::Dst && ra == slot) {
        switch (bc_op(ins)) {
          case kMov:
            slot = bc_d(ins);
            restart = true;
            break;
          case kGget: {
            LJ_ASSIGN_OR_RETURN(std::string name, string_constant(mem, info, p, bc_d(ins)));
            return Name{CallSiteName{"global", name}};
          }
          case kTgets: {
            LJ_ASSIGN_OR_RETURN(std::string name, string_constant(mem, info, p, bc_c(ins)));
            // `obj:name(...)`: MOV copies obj into the self slot right before TGETS (at >= 1
            // here, so the instruction before it exists).
            const uint32_t prev = bc[at - 1];
            const bool method =
                bc_op(prev) == kMov && bc_a(prev) == ra + 1 + fr2 && bc_d(prev) == bc_b(ins);
            return Name{CallSiteName{method ? "method" : "field", name}};
          }
          case kUget: {
            LJ_ASSIGN_OR_RETURN(std::string name, upvalue_name(mem, info, p, bc_d(ins)));
            return Name{CallSiteName{"upvalue", name}};
          }
          default:
            return Name{};
        }
      }
    }
    if (!restart) return Name{};
  }
}

}  // namespace ljprof::symbolize
