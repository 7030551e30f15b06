#include "luajit/live_verify.h"

#include <elf.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "proc/proc_maps.h"

namespace ljprof::luajit {

namespace {

constexpr uint64_t kGcMask47 = (uint64_t{1} << 47) - 1;  // lj_obj.h LJ_GCVMASK (GC64)
constexpr uint32_t kMaxChunkName = 4096;

// abi/read_mem.h's contract: 0 when every byte was read.
bool read_bytes(const ljprof_mem_reader& mem, uint64_t addr, void* out, uint32_t len) {
  return mem.read_mem(mem.ctx, addr, out, len) == 0;
}

bool read_ref(const ljprof_mem_reader& mem, uint64_t addr, uint8_t size, uint64_t* out) {
  if (size == 8) return read_bytes(mem, addr, out, 8);
  uint32_t v = 0;
  if (!read_bytes(mem, addr, &v, 4)) return false;
  *out = v;
  return true;
}

struct LuaFrame {
  uint64_t base = 0;
  uint64_t fn = 0;
  uint64_t proto = 0;
  std::string chunkname;
};

// The Lua function whose frame starts at `base` (lj_frame.h: the function slot is base-1,
// or base-2 with LJ_FR2), and its chunk name read at the extracted GCstr layout.
std::optional<LuaFrame> lua_frame_at(const LuaJITProcInfo& info, uint64_t base,
                                     const ljprof_mem_reader& mem, std::string* why) {
  LuaFrame f;
  f.base = base;
  if (info.gc64) {
    uint64_t tv = 0;
    if (!read_bytes(mem, base - 16, &tv, 8)) return *why = "frame slot unreadable", std::nullopt;
    f.fn = tv & kGcMask47;
  } else {
    uint32_t ref = 0;
    if (!read_bytes(mem, base - 8, &ref, 4)) return *why = "frame slot unreadable", std::nullopt;
    f.fn = ref;
  }
  uint8_t ffid = 0xff;
  if (f.fn == 0 || !read_bytes(mem, f.fn + info.value(field::kFnFfid), &ffid, 1)) {
    return *why = fmt::format("no function object at {:#x}", f.fn), std::nullopt;
  }
  if (ffid != 0)
    return *why = fmt::format("function {:#x} is not a Lua function", f.fn), std::nullopt;
  uint64_t pc = 0;
  if (!read_ref(mem, f.fn + info.value(field::kFnPc), info.ref_size, &pc) || pc == 0) {
    return *why = "GCfunc.pc unreadable", std::nullopt;
  }
  f.proto = pc - info.value(field::kPtSize);
  uint64_t name = 0;
  if (!read_ref(mem, f.proto + info.value(field::kPtChunkname), info.ref_size, &name) ||
      name == 0) {
    return *why = "GCproto.chunkname unreadable", std::nullopt;
  }
  uint32_t len = 0;
  if (!read_bytes(mem, name + info.value(field::kStrLen), &len, 4) || len == 0 ||
      len > kMaxChunkName) {
    return *why = fmt::format("GCstr {:#x} has an implausible length {}", name, len), std::nullopt;
  }
  std::string bytes(len + 1, '\0');
  if (!read_bytes(mem, name + info.value(field::kStrData), bytes.data(), len + 1)) {
    return *why = "GCstr data unreadable", std::nullopt;
  }
  if (bytes[len] != '\0') {
    return *why = fmt::format("GCstr {:#x} at +{} is not NUL-terminated at its length {}", name,
                              info.value(field::kStrData), len),
           std::nullopt;
  }
  bytes.resize(len);
  for (char ch : bytes) {
    if (static_cast<unsigned char>(ch) < 0x20 && ch != '\n' && ch != '\t') {
      return *why = "chunk name has control characters", std::nullopt;
    }
  }
  f.chunkname = bytes;
  return f;
}

// The nearest Lua frame at or below `base`: a C or fast function's frame (e.g. the FFI
// __call metamethod) is stepped over through its frame link (lj_frame.h frame_prevl for a
// FRAME_LUA link: base - (1 + LJ_FR2 + bc_a(pc[-1])) slots; frame_prevd otherwise:
// base - (ftsz & ~7) bytes).
std::optional<LuaFrame> lua_frame_at_or_below(const LuaJITProcInfo& info, uint64_t base,
                                              uint64_t stack, const ljprof_mem_reader& mem,
                                              std::string* why) {
  constexpr int kMaxSteps = 16;
  const uint64_t fr2 = info.gc64 ? 1 : 0;
  std::string first_why;
  for (int step = 0; step < kMaxSteps && base > stack + 8 * (1 + fr2); ++step) {
    std::string w;
    if (auto f = lua_frame_at(info, base, mem, &w)) return f;
    if (first_why.empty()) first_why = w;
    uint64_t ftsz = 0;
    if (!read_ref(mem, base - (info.gc64 ? 8 : 4), info.ref_size, &ftsz)) break;
    uint64_t next = 0;
    if ((ftsz & 3) == 0) {  // FRAME_LUA: ftsz is the return PC
      uint8_t a = 0;
      if (ftsz < 4 || !read_bytes(mem, ftsz - 4 + 1, &a, 1)) break;
      next = base - 8 * (1 + fr2 + a);
    } else {
      next = base - (ftsz & ~uint64_t{7});
    }
    if (next >= base) break;
    base = next;
  }
  *why = first_why.empty() ? "no Lua frame on the stack" : first_why + ", and no Lua frame below";
  return std::nullopt;
}

struct Regs {
  uint64_t pc = 0;
  uint64_t gpr[33] = {};  // canonical register numbers (disasm.h)
};

Result<Regs> read_regs(pid_t pid) {
  Regs r;
#if defined(__x86_64__)
  user_regs_struct u{};
  iovec io{&u, sizeof(u)};
  if (ptrace(PTRACE_GETREGSET, pid, NT_PRSTATUS, &io) != 0) {
    return make_error("pid {}: PTRACE_GETREGSET: {}", pid, std::strerror(errno));
  }
  const uint64_t by_canonical[17] = {u.rax, u.rcx, u.rdx, u.rbx, u.rsp, u.rbp, u.rsi, u.rdi, u.r8,
                                     u.r9,  u.r10, u.r11, u.r12, u.r13, u.r14, u.r15, u.rip};
  std::memcpy(r.gpr, by_canonical, sizeof(by_canonical));
  r.pc = u.rip;
#elif defined(__aarch64__)
  user_regs_struct u{};
  iovec io{&u, sizeof(u)};
  if (ptrace(PTRACE_GETREGSET, pid, NT_PRSTATUS, &io) != 0) {
    return make_error("pid {}: PTRACE_GETREGSET: {}", pid, std::strerror(errno));
  }
  for (int i = 0; i < 31; ++i) r.gpr[i] = u.regs[i];
  r.gpr[32] = u.sp;
  r.pc = u.pc;
#else
  (void)pid;
  return make_error("--verify-live supports x86-64 and AArch64 hosts only");
#endif
  return r;
}

// One brief stop: seize, interrupt, wait for the stop, run `body`, detach (re-injecting a
// signal that arrived meanwhile).
template <typename Body>
Status with_stopped(pid_t pid, Body&& body) {
  if (ptrace(PTRACE_SEIZE, pid, nullptr, nullptr) != 0) {
    return make_error("pid {}: PTRACE_SEIZE: {}", pid, std::strerror(errno));
  }
  int sig = 0;
  Status result = Ok{};
  if (ptrace(PTRACE_INTERRUPT, pid, nullptr, nullptr) != 0) {
    result = make_error("pid {}: PTRACE_INTERRUPT: {}", pid, std::strerror(errno));
  } else {
    int status = 0;
    if (waitpid(pid, &status, __WALL) != pid) {
      result = make_error("pid {}: waitpid: {}", pid, std::strerror(errno));
    } else if (!WIFSTOPPED(status)) {
      result = make_error("pid {}: did not stop (status {:#x})", pid, status);
    } else {
      if ((status >> 16) != PTRACE_EVENT_STOP) sig = WSTOPSIG(status);
      result = body();
    }
  }
  ptrace(PTRACE_DETACH, pid, nullptr, reinterpret_cast<void*>(static_cast<intptr_t>(sig)));
  return result;
}

}  // namespace

bool LiveReport::all_pass() const {
  if (checks.empty()) return false;
  for (const VmCheck& c : checks)
    if (!c.pass) return false;
  return true;
}

std::vector<VmCheck> check_vm_state(const LuaJITProcInfo& info, uint64_t bias,
                                    const VmSnapshot& snap, const ljprof_mem_reader& mem) {
  std::vector<VmCheck> out;
  auto add = [&](std::string name, bool pass, std::string detail) {
    out.push_back(VmCheck{std::move(name), pass, std::move(detail)});
  };
  const uint64_t g = snap.g;
  const uint8_t rs = info.ref_size;

  uint64_t L = 0, glref = 0;
  const bool l_ok = read_ref(mem, g + info.value(field::kGCurL), rs, &L) && L != 0 &&
                    read_ref(mem, L + info.value(field::kLGlref), rs, &glref);
  add("G->cur_L is a lua_State whose glref is G", l_ok && glref == g,
      fmt::format("G={:#x} cur_L={:#x} L->glref={:#x}", g, L, glref));

  uint64_t stack = 0, base = 0, top = 0, maxstack = 0;
  const bool s_ok = l_ok && read_ref(mem, L + info.value(field::kLStack), rs, &stack) &&
                    read_bytes(mem, L + info.value(field::kLBase), &base, 8) &&
                    read_bytes(mem, L + info.value(field::kLTop), &top, 8) &&
                    read_ref(mem, L + info.value(field::kLMaxstack), rs, &maxstack);
  add("L->stack <= L->base <= L->top <= L->maxstack",
      s_ok && stack != 0 && stack <= base && base <= top && top <= maxstack,
      fmt::format("stack={:#x} base={:#x} top={:#x} maxstack={:#x}", stack, base, top, maxstack));

  uint64_t jit_base = 0;
  const bool jb_read = read_ref(mem, g + info.value(field::kGJitBase), rs, &jit_base);
  add("jit_base is 0 or inside L->stack",
      jb_read && s_ok && (jit_base == 0 || (jit_base >= stack && jit_base <= maxstack)),
      fmt::format("jit_base={:#x}", jit_base));

  int32_t vmstate = 0;
  const bool v_read = read_bytes(mem, g + info.value(field::kGVmstate), &vmstate, 4);
  // ~ASM is the lowest state: three after EXIT (RECORD, OPT, ASM) in both numberings.
  const int64_t lowest = info.value(field::kVmstExit) - 3;
  add("vmstate is a VM state or a trace number",
      v_read && ((vmstate >= lowest && vmstate <= -1) || (vmstate >= 0 && vmstate <= 0xffff)),
      fmt::format("vmstate={} (states {}..-1, traces >= 0)", vmstate, lowest));

  uint64_t handler = 0;
  const bool d_read = read_bytes(mem, g + info.value(field::kGDispatch), &handler, 8);
  add("dispatch[0] (G + G->dispatch distance) is a VM handler",
      d_read && handler >= info.vm.begin + bias && handler < info.vm.end + bias,
      fmt::format("dispatch[0]={:#x}, VM [{:#x}, {:#x})", handler, info.vm.begin + bias,
                  info.vm.end + bias));

  std::string why = "no BASE candidate";
  std::optional<LuaFrame> frame;
  std::vector<uint64_t> bases;
  if (snap.base_register) bases.push_back(*snap.base_register);
  if (s_ok) bases.push_back(base);
  for (uint64_t b : bases) {
    if (!s_ok || b < stack || b > maxstack) {
      why = fmt::format("BASE {:#x} outside L->stack", b);
      continue;
    }
    frame = lua_frame_at_or_below(info, b, stack, mem, &why);
    if (frame) break;
  }
  add("chunk name reads as a GCstr at the extracted header size", frame.has_value(),
      frame ? fmt::format("BASE={:#x} function={:#x} chunkname=\"{}\"", frame->base, frame->fn,
                          frame->chunkname)
            : why);
  return out;
}

Result<LiveReport> verify_live(pid_t pid, unsigned max_attempts) {
  LiveReport report;
  report.pid = pid;
  std::error_code ec;
  const std::string exe = std::filesystem::read_symlink(fmt::format("/proc/{}/exe", pid), ec);
  if (ec) return make_error("pid {}: cannot read /proc/{}/exe: {}", pid, pid, ec.message());
  LJ_ASSIGN_OR_RETURN(std::vector<proc::MapEntry> maps,
                      proc::read_proc_maps(static_cast<uint32_t>(pid)));
  std::vector<std::string> candidates = {exe};
  for (const proc::MapEntry& m : maps) {
    const std::string base = std::filesystem::path(m.path).filename().string();
    if (base.rfind("libluajit", 0) == 0 &&
        std::find(candidates.begin(), candidates.end(), m.path) == candidates.end()) {
      candidates.push_back(m.path);
    }
  }
  std::unique_ptr<elf::ElfFile> module;
  for (const std::string& path : candidates) {
    auto f = elf::ElfFile::open(path);
    if (f.ok() && (*f)->find_symbol("lua_close") != nullptr) {
      module = std::move(*f);
      report.module = path;
      break;
    }
  }
  if (!module) {
    return make_error("pid {}: neither {} nor a mapped libluajit defines lua_close", pid, exe);
  }
  auto info = extract_proc_info(*module);
  if (!info.ok()) return info.error();
  LJ_ASSIGN_OR_RETURN(uint64_t vm_file_off, module->file_offset(info->vm.begin));
  bool mapped = false;
  for (const proc::MapEntry& m : maps) {
    if (m.path == report.module && m.offset <= vm_file_off &&
        vm_file_off < m.offset + (m.end - m.start)) {
      report.bias = m.start + (vm_file_off - m.offset) - info->vm.begin;
      mapped = true;
      break;
    }
  }
  if (!mapped) {
    return make_error("pid {}: no mapping of {} covers the VM at file offset {:#x}", pid,
                      report.module, vm_file_off);
  }
  LJ_ASSIGN_OR_RETURN(std::unique_ptr<proc::ProcessMemory> process,
                      proc::ProcessMemory::open(static_cast<uint32_t>(pid)));
  const ljprof_mem_reader mem = process->reader();
  const int base_reg = info->arch == elf::Arch::X86_64 ? 2 : 19;  // vm_*.dasc BASE: rdx / x19
  bool in_vm_seen = false;
  for (unsigned attempt = 1; attempt <= max_attempts; ++attempt) {
    report.attempts = attempt;
    bool accepted = false;
    Status st = with_stopped(pid, [&]() -> Status {
      LJ_ASSIGN_OR_RETURN(Regs regs, read_regs(pid));
      if (regs.pc < info->vm.begin + report.bias || regs.pc >= info->vm.end + report.bias) {
        return Ok{};
      }
      in_vm_seen = true;
      VmSnapshot snap;
      snap.pc = regs.pc;
      const uint64_t reg = regs.gpr[info->dispatch_reg];
      // Non-GC64 x86-64 keeps DISPATCH in a 32-bit register (vm_x86.dasc r14d).
      const uint64_t d = info->ref_size == 4 ? (reg & 0xffffffffu) : reg;
      snap.g = info->dispatch_is_g ? d : d - info->value(field::kGDispatch);
      snap.base_register =
          info->ref_size == 4 ? (regs.gpr[base_reg] & 0xffffffffu) : regs.gpr[base_reg];
      report.snapshot = snap;
      report.checks = check_vm_state(*info, report.bias, snap, mem);
      accepted = report.checks.back().pass || attempt == max_attempts;
      return Ok{};
    });
    if (!st.ok()) return st.error();
    if (accepted) break;
    usleep(2000);
  }
  if (!in_vm_seen) {
    return make_error(
        "pid {}: {} stops, none inside the VM interval [{:#x}, {:#x}) (is the "
        "process running Lua code in the interpreter?)",
        pid, report.attempts, info->vm.begin + report.bias, info->vm.end + report.bias);
  }
  return report;
}

}  // namespace ljprof::luajit
