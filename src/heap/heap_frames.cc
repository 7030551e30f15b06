// name_stack_slot (heap/heap_graph_internal.h): which Lua frame of a thread holds a stack slot,
// and the local's name there. The frame chain is followed as lj_frame.h defines it (the link
// below each frame's base: the function, then FRAME_LUA's return pc or the delta of other
// frame types), the name found as lj_debug.c debug_varname finds it and the line as
// lj_debug_line. Only for naming paths: the one stack walker (bpf/walker) walks stacks for
// profiles and backtraces, and knows nothing of slots.
#include <fmt/format.h>

#include <cstring>

#include "common/printable.h"
#include "heap/heap_graph_internal.h"

namespace ljprof::heap {

namespace {

constexpr int kMaxFrameSteps = 4096;
constexpr uint64_t kVarinfoRead = 4096;  // varinfo is read in pieces of this size
constexpr uint64_t kMaxVarinfo = 1 << 20;
// lj_debug.h VARNAMEDEF: the internal names VARNAME_FOR_IDX .. VARNAME_FOR_CTL (1..6).
constexpr const char* kInternalNames[] = {"(for index)",     "(for limit)", "(for step)",
                                          "(for generator)", "(for state)", "(for control)"};

// A byte stream over target memory, read in pieces, bounded.
class Stream {
 public:
  Stream(const Memory& mem, uint64_t at) : mem_(mem), at_(at) {}
  std::optional<uint8_t> next() {
    if (pos_ >= kMaxVarinfo) return std::nullopt;
    if (pos_ - start_ >= buf_.size()) {
      start_ = pos_;
      buf_.clear();
      for (uint64_t n = kVarinfoRead; n >= 16 && buf_.empty(); n /= 4) {
        std::vector<uint8_t> b(n);
        if (mem_.read(at_ + pos_, b.data(), n)) buf_ = std::move(b);
      }
      if (buf_.empty()) return std::nullopt;
    }
    return buf_[pos_++ - start_];
  }
  std::optional<uint32_t> uleb128() {
    uint32_t v = 0;
    for (int shift = 0; shift < 35; shift += 7) {
      auto b = next();
      if (!b) return std::nullopt;
      v |= static_cast<uint32_t>(*b & 0x7f) << shift;
      if (!(*b & 0x80)) return v;
    }
    return std::nullopt;
  }

 private:
  const Memory& mem_;
  uint64_t at_;
  uint64_t pos_ = 0, start_ = 0;
  std::vector<uint8_t> buf_;
};

// lj_debug.c debug_varname: the name of the `slot`-th variable live at bytecode `pos`.
std::optional<std::string> varname(const Memory& mem, uint64_t pt, uint32_t pos, uint32_t slot) {
  auto info = mem.ref(pt + mem.info().pt_varinfo);
  if (!info || *info == 0) return std::nullopt;
  Stream s(mem, *info);
  uint32_t lastpc = 0;
  for (int vars = 0; vars < 65536; ++vars) {
    auto vn = s.next();
    if (!vn || *vn == 0) return std::nullopt;  // VARNAME_END
    std::string name;
    if (*vn > 6) {
      name.push_back(static_cast<char>(*vn));
      for (auto c = s.next(); c && *c != 0; c = s.next()) {
        if (name.size() < 256) name.push_back(static_cast<char>(*c));
      }
    } else {
      name = kInternalNames[*vn - 1];
    }
    auto start = s.uleb128();
    if (!start) return std::nullopt;
    lastpc += *start;
    if (lastpc > pos) return std::nullopt;
    auto len = s.uleb128();
    if (!len) return std::nullopt;
    if (pos < lastpc + *len && slot-- == 0) return name;
  }
  return std::nullopt;
}

// lj_debug.c lj_debug_line at bytecode `pos` (0: the first line).
uint32_t line_at(const Memory& mem, uint64_t pt, uint32_t pos) {
  const lj_luajit_info& in = mem.info();
  const uint32_t first = mem.get<uint32_t>(pt + in.pt_firstline).value_or(0);
  const uint32_t numline = mem.get<uint32_t>(pt + in.pt_numline).value_or(0);
  auto info = mem.ref(pt + in.pt_lineinfo);
  if (pos == 0 || !info || *info == 0) return first;
  const uint64_t i = pos - 1;
  if (numline < 256) return first + mem.get<uint8_t>(*info + i).value_or(0);
  if (numline < 65536) return first + mem.get<uint16_t>(*info + 2 * i).value_or(0);
  return first + mem.get<uint32_t>(*info + 4 * i).value_or(0);
}

}  // namespace

std::optional<SlotName> name_stack_slot(const Memory& mem, uint64_t L, uint64_t slot) {
  const lj_luajit_info& in = mem.info();
  const bool gc64 = mem.gc64();
  const uint64_t fr2 = gc64 ? 8 : 0;
  auto stack = mem.ref(L + in.L_stack);
  auto base = mem.get<uint64_t>(L + in.L_base);
  if (!stack || !base) return std::nullopt;
  const uint64_t at = *stack + 8 * slot;
  uint64_t link = *base - 8, pc = 0;  // pc: the frame's current pc (0: unknown)
  for (int step = 0; step < kMaxFrameSteps && link > *stack + fr2; ++step) {
    auto word = mem.get<uint64_t>(link);
    auto fword = gc64 ? mem.get<uint64_t>(link - 8) : word;
    if (!word || !fword) return std::nullopt;
    const uint64_t ftsz = gc64 ? *word : (*word >> 32);
    const uint64_t fn = gc64 ? (*fword & ((uint64_t{1} << 47) - 1)) : (*fword & 0xffffffffu);
    if (at >= link + 8) {
      // Slot `at` is in the frame whose base is link + 8: a Lua function's register.
      if (mem.get<uint8_t>(fn + in.fn_ffid).value_or(1) != 0) return std::nullopt;
      auto fpc = mem.ref(fn + in.fn_pc);
      if (!fpc) return std::nullopt;
      const uint64_t pt = *fpc - static_cast<uint64_t>(in.pt_size);
      const uint32_t reg = static_cast<uint32_t>((at - (link + 8)) / 8);
      SlotName out{fn, reg, {}, 0};
      if (pc > *fpc && (pc - *fpc) % 4 == 0) {
        const uint32_t pos = static_cast<uint32_t>((pc - *fpc) / 4 - 1);
        out.name = varname(mem, pt, pos, reg).value_or("");
        out.line = line_at(mem, pt, pos);
      }
      return out;
    }
    if ((ftsz & 3) == 0) {  // FRAME_LUA: the return pc into the caller; CALL's A is its base
      pc = gc64 ? ftsz : (ftsz & 0xffffffffu);
      auto ins = mem.get<uint32_t>(pc - 4);
      if (!ins) return std::nullopt;
      link -= 8 * (1 + (gc64 ? 1 : 0) + ((*ins >> 8) & 0xff));
    } else {
      // FRAME_C, CONT, VARG: a byte delta. A vararg frame sits on its own function's frame,
      // which keeps the pc; below any other, the caller's pc is not known here.
      if ((ftsz & 3) != 3) pc = 0;
      const uint64_t delta = ftsz & ~uint64_t{7};
      if (delta == 0 || delta > link) return std::nullopt;
      link -= delta;
    }
  }
  return std::nullopt;
}

}  // namespace ljprof::heap
