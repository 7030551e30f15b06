// libFuzzer target for the LuaJIT offset extractors: the first byte picks the architecture,
// the rest is machine code. Every matcher must either fail closed or return values inside the
// ranges its rule allows; an out-of-range value that was accepted traps.
#include <cstddef>
#include <cstdint>

#include "disasm/disasm.h"
#include "luajit/fiber_code.h"
#include "luajit/matchers.h"
#include "luajit/proc_info.h"

namespace {

using namespace ljprof;
using namespace ljprof::luajit;

void require(bool ok) {
  if (!ok) __builtin_trap();
}

bool aligned_in(int64_t v, int64_t lo, int64_t hi, int64_t align) {
  return v >= lo && v < hi && v % align == 0;
}

// The Tarantool fiber patterns (luajit/fiber_code.h), x86-64 only. cord_ptr's offset is the one
// cord_is_main found, else Debian 2.6's; rlist.next the one fiber_stat's pattern found, else 8.
void exercise_fiber_matchers(const Code& code) {
  int64_t tls = -0x33a0;
  if (auto m = match_cord_is_main(code); m.ok()) {
    require(m->tls_offset < 0 && m->address > 0);
    tls = m->tls_offset;
  }
  (void)match_fiber_self(code, tls);
  (void)match_fiber_name(code);
  if (auto f = match_fiber_fid(code, tls); f.ok()) {
    require(f->size == 1 || f->size == 2 || f->size == 4 || f->size == 8);
  }
  int64_t next = 8;
  if (auto alive = match_alive_list(code, tls); alive.ok()) {
    require(alive->rlist_next == 0 || alive->rlist_next == 8);
    next = alive->rlist_next;
  }
  (void)match_ready_list(code, tls, next);
  if (auto dead = match_dead_flag(code); dead.ok()) {
    require(dead->flag_dead > 0 && (dead->flag_dead & (dead->flag_dead - 1)) == 0);
  }
  // Targets as the seeds' calls land when their code is placed at 0x400000: any address will
  // do, the matchers only compare them.
  (void)match_switch(code, tls, 0, 0x400100);
  (void)match_lua_stack(code, 0x400100, 0x600000);
  if (auto name = match_cord_name(code, tls); name.ok()) {
    require(name->offset > 0 && name->size > 0 && name->size <= 256);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const elf::Arch arch = (data[0] & 1) ? elf::Arch::AArch64 : elf::Arch::X86_64;
  auto insns = disasm::disassemble(arch, {data + 1, size - 1}, 0x400000);
  if (!insns.ok()) return 0;
  const Code code{arch, "fuzz", *insns};
  const bool x86 = arch == elf::Arch::X86_64;
  auto disp_ok = [&](int64_t d) {
    return x86 ? (d < 0 && d >= -0x10000) : (d >= 0 && d < 0x10000);
  };

  int64_t glref = 16, cframe = 80, jit_base = x86 ? -0xe08 : 376, vmstate = x86 ? -0xec8 : 184;
  uint8_t width = 8;
  int dreg = x86 ? 14 : 22;
  if (auto m = match_lua_close(code); m.ok()) {
    require(m->ref_width == 4 || m->ref_width == 8);
    require(aligned_in(m->glref_offset, 0, 256, m->ref_width));
    require(aligned_in(m->cur_L, 1, 0x1000, m->ref_width));
    glref = m->glref_offset;
    width = m->ref_width;
  }
  auto eh = match_exit_handler(code);
  if (eh.ok()) {
    require(disp_ok(eh->jit_base) && disp_ok(eh->cur_L) && disp_ok(eh->vmstate));
    require(eh->exit_state >= -16 && eh->exit_state <= -1);
    require(eh->ref_width == 4 || eh->ref_width == 8);
    require(eh->jit_base != eh->cur_L && eh->vmstate != eh->jit_base);
    cframe = eh->L_cframe;
    jit_base = eh->jit_base;
    vmstate = eh->vmstate;
    dreg = eh->dispatch_reg;
  }
  for (Runtime rt : {Runtime::Tarantool, Runtime::LuaJIT}) {
    auto jb = choose_jit_base(rt, eh, x86 ? 0xf80 : 0, 368, 8);
    if (jb.ok()) {
      require(jb->value > 368 && jb->value <= 368 + 32 && jb->value % 8 == 0);
      require(jb->source == "exit-handler" ||
              (jb->source == "fallback" && rt != Runtime::Tarantool));
    }
  }
  if (auto s = match_dispatch_setup(code, glref, width); s.ok()) {
    require(aligned_in(s->dispatch_distance, 8, 0x10000, 8));
    require(s->sites > 0);
  }
  if (auto l = match_cframe_link(code, cframe); l.ok())
    require(aligned_in(l->prev_offset, 0, 256, 8));
  if (auto j = match_jloop(code, dreg); j.ok()) {
    require(aligned_in(j->trace_mcode, 8, 256, 8));
    require(disp_ok(j->trace_array));
  }
  if (auto i = match_exit_interp(code, dreg, jit_base, vmstate); i.ok()) {
    require(i->state >= -16 && i->state <= -1 && i->sites > 0);
  }
  if (auto c = match_c_call_state(code, dreg, vmstate); c.ok()) {
    require(c->state >= -16 && c->state <= -1 && c->sites > 0);
  }
  if (auto t = match_traceinfo(code, glref, width); t.ok())
    require(aligned_in(t->trace_array, 8, 0x10000, 8));
  if (auto t = match_tolstring(code); t.ok()) {
    require(aligned_in(t->data_offset, 12, 65, 4) && t->len_offset > 0 &&
            t->len_offset < t->data_offset);
  }
  if (auto g = match_gettop(code); g.ok()) {
    require(g->base_offset > 0 && g->base_offset < g->top_offset && g->top_offset < 256);
  }
  if (x86) exercise_fiber_matchers(code);
  return 0;
}
