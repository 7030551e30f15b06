#include "record/sample_frames.h"

#include <limits>

#include "profile/profile_frames.h"
#include "symbolize/symbolize.h"
#include "symbolize/walk_frames.h"

namespace ljprof::record {

// A live process's memory, read after the sample, for the shared walk-to-frames converter:
// every Lua reading is checked against what the kernel read at sample time.
class SampleFrameSource final : public symbolize::FrameSource {
 public:
  // Walk index i is the sample's frame first + i.
  SampleFrameSource(SampleSymbolizer& s, const lj_rec_sample& sample, uint32_t first,
                    const ProcessContext& ctx, AgentCounts& counts)
      : s_(s), sample_(sample), first_(first), ctx_(ctx), counts_(counts) {}

  void symbolize_native(symbolize::Frame& frame, bool exact_pc) override {
    auto key = std::make_tuple(ctx_.generation, frame.pc, exact_pc);
    auto it = s_.natives_.find(key);
    if (it == s_.natives_.end()) it = s_.natives_.emplace(key, resolve(frame.pc, exact_pc)).first;
    const symbolize::Frame& n = it->second.frame;
    frame.module = n.module;
    frame.build_id = n.build_id;
    frame.module_offset = n.module_offset;
    frame.symbol = n.symbol;
    frame.symbol_offset = n.symbol_offset;
  }

  bool in_ffi_call_trampoline(const symbolize::Frame& frame) override {
    if (frame.kind != symbolize::FrameKind::Native || ctx_.luajit == nullptr) return false;
    const MappedObject* vm = ctx_.luajit->object;
    const ModuleView* m = ctx_.module_at(frame.pc);
    if (m == nullptr || m->object != vm || !vm->table || !vm->luajit) return false;
    return luajit::is_ffi_call_return(*vm->table, vm->luajit->vm, frame.module_offset);
  }

  Result<symbolize::LuaLocation> lua_location(size_t index,
                                              const symbolize::WalkedFrame& f) override {
    uint32_t why = 0;
    auto loc = checked_location(index, f.b, &why);
    if (!loc.ok() && why != 0) ++counts_[why];
    return loc;
  }

  Result<std::optional<symbolize::CallSiteName>> call_site_name(
      size_t caller_index, const symbolize::WalkedFrame& caller) override {
    const ProtoKeyResult key = proto_key(caller_index, caller.b);
    if (!key.ok()) return key.error();
    auto it = s_.call_names_.find(*key);
    if (it != s_.call_names_.end()) return it->second;
    // The caller's own frame was located (and its failure counted) just before, at this pc:
    // a cache hit unless its prototype changed since the sample. The name is read from that
    // prototype, the one the kernel saw, not through the caller's function object, which may
    // be gone by now (a closure collected after the sample).
    uint32_t why = 0;
    LJ_TRY(checked_location(caller_index, caller.b, &why));
    auto name = symbolize::call_site_name_in_proto(ctx_.mem->reader(), ctx_.luajit->object->info,
                                                   key->proto, caller.b);
    if (!name.ok()) return name;
    return s_.call_names_.emplace(*key, std::move(*name)).first->second;
  }

  // Read once per trace: a read whose trace number is the one the kernel saw is kept (a trace
  // never changes once built); any other is returned as read, and jit_frames refuses it.
  Result<symbolize::TraceInfo> trace_info(size_t index, const symbolize::WalkedFrame& f) override {
    if (ctx_.luajit == nullptr || !ctx_.mem) return make_error("no LuaJIT layout or memory");
    const SampleSymbolizer::TraceKey key{ctx_.generation, f.b, raw(index).traceno};
    if (auto it = s_.trace_infos_.find(key); it != s_.trace_infos_.end()) return it->second;
    auto t = symbolize::trace_info(ctx_.mem->reader(), ctx_.luajit->object->info, f.b);
    if (!t.ok()) {
      ++counts_[LJ_REC_CTR_TRACE_UNREAD];
      return t;
    }
    if (t->traceno == std::get<2>(key)) s_.trace_infos_.emplace(key, *t);
    return t;
  }

  // The trace must still be the one of the sample: the number trace_info read after the
  // sample is the one the kernel read. Its snapshots are read once per trace and the frames
  // once per (trace, pc, base prototype).
  Result<symbolize::JitLuaFrames> jit_frames(size_t index, const symbolize::Frame& trace,
                                             uint64_t pc, const symbolize::Frame& base) override {
    if (ctx_.luajit == nullptr || !ctx_.mem) return make_error("no LuaJIT layout or memory");
    const lj_luajit_info& info = ctx_.luajit->object->info;
    const uint32_t traceno = raw(index).traceno;
    if (traceno == 0 || trace.trace->traceno != traceno) {
      ++counts_[LJ_REC_CTR_TRACE_CHANGED];
      return make_error("trace changed since the sample");
    }
    const SampleSymbolizer::TraceKey tkey{ctx_.generation, trace.gctrace, traceno};
    auto snaps = s_.trace_snapshots_.find(tkey);
    if (snaps == s_.trace_snapshots_.end()) {
      snaps = s_.trace_snapshots_
                  .emplace(tkey,
                           symbolize::read_trace_snapshots(ctx_.mem->reader(), info, trace.gctrace))
                  .first;
    }
    if (!snaps->second.ok()) {
      ++counts_[LJ_REC_CTR_JIT_UNPROVEN];
      return snaps->second.error();
    }
    const symbolize::TraceSnapshots& t = *snaps->second;
    auto span = symbolize::snapshots_at(t, pc);
    if (!span.ok()) {
      ++counts_[LJ_REC_CTR_JIT_UNPROVEN];
      return span.error();
    }
    const SampleSymbolizer::JitKey key{ctx_.generation, trace.gctrace, traceno,
                                       span->first,     span->last,    base.lua->proto};
    auto it = s_.jit_frames_.find(key);
    if (it == s_.jit_frames_.end()) {
      auto frames = symbolize::jit_lua_frames(ctx_.mem->reader(), info, t, *span, pc, base.gcfunc,
                                              base.lua->proto);
      // Without mcofs a pc where two snapshots meet cannot be placed: counted apart from a
      // snapshot that could not be proven.
      const bool boundary = span->first != span->last;
      it = s_.jit_frames_
               .emplace(key, SampleSymbolizer::JitEntry{std::move(frames),
                                                        boundary ? LJ_REC_CTR_JIT_BOUNDARY
                                                                 : LJ_REC_CTR_JIT_UNPROVEN})
               .first;
    }
    if (!it->second.frames.ok()) ++counts_[it->second.failure];
    return it->second.frames;
  }

  std::string no_luajit_reason() const override { return {}; }

 private:
  using ProtoKeyResult = Result<SampleSymbolizer::ProtoKey>;

  ProtoKeyResult proto_key(size_t index, uint64_t bcpc) const {
    if (ctx_.luajit == nullptr || !ctx_.mem) {
      return make_error("no LuaJIT layout or memory for this process");
    }
    const lj_rec_frame& rf = raw(index);
    if (rf.proto == 0) return make_error("Lua prototype unreadable at sample time");
    return SampleSymbolizer::ProtoKey{ctx_.pid, rf.proto, rf.chunkname, rf.firstline, bcpc};
  }

  // The prototype of Lua frame `index` at `bcpc`, if it is still the one of the sample; on
  // failure `why` gets the agent counter it counts under (0: counted by the kernel already).
  Result<symbolize::LuaLocation> checked_location(size_t index, uint64_t bcpc, uint32_t* why) {
    LJ_ASSIGN_OR_RETURN(SampleSymbolizer::ProtoKey key, proto_key(index, bcpc));
    auto it = s_.locations_.find(key);
    if (it != s_.locations_.end()) return it->second;
    const lj_luajit_info& info = ctx_.luajit->object->info;
    uint64_t chunkname = 0;
    if (ctx_.mem->read(key.proto + info.pt_chunkname, &chunkname, info.ref_size) != 0) {
      *why = LJ_REC_CTR_LUA_GONE;
      return make_error("Lua prototype unreadable (process exited?)");
    }
    auto loc = symbolize::proto_location(ctx_.mem->reader(), info, key.proto, bcpc);
    if (!loc.ok()) {
      *why = LJ_REC_CTR_LUA_UNDECODED;
      return loc.error();
    }
    if (chunkname != key.chunkname || loc->firstline != key.firstline) {
      *why = LJ_REC_CTR_LUA_CHANGED;
      return make_error("Lua prototype changed since the sample");
    }
    // Failures are not cached: the next sample may find the prototype readable.
    return s_.locations_.emplace(key, std::move(*loc)).first->second;
  }

  // The module and symbol of a code address. A return address points after the call: the
  // call's last byte is named, so a call at the very end of a function is not attributed to
  // the next one.
  SampleSymbolizer::NativeEntry resolve(uint64_t pc, bool exact) const {
    SampleSymbolizer::NativeEntry e;
    symbolize::Frame& f = e.frame;
    const ModuleView* m = ctx_.module_at(pc);
    if (m == nullptr || !m->object->elf) return e;
    f.module = m->object->path;
    f.build_id = m->object->elf->build_id().value_or("");
    f.module_offset = pc - m->bias;
    const uint64_t back = exact ? 0 : 1;
    symbolize::NativeSymbol sym = symbolize::code_symbol(
        *m->object->elf, m->object->debug, m->object->table ? &*m->object->table : nullptr,
        f.module, f.module_offset - back);
    if (!sym.name.empty()) {
      f.symbol = sym.name;
      f.symbol_offset = sym.offset + back;
    }
    return e;
  }

  const lj_rec_frame& raw(size_t index) const { return sample_.frames[first_ + index]; }

  SampleSymbolizer& s_;
  const lj_rec_sample& sample_;
  const uint32_t first_;
  const ProcessContext& ctx_;
  AgentCounts& counts_;
};

std::vector<profile::Frame> SampleSymbolizer::frames(const lj_rec_sample& sample,
                                                     const ProcessContext& ctx,
                                                     AgentCounts& counts) {
  return frames(sample, ctx, counts, 0, LJ_WALK_MAX_FRAMES, true);
}

std::vector<profile::Frame> SampleSymbolizer::frames(const lj_rec_sample& sample,
                                                     const ProcessContext& ctx, AgentCounts& counts,
                                                     uint32_t first, uint32_t count,
                                                     bool with_end) {
  const uint32_t all = std::min<uint32_t>(sample.nframes, LJ_WALK_MAX_FRAMES);
  first = std::min(first, all);
  const uint32_t last = all - first < count ? all : first + count;
  std::vector<symbolize::WalkedFrame> walk;
  walk.reserve(last - first);
  for (uint32_t i = first; i < last; ++i) {
    const lj_rec_frame& f = sample.frames[i];
    walk.push_back({f.kind, f.pc, f.b, f.lua_state});
  }
  const symbolize::WalkEnd end = with_end && last == all
                                     ? symbolize::WalkEnd{sample.end, sample.end_pc}
                                     : symbolize::WalkEnd{LJ_END_ROOT, 0};
  SampleFrameSource source(*this, sample, first, ctx, counts);
  return profile::profile_frames(symbolize::frames_of_walk(walk, end, source, first == 0));
}

namespace {

// Erases the entries of `map` whose key leads with a value (lead(key)) not in `keep`. The map
// is ordered by that value first, so each value's entries are one run, skipped or erased whole;
// first_key(v) is the smallest key leading with v.
template <typename Map, typename Lead, typename LeadOf, typename FirstKey>
void erase_runs_not_in(Map& map, const std::set<Lead>& keep, LeadOf lead, FirstKey first_key) {
  for (auto it = map.begin(); it != map.end();) {
    const Lead v = lead(it->first);
    const auto run_end =
        v == std::numeric_limits<Lead>::max() ? map.end() : map.lower_bound(first_key(v + 1));
    it = keep.count(v) ? run_end : map.erase(it, run_end);
  }
}

// The same for maps keyed by a tuple that leads with the context's generation.
template <typename Map>
void erase_generations_not_in(Map& map, const std::set<uint64_t>& keep) {
  using Key = typename Map::key_type;
  erase_runs_not_in(
      map, keep, [](const Key& k) { return std::get<0>(k); },
      [](uint64_t generation) {
        Key k{};
        std::get<0>(k) = generation;
        return k;
      });
}

}  // namespace

void SampleSymbolizer::forget_all_but(const std::set<uint64_t>& generations,
                                      const std::set<uint32_t>& pids) {
  erase_generations_not_in(natives_, generations);
  erase_generations_not_in(trace_infos_, generations);
  erase_generations_not_in(trace_snapshots_, generations);
  erase_generations_not_in(jit_frames_, generations);
  auto pid_of = [](const ProtoKey& k) { return k.pid; };
  auto first_of = [](uint32_t pid) {
    return ProtoKey{pid, 0, 0, std::numeric_limits<int32_t>::min(), 0};
  };
  erase_runs_not_in(locations_, pids, pid_of, first_of);
  erase_runs_not_in(call_names_, pids, pid_of, first_of);
}

}  // namespace ljprof::record
