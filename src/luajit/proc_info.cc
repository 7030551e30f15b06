#include "luajit/proc_info.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <climits>

namespace ljprof::luajit {

namespace {

std::string vm_label(const VmInterval& vm) {
  return fmt::format("VM interval [{:#x}, {:#x})", vm.begin, vm.end);
}

// The evidence items whose role starts with one of `roles` (a matcher proves several fields;
// each field shows the instructions that prove it).
std::vector<Evidence> pick(const std::vector<Evidence>& all,
                           std::initializer_list<std::string_view> roles) {
  std::vector<Evidence> out;
  for (const Evidence& e : all) {
    for (std::string_view r : roles) {
      if (std::string_view(e.role).substr(0, r.size()) == r) {
        out.push_back(e);
        break;
      }
    }
  }
  return out;
}

Field make_field(FieldId id, int64_t value, std::string source,
                 std::vector<Evidence> evidence = {}) {
  return Field{id, std::string(field_name(id)), value, std::move(source), std::move(evidence), {}};
}

Result<Field> add_offset(FieldId id, int64_t dispatch_relative, const DispatchSetupMatch& setup,
                         std::string source, std::vector<Evidence> evidence) {
  int64_t g_rel =
      setup.register_is_g ? dispatch_relative : setup.dispatch_distance + dispatch_relative;
  if (g_rel <= 0 || g_rel >= setup.dispatch_distance) {
    return make_error("{} at G{:+#x} is outside global_State..dispatch (0, {:#x})", field_name(id),
                      g_rel, setup.dispatch_distance);
  }
  return make_field(id, g_rel, std::move(source), std::move(evidence));
}

// global_State.gc.root, from the lj_mem_newgco that lua_newthread allocates its lua_State
// with: called directly where lj_state_new is inlined (Debian's luajit), one call deeper
// through lj_state_new (Tarantool). At most 8 functions, 2 calls deep.
std::optional<GcRootMatch> find_gc_root(const elf::ElfFile& file, uint8_t ref_width) {
  auto entry = decode_symbol(file, "lua_newthread");
  if (!entry.ok()) return std::nullopt;
  std::vector<DecodedFunction> todo;
  todo.push_back(std::move(*entry));
  for (size_t i = 0; i < todo.size() && i < 8; ++i) {
    auto m = match_gc_root(todo[i].code(), ref_width);
    if (m.ok()) return std::move(*m);
    if (i >= 3) continue;  // callees of lua_newthread and of its first callees only
    std::vector<uint64_t> targets;
    for (const Insn& insn : todo[i].insns) {
      if (insn.kind == InsnKind::CallDirect && insn.ops[0].kind == Operand::Kind::Imm)
        targets.push_back(static_cast<uint64_t>(insn.ops[0].imm));
    }
    for (uint64_t target : targets) {
      if (todo.size() >= 8) break;
      auto callee = disasm::disassemble_range(file, target, 256);
      if (!callee.ok()) callee = disasm::disassemble_range(file, target, 64);
      if (!callee.ok()) continue;
      DecodedFunction f;
      f.arch = file.arch();
      f.name = fmt::format("{:#x} (called from {})", target, todo[i].name);
      f.insns = std::move(*callee);
      todo.push_back(std::move(f));
    }
  }
  return std::nullopt;
}

// jit_checktrace (inlined in lj_cf_jit_util_traceinfo) reads the J->trace array that BC_JLOOP
// gave `jtrace` through G: an agreeing value adds its evidence, a disagreeing one is an error.
// The function is optional evidence (stripped builds lack the symbol, and compilers shape it
// differently): when it is absent or its pattern does not match, BC_JLOOP's value stands and
// the field says why it was not cross-checked.
Status cross_check_trace_array(const elf::ElfFile& file, int64_t glref_offset, uint8_t ref_width,
                               Field& jtrace) {
  constexpr const char* kName = "lj_cf_jit_util_traceinfo";
  if (file.find_symbol(kName) == nullptr) {
    jtrace.not_cross_checked = fmt::format("no {} symbol", kName);
    return Ok{};
  }
  auto ti = decode_symbol(file, kName);
  if (!ti.ok()) {
    jtrace.not_cross_checked = ti.message();
    return Ok{};
  }
  auto check = match_traceinfo(ti->code(), glref_offset, ref_width);
  if (!check.ok()) {
    jtrace.not_cross_checked = check.message();
    return Ok{};
  }
  if (check->trace_array != jtrace.value) {
    return make_error("BC_JLOOP reads G{:+#x}, jit_checktrace in {} reads G{:+#x}", jtrace.value,
                      kName, check->trace_array);
  }
  jtrace.source += std::string(" + ") + kName;
  for (const Evidence& e : check->evidence) jtrace.evidence.push_back(e);
  return Ok{};
}

// The RULE fields from their layout rule for the build's GC64 mode, and the CODE fields that
// have a rule checked against it: a disagreement means the build's structs are not the ones
// the rules describe, so the rule-based fields would be wrong too — fail instead.
Status apply_layout_rules(LuaJITProcInfo& info) {
  const char* mode = info.gc64 ? " (GC64)" : " (non-GC64)";
  for (const FieldSpec& spec : kFieldSpecs) {
    if (!spec.has_rule()) continue;
    const int64_t expect = spec.rule(info.gc64);
    if (spec.from == FieldFrom::RULE) {
      info.fields.push_back(make_field(
          spec.id, expect, fmt::format("layout rule {} {}{}", spec.header, spec.name, mode)));
      continue;
    }
    const Field* f = info.field(spec.id);
    if (f != nullptr && f->value != expect) {
      return make_error(
          "{}: {}: code gives {}, but the{} layout rule {} {} says {}; the struct "
          "layout is not the one the layout rules describe",
          info.path, spec.name, f->value, mode, spec.header, spec.name, expect);
    }
  }
  return Ok{};
}

}  // namespace

Result<VmInterval> find_vm_interval(const elf::ElfFile& file) {
  const elf::Symbol* begin = file.find_symbol("lj_vm_asm_begin");
  const elf::Symbol* ffi = file.find_symbol("lj_vm_ffi_call");
  auto fde = find_interpreter_fde(file);
  if (begin != nullptr) {
    VmInterval vm;
    vm.begin = begin->value;
    if (ffi != nullptr && ffi->value > begin->value) {
      vm.end = ffi->value + ffi->size;
      vm.source = "symbols lj_vm_asm_begin .. end of lj_vm_ffi_call";
    } else if (fde.ok()) {
      vm.end = fde->pc_end;
      vm.source = "symbol lj_vm_asm_begin .. end of the interpreter FDE";
    } else {
      return make_error(
          "{}: lj_vm_asm_begin at {:#x} but neither lj_vm_ffi_call nor the "
          "interpreter FDE gives the VM's end ({})",
          file.path(), vm.begin, fde.message());
    }
    if (fde.ok()) {
      // Both anchors exist: they must describe the same VM (a large static binary with a
      // second big personality FDE must not move the interval).
      if (fde->pc_begin != vm.begin || fde->pc_end > vm.end) {
        return make_error(
            "{}: interpreter FDE [{:#x}, {:#x}) disagrees with the symbols' VM "
            "interval [{:#x}, {:#x})",
            file.path(), fde->pc_begin, fde->pc_end, vm.begin, vm.end);
      }
      vm.source += " (interpreter FDE agrees)";
    }
    return vm;
  }
  if (!fde.ok()) {
    return make_error("{}: no lj_vm_asm_begin symbol and no interpreter FDE: {}", file.path(),
                      fde.message());
  }
  VmInterval vm{fde->pc_begin, fde->pc_end,
                fmt::format("interpreter FDE at .eh_frame+{:#x}", fde->section_offset)};
  return vm;
}

bool is_ffi_call_return(const cfi::UnwindTable& table, const VmInterval& vm,
                        uint64_t link_return_address) {
  const uint64_t call = link_return_address - 1;  // the call's last byte
  std::optional<uint64_t> start = table.function_start(call);
  std::optional<uint64_t> interpreter_end = table.function_end(vm.begin);
  return start && interpreter_end && *start == *interpreter_end;
}

const char* vmstate_numbering_name(VmstateNumbering n) {
  return n == VmstateNumbering::Tarantool ? "tarantool" : "upstream";
}

const Field* LuaJITProcInfo::field(std::string_view name) const {
  for (const Field& f : fields)
    if (f.name == name) return &f;
  return nullptr;
}

const Field* LuaJITProcInfo::field(FieldId id) const {
  for (const Field& f : fields)
    if (f.id == id) return &f;
  return nullptr;
}

int64_t LuaJITProcInfo::value(std::string_view name) const {
  const Field* f = field(name);
  return f ? f->value : 0;
}

uint8_t dwarf_register(elf::Arch arch, int reg) {
  if (arch == elf::Arch::AArch64) return static_cast<uint8_t>(reg);
  // x86-64 DWARF numbering: rax rdx rcx rbx rsi rdi rbp rsp r8..r15.
  static constexpr uint8_t kMap[16] = {0, 2, 1, 3, 7, 6, 4, 5, 8, 9, 10, 11, 12, 13, 14, 15};
  return reg >= 0 && reg < 16 ? kMap[reg] : 0xff;
}

Result<Field> choose_jit_base(Runtime runtime, const Result<ExitHandlerMatch>& exit_handler,
                              int64_t dispatch_to_g, int64_t cur_L, uint8_t ref_size) {
  if (exit_handler.ok()) {
    const int64_t g_rel = dispatch_to_g + exit_handler->jit_base;
    if (g_rel <= cur_L || g_rel > cur_L + 4 * ref_size || g_rel % ref_size != 0) {
      return make_error(
          "jit_base at G{:+#x} (exit handler) is not an aligned slot within 4 "
          "references after cur_L (G{:+#x})",
          g_rel, cur_L);
    }
    return make_field(FieldId::GJitBase, g_rel, "exit-handler",
                      pick(exit_handler->evidence, {"G->jit_base", "BASE = G->jit_base"}));
  }
  if (runtime == Runtime::Tarantool) {
    return make_error(
        "Tarantool needs jit_base from lj_vm_exit_handler (Tarantool >= 2.6.3 "
        "puts global_State.mem_L between cur_L and jit_base, so cur_L + {} would "
        "be wrong): {}",
        ref_size, exit_handler.message());
  }
  return make_field(FieldId::GJitBase, cur_L + ref_size, "fallback");
}

Result<VmstateNumbering> classify_vmstate_numbering(int32_t s_interp, int32_t s_c, int32_t s_exit) {
  // Both families keep C/CFUNC, GC, EXIT adjacent (lj_obj.h LJ_VMST_*): EXIT == C - 2.
  if (s_exit != s_c - 2) {
    return make_error(
        "vmstate: EXIT {} is not two states after C/CFUNC {} (lj_obj.h: "
        "C/CFUNC, GC, EXIT are consecutive)",
        s_exit, s_c);
  }
  if (s_interp != -1) {
    return make_error(
        "vmstate: INTERP is stored as {}, expected ~0 = -1 (LJ_VMST_INTERP is the "
        "first state in every numbering)",
        s_interp);
  }
  if (s_c == s_interp - 1) return VmstateNumbering::Upstream;
  if (s_c == s_interp - 3) return VmstateNumbering::Tarantool;
  return make_error(
      "vmstate: INTERP {} and C/CFUNC {} fit neither the upstream (INTERP, C) nor "
      "the Tarantool (INTERP, LFUNC, FFUNC, CFUNC) numbering",
      s_interp, s_c);
}

Status check_cframe_against_cfi(elf::Arch arch, int64_t prev_offset, const VmCframe& cf) {
  if (arch == elf::Arch::X86_64) {
    if (cf.cfa_base != LJ_CFI_REG_SP) {
      return make_error(
          "VM C frame: CFI CFA is not rsp-based (x86-64 VM frames are rsp + "
          "CFRAME_SIZE)");
    }
    // vm_x64.dasc saveregs: push rbp, rbx, r15, r14 below the return address, then
    // `sub rsp, CFRAME_SPACE` whose last slot is SAVE_CFRAME.
    const int64_t expected = int64_t{cf.cfa_offset} - 8 * (1 + 4) - 8;
    if (prev_offset != expected) {
      return make_error(
          "VM C frame: link slot [rsp{:+#x}] from the VM entry code disagrees "
          "with the CFI frame size {} (expected the slot at {} = size - 48)",
          prev_offset, cf.cfa_offset, expected);
    }
    return Ok{};
  }
  // Two AArch64 frame layouts exist (lj_frame.h CFRAME_OFS_PREV, vm_arm64.dasc saveregs):
  // since LuaJIT's 2020 reorder, FP/LR sit at the top of the frame, the CFI is x29-based and
  // the link is at [sp+0]; before it (e.g. the fork in Tarantool 2.6), FP/LR sit at sp+0, the
  // CFI is sp + CFRAME_SIZE and the link is 48 bytes below the CFA ([sp+160] of 208).
  if (cf.cfa_base == LJ_CFI_REG_FP) {
    if (prev_offset != 0) {
      return make_error(
          "VM C frame: AArch64 link slot [sp{:+#x}] from the VM entry code, expected [sp+0] "
          "with an x29-based CFI (lj_frame.h CFRAME_OFS_PREV)",
          prev_offset);
    }
    return Ok{};
  }
  if (cf.cfa_base != LJ_CFI_REG_SP) {
    return make_error("VM C frame: AArch64 VM CFI is neither x29- nor sp-based");
  }
  const int64_t expected = int64_t{cf.cfa_offset} - 48;
  if (prev_offset != expected) {
    return make_error(
        "VM C frame: AArch64 link slot [sp{:+#x}] from the VM entry code disagrees with the "
        "sp-based CFI frame size {} (expected the slot at {} = size - 48, lj_frame.h "
        "CFRAME_OFS_PREV before the 2020 frame reorder)",
        prev_offset, cf.cfa_offset, expected);
  }
  return Ok{};
}

Result<LuaJITProcInfo> extract_proc_info(const elf::ElfFile& file) {
  RuntimeInfo rt = detect_runtime(file, {});
  return extract_proc_info(file, rt.runtime);
}

namespace {

// The error of an extraction step: "<path>: <what>: <why>".
Error extraction_error(const LuaJITProcInfo& info, const std::string& what,
                       const std::string& why) {
  return make_error("{}: {}: {}", info.path, what, why);
}

// GC64 and cur_L from lua_close.
Result<LuaCloseMatch> extract_lua_close(const elf::ElfFile& file, LuaJITProcInfo& info) {
  LJ_ASSIGN_OR_RETURN(DecodedFunction lua_close, decode_symbol(file, "lua_close"));
  auto close = match_lua_close(lua_close.code());
  if (!close.ok()) return extraction_error(info, "lua_close", close.message());
  info.ref_size = close->ref_width;
  info.gc64 = close->ref_width == 8;
  info.fields.push_back(
      make_field(FieldId::Gc64, info.gc64 ? 1 : 0, "lua_close", {close->glref_load}));
  return close;
}

// The VM interval (into info.vm) and its code.
Result<std::vector<Insn>> decode_vm_interval(const elf::ElfFile& file, LuaJITProcInfo& info) {
  LJ_ASSIGN_OR_RETURN(info.vm, find_vm_interval(file));
  if (info.vm.end <= info.vm.begin) {
    return extraction_error(info, "VM interval",
                            fmt::format("[{:#x}, {:#x}) is empty", info.vm.begin, info.vm.end));
  }
  auto vm_insns = disasm::disassemble_range(file, info.vm.begin, info.vm.end - info.vm.begin);
  if (!vm_insns.ok()) return extraction_error(info, "VM interval", vm_insns.message());
  return vm_insns;
}

// The exit handler (anchored to its symbol when present, else searched in the whole VM) and the
// global_State fields around it: the G->dispatch distance, cur_L (from lua_close, confirmed by
// the exit handler when it matched), jit_base and vmstate.
Result<ExitHandlerMatch> extract_exit_handler(const elf::ElfFile& file, const Code& vm,
                                              const LuaCloseMatch& close,
                                              const DispatchSetupMatch& setup,
                                              LuaJITProcInfo& info) {
  std::optional<DecodedFunction> exit_fn;
  if (file.find_symbol("lj_vm_exit_handler") != nullptr) {
    auto f = decode_symbol(file, "lj_vm_exit_handler");
    if (!f.ok()) return extraction_error(info, "lj_vm_exit_handler", f.message());
    exit_fn = std::move(*f);
  }
  Result<ExitHandlerMatch> exit_handler = match_exit_handler(exit_fn ? exit_fn->code() : vm);
  if (exit_handler.ok() && exit_handler->dispatch_reg != setup.dispatch_reg) {
    return extraction_error(info, "exit-handler",
                            fmt::format("accesses G through {}, but the VM entry sets up {}",
                                        register_name(info.arch, exit_handler->dispatch_reg),
                                        register_name(info.arch, setup.dispatch_reg)));
  }
  const int64_t to_g = setup.register_is_g ? 0 : setup.dispatch_distance;

  info.fields.push_back(
      make_field(FieldId::GDispatch, setup.dispatch_distance, "vm-entry", setup.evidence));
  if (exit_handler.ok() && to_g + exit_handler->cur_L != close.cur_L) {
    return extraction_error(info, "cur_L",
                            fmt::format("lua_close clears G{:+#x}, the exit handler loads L from "
                                        "G{:+#x}",
                                        close.cur_L, to_g + exit_handler->cur_L));
  }
  std::vector<Evidence> cur_L_evidence = {close.cur_L_store};
  if (exit_handler.ok()) {
    for (const Evidence& e : pick(exit_handler->evidence, {"L = G->cur_L"}))
      cur_L_evidence.push_back(e);
  }
  info.fields.push_back(make_field(FieldId::GCurL, close.cur_L, "lua_close", cur_L_evidence));
  auto jit_base = choose_jit_base(info.runtime, exit_handler, to_g, close.cur_L, info.ref_size);
  if (!jit_base.ok()) return extraction_error(info, "jit_base", jit_base.message());
  info.fields.push_back(*jit_base);

  if (!exit_handler.ok()) {
    return extraction_error(info, "vmstate",
                            "the exit-handler pattern is required to find global_State.vmstate "
                            "and the EXIT state: " +
                                exit_handler.message());
  }
  const ExitHandlerMatch& eh = *exit_handler;
  LJ_ASSIGN_OR_RETURN(Field vmstate,
                      add_offset(FieldId::GVmstate, eh.vmstate, setup, "exit-handler",
                                 pick(eh.evidence, {"set_vmstate"})));
  if (vmstate.value >= close.cur_L || vmstate.value % 4 != 0) {
    return extraction_error(info, "vmstate",
                            fmt::format("G{:+#x} must be 4-aligned and before cur_L (G{:+#x}) "
                                        "(lj_obj.h global_State order)",
                                        vmstate.value, close.cur_L));
  }
  info.fields.push_back(vmstate);
  return exit_handler;
}

// J->trace from BC_JLOOP, cross-checked with jit_checktrace when it can be.
Result<JloopMatch> extract_jit_trace(const elf::ElfFile& file, const Code& vm,
                                     const LuaCloseMatch& close, const DispatchSetupMatch& setup,
                                     LuaJITProcInfo& info) {
  auto jloop = match_jloop(vm, setup.dispatch_reg);
  if (!jloop.ok()) return extraction_error(info, "BC_JLOOP", jloop.message());
  LJ_ASSIGN_OR_RETURN(Field jtrace,
                      add_offset(FieldId::GJitTrace, jloop->trace_array, setup, "BC_JLOOP",
                                 pick(jloop->evidence, {"J->trace", "T = "})));
  if (auto st = cross_check_trace_array(file, close.glref_offset, close.ref_width, jtrace);
      !st.ok()) {
    return extraction_error(info, "J->trace", st.message());
  }
  if (jtrace.value <= info.value(field::kGJitBase)) {
    return extraction_error(info, "J->trace",
                            fmt::format("G{:+#x} is not after global_State.jit_base (jit_State "
                                        "follows global_State in GG_State)",
                                        jtrace.value));
  }
  info.fields.push_back(jtrace);
  return jloop;
}

// The C-frame link, cross-checked with the VM's CFI, and what the exit handler reads through
// the restored C frame.
Status extract_cframe(const elf::ElfFile& file, const Code& vm, const ExitHandlerMatch& eh,
                      LuaJITProcInfo& info) {
  auto link = match_cframe_link(vm, eh.L_cframe);
  if (!link.ok()) return extraction_error(info, "vm-entry", link.message());
  info.fields.push_back(
      make_field(FieldId::CframePrev, link->prev_offset, "vm-entry", link->evidence));
  // Only the VM's rows are read: the rest of the file's CFI programs need not run.
  auto table = cfi::build_unwind_table_over(file, info.vm.begin, info.vm.end,
                                            unwind_overlays(file, info.vm, vm.insns));
  if (!table.ok()) return extraction_error(info, "cfi", table.message());
  auto cframe = derive_vm_cframe(*table, info.vm.begin, info.vm.end);
  if (!cframe.ok()) return extraction_error(info, "cfi", cframe.message());
  LJ_TRY(check_cframe_against_cfi(info.arch, link->prev_offset, *cframe));
  info.vm_cframe = *cframe;
  if (info.arch == elf::Arch::X86_64) {
    // x86-64: CFA = rsp + CFRAME_SIZE. (AArch64's CFA is x29 + 16, which says nothing about
    // the frame size, so the field is left out there.)
    info.fields.push_back(make_field(FieldId::CframeSize, cframe->cfa_offset, "cfi"));
  }

  if (eh.cframe_L < 0 || eh.cframe_PC < 0) {
    return extraction_error(info, "exit-handler",
                            "no `SAVE_L = L` / `PC = SAVE_PC` access through the restored "
                            "C frame after `L->cframe & ~3`");
  }
  info.fields.push_back(
      make_field(FieldId::CframeL, eh.cframe_L, "exit-handler", pick(eh.evidence, {"SAVE_L"})));
  info.fields.push_back(make_field(FieldId::CframePc, eh.cframe_PC, "exit-handler",
                                   pick(eh.evidence, {"PC = SAVE_PC"})));
  return Ok{};
}

// The vmstate numbering, from the states vm_exit_interp, lj_BC_FUNCC and the exit handler store.
Status extract_vmstate_numbering(const Code& vm, const DispatchSetupMatch& setup,
                                 const ExitHandlerMatch& eh, LuaJITProcInfo& info) {
  auto interp = match_exit_interp(vm, setup.dispatch_reg, eh.jit_base, eh.vmstate);
  if (!interp.ok()) return extraction_error(info, "vm_exit_interp", interp.message());
  auto ccall = match_c_call_state(vm, setup.dispatch_reg, eh.vmstate);
  if (!ccall.ok()) return extraction_error(info, "lj_BC_FUNCC", ccall.message());
  const int32_t s_interp = interp->state, s_c = ccall->state, s_exit = eh.exit_state;
  auto numbering = classify_vmstate_numbering(s_interp, s_c, s_exit);
  if (!numbering.ok()) return extraction_error(info, "vmstate", numbering.message());
  info.numbering = *numbering;
  info.fields.push_back(
      make_field(FieldId::VmstInterp, s_interp, "vm_exit_interp", interp->evidence));
  if (info.numbering == VmstateNumbering::Tarantool) {
    info.fields.push_back(make_field(FieldId::VmstLfunc, s_interp - 1,
                                     "layout rule lj_obj.h LJ_VMST_LFUNC follows INTERP "
                                     "(Tarantool numbering)"));
    info.fields.push_back(make_field(FieldId::VmstFfunc, s_interp - 2,
                                     "layout rule lj_obj.h LJ_VMST_FFUNC follows LFUNC "
                                     "(Tarantool numbering)"));
  }
  info.fields.push_back(make_field(FieldId::VmstC, s_c, "lj_BC_FUNCC", ccall->evidence));
  info.fields.push_back(make_field(FieldId::VmstGc, s_c - 1,
                                   "layout rule lj_obj.h LJ_VMST_GC between C/CFUNC and EXIT"));
  info.fields.push_back(
      make_field(FieldId::VmstExit, s_exit, "exit-handler", pick(eh.evidence, {"set_vmstate"})));
  return Ok{};
}

// lua_State: glref (lua_close), base (the exit handler, confirmed by lua_gettop), top and cframe.
Status extract_lua_state(const elf::ElfFile& file, const LuaCloseMatch& close,
                         const ExitHandlerMatch& eh, LuaJITProcInfo& info) {
  info.fields.push_back(
      make_field(FieldId::LGlref, close.glref_offset, "lua_close", {close.glref_load}));
  LJ_ASSIGN_OR_RETURN(DecodedFunction gettop_fn, decode_symbol(file, "lua_gettop"));
  auto gettop = match_gettop(gettop_fn.code());
  if (!gettop.ok()) return extraction_error(info, "lua_gettop", gettop.message());
  if (gettop->base_offset != eh.L_base) {
    return extraction_error(info, "lua_State.base",
                            fmt::format("lua_gettop reads L{:+#x}, the exit handler "
                                        "stores BASE to L{:+#x}",
                                        gettop->base_offset, eh.L_base));
  }
  info.fields.push_back(
      make_field(FieldId::LBase, eh.L_base, "exit-handler", pick(eh.evidence, {"L->base"})));
  info.fields.push_back(
      make_field(FieldId::LTop, gettop->top_offset, "lua_gettop", gettop->evidence));
  info.fields.push_back(make_field(FieldId::LCframe, eh.L_cframe, "exit-handler",
                                   pick(eh.evidence, {"L->cframe", "& CFRAME"})));
  return Ok{};
}

// The global_State fields `ljprof heap` reads, from the fields extracted from code and the
// lj_obj.h struct order, which every fork keeps around them: GCState begins
// `GCSize total, threshold; uint8 x4; MSize sweepstr; GCRef root, MRef sweep, GCRef gray,
// grayagain, weak, mmudata`, and `GCRef cur_L; [TT: GCRef mem_L;] MRef jit_base, ctype_state`.
// The string table's place depends on the interning generation, which GCstr's layout tells:
// with `sid` (upstream ff34b48d "Redesign and harden string interning", GCstr.len at 20/16)
// it is `StrInternState str` after GCState, strempty (a GCstr) and four bytes; before it
// (Tarantool's fork, older upstream; GCstr.len at 16/12), `GCRef *strhash` is the first
// member. `ljprof heap` checks them all against the memory it reads (the mask against the
// strings it finds, mainthref against GG_State) and `inspect --verify-dwarf` against DWARF.
void add_heap_globals(LuaJITProcInfo& info) {
  const Field* root = info.field(FieldId::GGcRoot);
  const Field* len = info.field(FieldId::StrLen);
  const Field* jit_base = info.field(FieldId::GJitBase);
  if (root == nullptr || len == nullptr || jit_base == nullptr) return;
  const int64_t ref = info.ref_size;
  const std::string order = "layout rule lj_obj.h GCState order after global_State.gc.root";
  info.fields.push_back(make_field(FieldId::GGcTotal, root->value - (2 * ref + 8),
                                   order + " (total, threshold, "
                                           "4 bytes, sweepstr)"));
  info.fields.push_back(make_field(FieldId::GGcMmudata, root->value + 5 * ref,
                                   order + " (sweep, gray, grayagain, weak)"));
  info.fields.push_back(make_field(FieldId::GCtypeState, jit_base->value + ref,
                                   "layout rule lj_obj.h ctype_state after jit_base"));
  std::optional<int64_t> tab;
  if (len->value == (info.gc64 ? 16 : 12)) {
    tab = 0;
  } else if (len->value == (info.gc64 ? 20 : 16)) {
    // GC64: root at G+40, GCState 104, strempty 24 -> str at G+152; non-GC64 (LJ_64):
    // root at G+32, GCState 60, strempty 20 -> str at G+104 (aligned to 8).
    tab = root->value + (info.gc64 ? 112 : 72);
  }
  if (!tab) return;
  const std::string strings = fmt::format(
      "layout rule lj_obj.h string table of the interning generation with GCstr.len at {}",
      len->value);
  info.fields.push_back(make_field(FieldId::GStrTab, *tab, strings));
  info.fields.push_back(make_field(FieldId::GStrMask, *tab + 8, strings + " (after the anchors)"));
}

// GCstr: the length field and where the characters start, from lua_tolstring.
Status extract_gcstr(const elf::ElfFile& file, LuaJITProcInfo& info) {
  LJ_ASSIGN_OR_RETURN(DecodedFunction tolstring_fn, decode_symbol(file, "lua_tolstring"));
  auto tolstring = match_tolstring(tolstring_fn.code());
  if (!tolstring.ok()) return extraction_error(info, "lua_tolstring", tolstring.message());
  info.fields.push_back(
      make_field(FieldId::StrLen, tolstring->len_offset, "lua_tolstring", tolstring->evidence));
  info.fields.push_back(
      make_field(FieldId::StrData, tolstring->data_offset, "lua_tolstring", tolstring->evidence));
  return Ok{};
}

}  // namespace

Result<LuaJITProcInfo> extract_proc_info(const elf::ElfFile& file, Runtime runtime) {
  LuaJITProcInfo info;
  info.path = file.path();
  info.runtime = runtime;
  info.arch = file.arch();
  LJ_ASSIGN_OR_RETURN(const LuaCloseMatch close, extract_lua_close(file, info));
  LJ_ASSIGN_OR_RETURN(const std::vector<Insn> vm_insns, decode_vm_interval(file, info));
  const Code vm{info.arch, vm_label(info.vm), vm_insns};

  // DISPATCH/GL register and the G->dispatch distance (VM entry).
  auto setup = match_dispatch_setup(vm, close.glref_offset, close.ref_width);
  if (!setup.ok()) return extraction_error(info, "vm-entry", setup.message());
  info.dispatch_reg = setup->dispatch_reg;
  info.dispatch_is_g = setup->register_is_g;
  LJ_ASSIGN_OR_RETURN(const ExitHandlerMatch eh,
                      extract_exit_handler(file, vm, close, *setup, info));
  LJ_ASSIGN_OR_RETURN(const JloopMatch jloop, extract_jit_trace(file, vm, close, *setup, info));
  LJ_TRY(extract_cframe(file, vm, eh, info));
  LJ_TRY(extract_vmstate_numbering(vm, *setup, eh, info));
  LJ_TRY(extract_lua_state(file, close, eh, info));

  // global_State.gc.root: only `ljprof core --all-fibers` walks the GC list, so a build where
  // the allocation does not match has no such field (and that option says so).
  if (auto root = find_gc_root(file, info.ref_size)) {
    info.fields.push_back(
        make_field(FieldId::GGcRoot, root->root_offset, "lj_mem_newgco", root->evidence));
  }
  LJ_TRY(extract_gcstr(file, info));
  add_heap_globals(info);

  info.fields.push_back(make_field(FieldId::TrMcode, jloop.trace_mcode, "BC_JLOOP",
                                   pick(jloop.evidence, {"T->mcode", "jump"})));
  info.fields.push_back(make_field(FieldId::GJitSizetrace, info.value(field::kGJitTrace) + 12,
                                   "layout rule lj_jit.h jit_State (GCRef *trace; TraceNo "
                                   "freetrace; MSize sizetrace) after G->J->trace"));
  LJ_TRY(apply_layout_rules(info));
  if (auto st = check_fields_complete(info); !st.ok()) {
    return extraction_error(info, "layout", st.message());
  }
  std::stable_sort(info.fields.begin(), info.fields.end(),
                   [](const Field& a, const Field& b) { return a.id < b.id; });
  return info;
}

Status check_fields_complete(const LuaJITProcInfo& info) {
  std::array<int, kFieldCount> seen{};
  for (const Field& f : info.fields) {
    if (++seen[static_cast<size_t>(f.id)] > 1) return make_error("{} was extracted twice", f.name);
  }
  const bool tarantool = info.numbering == VmstateNumbering::Tarantool;
  for (const FieldSpec& spec : kFieldSpecs) {
    if (seen[static_cast<size_t>(spec.id)] == 0 && field_required(spec, info.arch, tarantool)) {
      return make_error("{} ({} {}) was not extracted, and this build needs it", spec.name,
                        spec.header, spec.from == FieldFrom::RULE ? "layout rule" : "code");
    }
  }
  return Ok{};
}

Result<lj_luajit_info> to_walker_info(const LuaJITProcInfo& info) {
  LJ_TRY(check_fields_complete(info));
  lj_luajit_info w{};
  w.vm_begin = info.vm.begin;
  w.vm_end = info.vm.end;
  w.version = LJ_LUAJIT_INFO_VERSION;
  w.arch = info.arch == elf::Arch::X86_64 ? LJ_INFO_ARCH_X86_64 : LJ_INFO_ARCH_ARM64;
  w.dispatch_reg = dwarf_register(info.arch, info.dispatch_reg);
  w.dispatch_is_g = info.dispatch_is_g ? 1 : 0;
  w.vmst_numbering = info.numbering == VmstateNumbering::Tarantool ? LJ_VMST_NUMBERING_TARANTOOL
                                                                   : LJ_VMST_NUMBERING_UPSTREAM;
  w.ref_size = info.ref_size;
  for (const Field& f : info.fields) {
    if (f.value < INT32_MIN || f.value > INT32_MAX) {
      return make_error("{}: {} = {} does not fit the walker's int32 member", info.path, f.name,
                        f.value);
    }
    w.*field_spec(f.id).member = static_cast<int32_t>(f.value);
  }
  return w;
}

}  // namespace ljprof::luajit
