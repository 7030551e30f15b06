#include "record/sample_frames.h"

#include "symbolize/symbolize.h"
#include "symbolize/trace.h"

namespace ljprof::record {

namespace {

std::string basename_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

report::Frame unknown_frame(std::string reason) {
  report::Frame f;
  f.kind = report::FrameKind::Unknown;
  f.function = "[unknown: " + reason + "]";
  return f;
}

}  // namespace

report::Frame SampleSymbolizer::native_frame(const ProcessContext& ctx, uint64_t pc, bool exact,
                                             report::FrameKind kind, uint64_t* symbol_start) {
  auto key = std::make_tuple(ctx.pid, pc, exact);
  auto it = natives_.find(key);
  if (it != natives_.end()) {
    report::Frame f = it->second.frame;
    f.kind = kind;
    if (symbol_start != nullptr) *symbol_start = it->second.symbol_start;
    return f;
  }
  uint64_t start = 0;
  report::Frame f;
  f.kind = kind;
  f.address = pc;
  if (const ModuleView* m = ctx.module_at(pc)) {
    f.module = m->object->path;
    f.build_id = m->object->elf->build_id().value_or("");
    f.module_offset = pc - m->bias;
    // A return address points after the call: name the call's last byte, so a call at the very
    // end of a function is not attributed to the next one.
    const uint64_t back = exact ? 0 : 1;
    symbolize::NativeSymbol sym = symbolize::native_symbol(*m->object->elf, f.module_offset - back);
    if (!sym.name.empty()) {
      f.function = sym.name;
      start = pc - back - sym.offset;
    } else if (auto fde = m->object->table
                              ? m->object->table->function_start(f.module_offset - back)
                              : std::nullopt) {
      // Stripped code (libm's __sin_fma, LuaJIT's static lib functions): the FDE that covers the
      // pc is the function it belongs to, so samples anywhere in it aggregate under one name.
      f.function = fmt::format("{}:sub_{:x}", basename_of(f.module), *fde);
      start = m->bias + *fde;
    } else {
      f.function = fmt::format("{}+{:#x}", basename_of(f.module), f.module_offset);
    }
  } else {
    f.function = fmt::format("{:#x}", pc);
  }
  natives_.emplace(key, NativeEntry{f, start});
  if (symbol_start != nullptr) *symbol_start = start;
  return f;
}

SampleSymbolizer::LuaName SampleSymbolizer::lua_name(const ProcessContext& ctx,
                                                     const lj_rec_frame& f) {
  LuaKey key{ctx.pid, f.proto, f.chunkname, f.firstline};
  auto it = lua_names_.find(key);
  if (it != lua_names_.end()) return it->second;
  LuaName name;
  if (ctx.luajit == nullptr || !ctx.mem) {
    name.error = "no LuaJIT layout or memory for this process";
  } else {
    const lj_luajit_info& info = ctx.luajit->object->info;
    const ljprof_mem_reader mem = ctx.mem->reader();
    uint64_t chunkname = 0;
    if (ctx.mem->read(f.proto + info.pt_chunkname, &chunkname, info.ref_size) != 0) {
      name.error = "Lua prototype unreadable (process exited?)";
    } else {
      auto loc = symbolize::proto_location(mem, info, f.proto, 0);
      if (!loc.ok()) {
        name.error = loc.message();
      } else if (chunkname != f.chunkname || loc->firstline != f.firstline) {
        name.error = "Lua prototype changed since the sample";
      } else {
        name.ok = true;
        name.short_src = loc->short_src;
        name.main_chunk = loc->main_chunk;
      }
    }
  }
  // Failures are not cached: the next sample may find the prototype readable.
  if (!name.ok) return name;
  return lua_names_.emplace(key, std::move(name)).first->second;
}

std::vector<report::Frame> SampleSymbolizer::frames(const lj_rec_sample& sample,
                                                    const ProcessContext& ctx,
                                                    std::map<std::string, uint64_t>& counters) {
  std::vector<report::Frame> out;
  const uint32_t n = std::min<uint32_t>(sample.nframes, LJ_WALK_MAX_FRAMES);
  out.reserve(n + 1);
  uint64_t prev_native_symbol_start = 0;  // runtime start of the previous native frame's symbol
  for (uint32_t i = 0; i < n; ++i) {
    const lj_rec_frame& wf = sample.frames[i];
    switch (wf.kind) {
      case LJ_FRAME_LUA: {
        if (wf.proto == 0) {
          out.push_back(unknown_frame("Lua prototype unreadable at sample time"));
          ++counters["lua frame unreadable"];
          break;
        }
        const LuaName name = lua_name(ctx, wf);
        if (!name.ok) {
          out.push_back(unknown_frame(name.error));
          ++counters["lua frame not named: " + name.error];
          break;
        }
        report::Frame f;
        f.kind = report::FrameKind::Lua;
        f.file = name.short_src;
        f.start_line = wf.firstline;
        f.line = wf.line > 0 ? wf.line : 0;
        f.function = name.main_chunk
                         ? "main chunk"
                         : fmt::format("function <{}:{}>", name.short_src, wf.firstline);
        out.push_back(std::move(f));
        break;
      }
      case LJ_FRAME_CFUNC: {
        report::Frame f = native_frame(ctx, wf.b, true, report::FrameKind::CFunc);
        // The native frame just before (leaf side) running this very function is the same call.
        if (!out.empty() && out.back().kind == report::FrameKind::Native &&
            prev_native_symbol_start == wf.b) {
          f.address = out.back().address;
          f.module_offset = out.back().module_offset;
          out.pop_back();
        }
        out.push_back(std::move(f));
        break;
      }
      case LJ_FRAME_TRACE: {
        report::Frame f;
        f.kind = report::FrameKind::Trace;
        f.address = wf.pc;
        if (ctx.luajit != nullptr && ctx.mem) {
          auto t = symbolize::trace_info(ctx.mem->reader(), ctx.luajit->object->info, wf.b);
          if (t.ok()) {
            f.function = fmt::format("trace {}", t->traceno);
            f.file = t->start.short_src;
            f.line = t->start.line > 0 ? t->start.line : 0;
            f.start_line = t->start.firstline;
          } else {
            f.function = "trace ?";
            ++counters["trace not named"];
          }
        } else {
          f.function = "trace ?";
        }
        out.push_back(std::move(f));
        break;
      }
      case LJ_FRAME_ROOT:
        out.push_back(native_frame(ctx, wf.pc, i == 0, report::FrameKind::Root));
        break;
      default: {
        out.push_back(
            native_frame(ctx, wf.pc, i == 0, report::FrameKind::Native, &prev_native_symbol_start));
        break;
      }
    }
    if (wf.kind != LJ_FRAME_NATIVE) prev_native_symbol_start = 0;
  }
  if (sample.end != LJ_END_ROOT && sample.end != LJ_END_RA_ZERO) {
    out.push_back(unknown_frame(symbolize::walk_end_name(sample.end)));
  }
  return out;
}

}  // namespace ljprof::record
