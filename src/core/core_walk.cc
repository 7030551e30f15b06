#include "core/core_walk.h"

#include <elf.h>

#include <algorithm>
#include <cstring>

#include "luajit/vm_cfi.h"
#include "symbolize/walk_frames.h"

extern "C" {
#include "abi/walk_types.h"
#include "walker/native_walk.h"
}

namespace ljprof::core {

namespace {

int lookup_callback(void* ctx, uint64_t pc, lj_cfi_row* row) {
  return static_cast<const CoreWalker*>(ctx)->lookup(pc, row);
}

}  // namespace

Result<std::unique_ptr<CoreWalker>> CoreWalker::create(const CoreFile& core,
                                                       cfi::TableCache* tables) {
  std::unique_ptr<CoreWalker> w(new CoreWalker(core));
  w->tables_ = tables;
  // Find the file that carries LuaJIT: executable first, then libraries.
  std::vector<uint32_t> order;
  for (uint32_t i = 0; i < core.files().size(); ++i) {
    if (core.files()[i].is_executable)
      order.insert(order.begin(), i);
    else
      order.push_back(i);
  }
  for (uint32_t i : order) {
    const MappedFile& f = core.files()[i];
    if (!f.usable()) continue;
    luajit::RuntimeInfo rt = luajit::detect_runtime(*f.elf, {}, f.path);
    if (rt.source != luajit::LuaJITSource::LinkedIn) continue;
    auto info = luajit::extract_proc_info(*f.elf, rt.runtime);
    auto walker_info = info.ok() ? luajit::to_walker_info(*info) : info.error();
    if (!walker_info.ok()) {
      w->luajit_error_ = walker_info.message();
      continue;
    }
    w->luajit_ = std::move(*info);
    w->luajit_file_ = f.path;
    w->luajit_error_.clear();
    w->info_ = *walker_info;
    w->luajit_file_index_ = i;
    w->tarantool_ = rt.runtime == luajit::Runtime::Tarantool;
    break;
  }
  w->load_vdso();
  if (w->luajit_file_index_) {
    auto bias = core.load_bias(*w->luajit_file_index_);
    if (bias.ok()) w->vm_bias_ = *bias;
    w->find_global_state();
  }
  return w;
}

// The vDSO is in the core's memory (the kernel and gcore dump it) but in no NT_FILE entry.
// Its image runs from the ELF header at AT_SYSINFO_EHDR to the end of its section headers,
// which the kernel's vDSO build places last; the rules then come from its own .eh_frame, as
// for any library, or from its proven leaf functions when it has none
// (cfi::build_vdso_unwind_table, shared with `record`). A core without AT_SYSINFO_EHDR, or whose
// bytes there are not a small ELF, simply has no vDSO module (pcs there stop the walk as "in no
// mapped file").
void CoreWalker::load_vdso() {
  constexpr uint64_t kMaxVdsoBytes = 1u << 20;
  std::optional<uint64_t> at = core_.auxv_value(AT_SYSINFO_EHDR);
  if (!at || *at == 0) return;
  auto mem = core_.mem_reader();
  Elf64_Ehdr eh{};
  if (mem.read_mem(mem.ctx, *at, &eh, sizeof eh) != 0) return;
  if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64) return;
  const uint64_t size = eh.e_shoff + uint64_t{eh.e_shnum} * eh.e_shentsize;
  if (eh.e_shoff == 0 || size <= sizeof eh || size > kMaxVdsoBytes) return;
  vdso_image_.resize(size);
  if (mem.read_mem(mem.ctx, *at, vdso_image_.data(), static_cast<uint32_t>(size)) != 0) return;
  auto elf = elf::ElfFile::from_memory(vdso_image_, "[vdso]");
  if (!elf.ok()) return;
  vdso_elf_ = std::move(*elf);
  Module mod;
  mod.path = "[vdso]";
  mod.elf = vdso_elf_.get();
  bool placed = false;
  for (const elf::Segment& seg : vdso_elf_->segments()) {
    if (seg.type == PT_LOAD && seg.offset == 0) {
      mod.bias = *at - seg.vaddr;
      placed = true;
      break;
    }
  }
  if (!placed) return;
  auto table = cfi::build_vdso_unwind_table(*vdso_elf_);
  if (table.ok()) {
    mod.table = std::move(*table);
  } else {
    mod.table_error = table.message();
  }
  vdso_start_ = *at;
  vdso_end_ = *at + size;
  vdso_ = std::move(mod);
}

void CoreWalker::find_global_state() {
  // Tarantool keeps its main lua_State in the exported `struct lua_State *tarantool_L`
  // (src/lua/init.c); L->glref is G. The walker re-proves G (G->cur_L->glref == G) before use,
  // so a stale or wrong anchor only means "no hint".
  const MappedFile& f = core_.files()[*luajit_file_index_];
  const elf::Symbol* anchor = f.elf->find_symbol("tarantool_L");
  if (anchor == nullptr) return;
  uint64_t L = 0, g = 0;
  auto mem = core_.mem_reader();
  if (mem.read_mem(mem.ctx, anchor->value + vm_bias_, &L, 8) != 0 || L == 0) return;
  if (mem.read_mem(mem.ctx, L + info_.L_glref, &g, info_.ref_size) != 0) return;
  g_hint_ = g;
}

const CoreWalker::Module* CoreWalker::module_at(uint64_t pc) const {
  if (vdso_ && pc >= vdso_start_ && pc < vdso_end_) return &*vdso_;
  const Mapping* m = core_.mapping_at(pc);
  if (m == nullptr) return nullptr;
  const MappedFile& f = core_.file_of(*m);
  if (!f.usable()) return nullptr;
  auto it = modules_.find(m->file_index);
  if (it == modules_.end()) {
    Module mod;
    mod.path = f.path;
    mod.elf = f.elf.get();
    auto bias = core_.load_bias(m->file_index);
    if (!bias.ok()) return nullptr;
    mod.bias = *bias;
    mod.lines = symbolize::SourceLines::open(*f.elf, mod.debug);
    auto table = luajit::walker_table(*f.elf, tables_);
    if (table.ok()) {
      mod.table = std::move(*table);
    } else {
      mod.table_error = table.message();
    }
    it = modules_.emplace(m->file_index, std::move(mod)).first;
  }
  return &it->second;
}

int CoreWalker::lookup(uint64_t pc, lj_cfi_row* row) const {
  const Module* mod = module_at(pc);
  if (mod == nullptr || !mod->table) return 1;
  const lj_cfi_row* hit = mod->table->row_at(pc - mod->bias);
  if (hit == nullptr) return 1;
  *row = *hit;
  return 0;
}

void CoreWalker::symbolize_native(symbolize::Frame& frame, bool exact_pc) const {
  const Module* mod = module_at(frame.pc);
  if (mod == nullptr) return;
  frame.module = mod->path;
  frame.module_offset = frame.pc - mod->bias;
  // A return address points after the call: symbolize the call instruction's last byte, so a
  // call at the end of a function is not attributed to the next one.
  const uint64_t back = exact_pc ? 0 : 1;
  symbolize::NativeSymbol sym =
      symbolize::code_symbol(*mod->elf, mod->debug, mod->table ? &*mod->table : nullptr, mod->path,
                             frame.module_offset - back);
  frame.symbol = sym.name;
  frame.symbol_offset = sym.name.empty() ? 0 : sym.offset + back;
  if (mod->lines) frame.source = mod->lines->at(frame.module_offset - back);
}

bool CoreWalker::in_ffi_call_trampoline(const symbolize::Frame& frame) const {
  if (frame.kind != symbolize::FrameKind::Native || !luajit_ || frame.module != luajit_file_)
    return false;
  const Module* mod = module_at(frame.pc);
  if (mod == nullptr || !mod->table) return false;
  return luajit::is_ffi_call_return(*mod->table, luajit_->vm, frame.module_offset);
}

// A core file's memory and modules, for the shared walk-to-frames converter. A core does not
// change, so nothing read here needs validating or caching.
class CoreFrameSource final : public symbolize::FrameSource {
 public:
  CoreFrameSource(const CoreWalker& walker, const lj_walk_env& env) : w_(walker), env_(env) {}
  void symbolize_native(symbolize::Frame& frame, bool exact_pc) override {
    w_.symbolize_native(frame, exact_pc);
  }
  bool in_ffi_call_trampoline(const symbolize::Frame& frame) override {
    return w_.in_ffi_call_trampoline(frame);
  }
  Result<symbolize::LuaLocation> lua_location(size_t, const symbolize::WalkedFrame& f) override {
    return symbolize::lua_location(env_.mem, w_.info_, f.pc, f.b);
  }
  Result<std::optional<symbolize::CallSiteName>> call_site_name(
      size_t, const symbolize::WalkedFrame& caller) override {
    return symbolize::call_site_name(env_.mem, w_.info_, caller.pc, caller.b);
  }
  Result<symbolize::TraceInfo> trace_info(size_t, const symbolize::WalkedFrame& f) override {
    return symbolize::trace_info(env_.mem, w_.info_, f.b);
  }
  Result<symbolize::JitLuaFrames> jit_frames(size_t, const symbolize::Frame& trace, uint64_t pc,
                                             const symbolize::Frame& base) override {
    LJ_ASSIGN_OR_RETURN(symbolize::TraceSnapshots snaps,
                        symbolize::read_trace_snapshots(env_.mem, w_.info_, trace.gctrace));
    return symbolize::jit_lua_frames(env_.mem, w_.info_, snaps, pc, base.gcfunc, base.lua->proto);
  }
  std::string no_luajit_reason() const override { return w_.luajit_error_; }

 private:
  const CoreWalker& w_;
  const lj_walk_env& env_;
};

// Symbolizes a walk's frames into `out` (the same for thread stacks and Lua-only walks).
void CoreWalker::add_frames(const lj_walk_result& result, const lj_walk_env& env,
                            ThreadStack& out) const {
  std::vector<symbolize::WalkedFrame> walk;
  const uint32_t n = std::min<uint32_t>(result.nframes, LJ_WALK_MAX_FRAMES);
  walk.reserve(n);
  for (uint32_t i = 0; i < n; ++i) {
    const lj_walk_frame& wf = result.frames[i];
    walk.push_back({wf.kind, wf.pc, wf.b, wf.lua_state});
  }
  CoreFrameSource source(*this, env);
  out.frames = symbolize::frames_of_walk(walk, {result.end, result.end_pc}, source);
  out.reached_root = result.end == LJ_END_ROOT;
  out.g = result.g;
  out.end = symbolize::walk_end_name(result.end);
}

lj_walk_env CoreWalker::walk_env() const {
  lj_walk_env env{};
  env.mem = core_.mem_reader();
  env.lookup = &lookup_callback;
  env.lookup_ctx = const_cast<CoreWalker*>(this);
  return env;
}

ThreadStack CoreWalker::walk(const Thread& thread) const {
  ThreadStack out;
  out.tid = thread.tid;
  out.signal = thread.signal;
  lj_walk_env env = walk_env();
  lj_native_regs regs{};
  regs.pc = thread.pc;
  regs.sp = thread.sp;
  regs.fp = thread.fp;
  regs.lr = thread.lr;
  regs.lr_valid = thread.arch == elf::Arch::AArch64 ? 1 : 0;
  regs.fp_valid = 1;
  // The interpreter's BASE and PC registers (vm_x64.dasc: BASE edx/rdx, PC ebx/rbx;
  // vm_arm64.dasc: BASE x19, PC x21); the walker uses them only if the leaf pc is in the VM.
  const bool a64 = thread.arch == elf::Arch::AArch64;
  regs.vm_base = thread.reg(a64 ? "x19" : "rdx").value_or(0);
  regs.vm_pc = thread.reg(a64 ? "x21" : "rbx").value_or(0);
  // x86-64: the leaf's rbx, for a CFA kept there (cfi_row.h LJ_CFI_REG_BX).
  regs.bx_valid = !a64 && thread.reg("rbx").has_value() ? 1 : 0;
  if (luajit_) {
    // DWARF register numbers of the DISPATCH/GL register (luajit_info.h dispatch_reg).
    static const char* const kX86Dwarf[16] = {"rax", "rdx", "rcx", "rbx", "rsi", "rdi",
                                              "rbp", "rsp", "r8",  "r9",  "r10", "r11",
                                              "r12", "r13", "r14", "r15"};
    const uint8_t n = info_.dispatch_reg;
    std::optional<uint64_t> value;
    if (a64 && n < 31) value = thread.reg(fmt::format("x{}", n));
    if (!a64 && n < 16) value = thread.reg(kX86Dwarf[n]);
    if (value) {
      regs.dispatch = *value;
      regs.dispatch_valid = 1;
    }
  }
  auto result = std::make_unique<lj_walk_result>();
  lj_walk_native(&env, luajit_ ? &info_ : nullptr, &regs, g_hint_, vm_bias_, result.get());

  add_frames(*result, env, out);
  return out;
}

ThreadStack CoreWalker::walk_lua_state(uint64_t lua_state) const {
  ThreadStack out;
  if (!luajit_) {
    out.end = "no LuaJIT layout";
    return out;
  }
  lj_walk_env env = walk_env();
  auto result = std::make_unique<lj_walk_result>();
  lj_walk_native_lua_state(&env, &info_, lua_state, result.get());
  add_frames(*result, env, out);
  return out;
}

std::optional<proc::MemoryRange> CoreWalker::lua_stack_range(uint64_t lua_state) const {
  if (!luajit_ || lua_state == 0) return std::nullopt;
  // From the lowest of the three fields to the end of the highest (lj_obj.h lua_State: base,
  // top, ..., stack lie within 64 bytes of each other in every layout).
  const uint32_t lo = std::min({info_.L_base, info_.L_top, info_.L_stack});
  const uint32_t hi = std::max({info_.L_base + 8u, info_.L_top + 8u, info_.L_stack + 8u});
  return proc::MemoryRange{lua_state + lo, hi - lo};
}

uint64_t CoreWalker::lua_stack_stamp(uint64_t lua_state) const {
  const std::optional<proc::MemoryRange> range = lua_stack_range(lua_state);
  if (!range) return 0;
  const ljprof_mem_reader mem = core_.mem_reader();
  const uint32_t lo = static_cast<uint32_t>(range->addr - lua_state);
  uint8_t bytes[128] = {};
  if (range->len > sizeof bytes || mem.read_mem(mem.ctx, range->addr, bytes, range->len) != 0) {
    return 0;
  }
  uint64_t base = 0, top = 0, stack = 0;
  std::memcpy(&base, bytes + (info_.L_base - lo), 8);
  std::memcpy(&top, bytes + (info_.L_top - lo), 8);
  std::memcpy(&stack, bytes + (info_.L_stack - lo), info_.ref_size);
  return (base * 0x9E3779B97F4A7C15ull) ^ (top * 0xC2B2AE3D27D4EB4Full) ^ stack;
}

Result<CoroutineList> CoreWalker::walk_coroutines(uint64_t g) const {
  // A GC list holds every object but strings; a heap of 16M objects is a big one.
  constexpr uint64_t kMaxObjects = 1u << 24;
  constexpr uint8_t kThreadGct = 6;  // lj_obj.h LJ_TTHREAD is ~6u; GCHeader.gct holds ~itype
  if (!luajit_) return make_error("no LuaJIT layout for this core: {}", luajit_error_);
  const luajit::Field* root_field = luajit_->field(luajit::field::kGGcRoot);
  const luajit::Field* status_field = luajit_->field(luajit::field::kLStatus);
  if (root_field == nullptr || status_field == nullptr) {
    return make_error(
        "{}: global_State.gc.root was not found in the code (lj_mem_newgco via "
        "lua_newthread), so the GC list cannot be walked",
        luajit_file_);
  }
  if (g == 0) return make_error("no global_State was proven from any thread's stack");
  lj_walk_env env = walk_env();
  const uint32_t ref = info_.ref_size;
  auto read_ref = [&](uint64_t addr, uint64_t* v) {
    *v = 0;
    return env.mem.read_mem(env.mem.ctx, addr, v, ref) == 0;
  };
  uint64_t cur_L = 0, obj = 0;
  if (!read_ref(g + info_.g_cur_L, &cur_L)) {
    return make_error("cannot read G->cur_L at {:#x}", g + info_.g_cur_L);
  }
  if (!read_ref(g + static_cast<uint64_t>(root_field->value), &obj)) {
    return make_error("cannot read G->gc.root at {:#x}", g + root_field->value);
  }
  CoroutineList list;
  auto result = std::make_unique<lj_walk_result>();
  for (; obj != 0; ++list.objects) {
    if (list.objects >= kMaxObjects) {
      return make_error("the GC list of G {:#x} is longer than {} objects (cap)", g, kMaxObjects);
    }
    uint8_t gct = 0;
    if (env.mem.read_mem(env.mem.ctx, obj + ref + 1, &gct, 1) != 0) {
      return make_error("GC object {:#x} (number {} on the list) is unreadable", obj, list.objects);
    }
    if (gct == kThreadGct && obj != cur_L) {
      // lib_base.c lj_cf_coroutine_status, in its order.
      uint8_t status = 0;
      uint64_t base = 0, top = 0, stack = 0;
      if (env.mem.read_mem(env.mem.ctx, obj + status_field->value, &status, 1) != 0 ||
          env.mem.read_mem(env.mem.ctx, obj + info_.L_base, &base, 8) != 0 ||
          env.mem.read_mem(env.mem.ctx, obj + info_.L_top, &top, 8) != 0 ||
          !read_ref(obj + info_.L_stack, &stack)) {
        return make_error("lua_State {:#x} on the GC list is unreadable", obj);
      }
      const uint64_t first_base = stack + 8 * (1 + (info_.gc64 ? 1 : 0));
      std::string what;
      if (status == 1) {  // LUA_YIELD
        what = "suspended";
      } else if (status != 0) {
        ++list.dead;
      } else if (base > first_base) {
        what = "normal";
      } else if (top == base) {
        ++list.dead;
      } else {
        ++list.not_started;
      }
      if (!what.empty()) {
        lj_walk_native_lua_state(&env, &info_, obj, result.get());
        CoroutineStack co;
        co.lua_state = obj;
        co.status = what;
        add_frames(*result, env, co.stack);
        list.coroutines.push_back(std::move(co));
      }
    }
    if (!read_ref(obj, &obj)) {
      return make_error("GCHeader.nextgc of object number {} is unreadable", list.objects);
    }
  }
  return list;
}

}  // namespace ljprof::core
