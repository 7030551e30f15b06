#include "record/stack_memo.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <type_traits>

namespace ljprof::record {

namespace {

// Open addressing over a power-of-two table with room for every unit at half load.
constexpr size_t slot_count(size_t units) {
  size_t n = 1;
  while (n < 2 * units) n <<= 1;
  return n;
}

uint64_t mix(uint64_t h, uint64_t word) {
  h = (h ^ word) * 0x9e3779b97f4a7c15ULL;
  return h ^ (h >> 29);
}

// Linear probing over a power-of-two slot table from the hash's slot: the index of the first
// slot `stop` accepts (an empty one, or one holding what is sought). Both of the memo's tables
// (units and stacks) are filled and searched through it, so they agree on the order.
template <typename Slot, typename Stop>
size_t probe(const std::vector<Slot>& slots, uint64_t hash, Stop stop) {
  const size_t mask = slots.size() - 1;
  size_t i = hash & mask;
  while (!stop(slots[i])) i = (i + 1) & mask;
  return i;
}

bool counted_nothing(const AgentCounts& counts) {
  return std::all_of(counts.begin(), counts.end(), [](uint64_t n) { return n == 0; });
}

}  // namespace

static_assert(std::has_unique_object_representations_v<lj_rec_frame>,
              "unit keys compare as bytes: no padding in a frame");

StackMemo::StackMemo(SampleSymbolizer& symbolizer, StackTable& stacks)
    : symbolizer_(symbolizer), stacks_(stacks) {}

const StackMemo::Stack& StackMemo::stack_of(const lj_rec_sample& s, const ProcessContext& ctx) {
  const uint32_t n = std::min<uint32_t>(s.nframes, LJ_WALK_MAX_FRAMES);
  if (n == 0) return whole(s, ctx);  // only the walk's end: nothing to share
  // Room for this sample's units (at most one per frame) and their frame ids.
  if (units_.size() + n > kMaxUnits || ids_.size() + 4 * n > kMaxIds) clear();
  if (slots_.empty()) slots_.assign(slot_count(kMaxUnits), 0);

  // The units, leaf first: one frame each, except that a JIT trace takes the frame after it
  // along (walk_frames.cc resolve_jit_frames rewrites that frame from the trace).
  std::array<uint32_t, LJ_WALK_MAX_FRAMES + 1> starts;
  uint32_t units = 0;
  for (uint32_t i = 0; i < n;) {
    starts[units++] = i;
    uint32_t end = i + 1;
    while (end < n && s.frames[end - 1].kind == LJ_FRAME_TRACE) ++end;
    if (end - i > kMaxUnit) return whole(s, ctx);
    i = end;
  }
  starts[units] = n;

  // Outermost first; a unit equal to the previous sample's at the same distance from the
  // outermost frame, with every unit outside it equal too, is that sample's unit.
  bool found = false, symbolized = false;
  bool as_last = last_valid_ && last_generation_ == ctx.generation && last_end_ == s.end &&
                 last_end_pc_ == s.end_pc;
  std::array<uint32_t, LJ_WALK_MAX_FRAMES + 1> by_root;
  by_root.fill(kNone);
  std::array<uint32_t, LJ_WALK_MAX_FRAMES> unit_ids;  // by unit, leaf first
  for (uint32_t u = units; u-- > 0;) {
    const uint32_t start = starts[u], len = starts[u + 1] - start, from_root = n - start;
    as_last = as_last && from_root <= last_n_ && last_units_[from_root] != kNone &&
              (start == 0) == (from_root == last_n_) &&
              units_[last_units_[from_root]].key.unit == len &&
              std::memcmp(&s.frames[start], &last_frames_[last_n_ - from_root],
                          len * sizeof(lj_rec_frame)) == 0;
    uint32_t id = as_last ? last_units_[from_root] : kNone;
    if (id == kNone) {
      const UnitKey key = key_of(s, ctx, start, len, n);
      const uint64_t hash = unit_hash(key);
      id = find(key, hash);
      if (id == kNone) {
        id = symbolize(s, ctx, start, key, hash);
        if (id == kNone) return whole(s, ctx);
        symbolized = true;
      } else {
        found = true;
      }
    } else {
      found = true;
    }
    unit_ids[u] = by_root[from_root] = id;
  }
  // The same context generation is the same process: its stack entry too.
  const bool same_stack = as_last && n == last_n_;
  std::copy_n(s.frames, n, last_frames_.begin());
  last_units_ = by_root;
  last_n_ = n;
  last_valid_ = true;
  last_generation_ = ctx.generation;
  last_end_ = s.end;
  last_end_pc_ = s.end_pc;
  if (!symbolized) {
    ++stats_.whole_hits;
  } else {
    ++(found ? stats_.suffix_hits : stats_.symbolized);
  }
  if (!same_stack) last_stack_ = &stack_entry(s.pid, unit_ids.data(), units);
  result_.stack = last_stack_;
  result_.counted.clear();
  return result_;
}

StackMemo::UnitKey StackMemo::key_of(const lj_rec_sample& s, const ProcessContext& ctx,
                                     uint32_t start, uint32_t len, uint32_t n) const {
  UnitKey key;
  key.generation = ctx.generation;
  const bool outermost = start + len == n;
  if (outermost) {
    key.end = s.end + 1;
    key.end_pc = s.end_pc;
  }
  key.leaf = start == 0 ? 1 : 0;
  key.unit = len;
  key.nraw = outermost ? len : len + 1;
  std::copy_n(&s.frames[start], key.nraw, key.raw.begin());
  return key;
}

// A candidate finder only (keys compare whole): one step per frame, of the fields that tell
// frames apart (a Lua frame's function and bytecode pc, a native pc); the prototype fields
// follow from them but for a prototype freed and reused, which the comparison catches.
uint64_t StackMemo::unit_hash(const UnitKey& key) {
  uint64_t h = mix(mix(0x243f6a8885a308d3ULL, key.generation),
                   key.end_pc ^ (uint64_t{key.end} << 40) ^ (uint64_t{key.leaf} << 32) ^
                       (uint64_t{key.nraw} << 16) ^ key.unit);
  for (uint32_t i = 0; i < key.nraw; ++i) {
    const lj_rec_frame& f = key.raw[i];
    h = mix(h, f.pc ^ ((f.b << 23) | (f.b >> 41)) ^ (uint64_t{f.kind} << 59));
  }
  return h;
}

uint32_t StackMemo::find(const UnitKey& key, uint64_t hash) const {
  const uint64_t tag = hash >> 32 << 32;
  const size_t i = probe(slots_, hash, [&](uint64_t slot) {
    if (slot == 0) return true;
    if ((slot & ~uint64_t{UINT32_MAX}) != tag) return false;
    const Unit& unit = units_[static_cast<uint32_t>(slot) - 1];
    return unit.hash == hash && std::memcmp(&unit.key, &key, sizeof(key)) == 0;
  });
  return slots_[i] == 0 ? kNone : static_cast<uint32_t>(slots_[i]) - 1;
}

uint32_t StackMemo::symbolize(const lj_rec_sample& s, const ProcessContext& ctx, uint32_t start,
                              const UnitKey& key, uint64_t hash) {
  // The unit with the next frame out as context; that frame's one result is dropped.
  const bool outermost = key.end != 0;
  AgentCounts counted{};
  std::vector<profile::Frame> frames =
      symbolizer_.frames(s, ctx, counted, start, key.nraw, outermost);
  ++stats_.units_symbolized;
  if (!counted_nothing(counted) || (!outermost && frames.empty())) return kNone;
  if (!outermost) frames.pop_back();
  Unit unit;
  unit.key = key;
  unit.hash = hash;
  unit.first_id = static_cast<uint32_t>(ids_.size());
  unit.nids = static_cast<uint32_t>(frames.size());
  for (profile::Frame& f : frames) ids_.push_back(stacks_.intern(std::move(f)));
  const auto id = static_cast<uint32_t>(units_.size());
  slots_[probe(slots_, hash, [](uint64_t slot) { return slot == 0; })] =
      (hash >> 32 << 32) | (id + 1);
  units_.push_back(unit);
  return id;
}

StackTable::Entry& StackMemo::stack_entry(uint32_t pid, const uint32_t* units, uint32_t count) {
  if (stack_slots_.empty() || stacks_held_ >= kMaxStacks) {
    stack_slots_.assign(slot_count(kMaxStacks), StackSlot{});
    stacks_held_ = 0;
  }
  uint64_t hash = mix(0x452821e638d01377ULL, pid);
  for (uint32_t u = 0; u < count; ++u) hash = mix(hash, units[u]);
  const size_t i = probe(stack_slots_, hash, [&](const StackSlot& slot) {
    return slot.entry == nullptr || (slot.hash == hash && slot.entry->first.pid == pid &&
                                     same_frames(*slot.entry, units, count));
  });
  if (stack_slots_[i].entry != nullptr) return *stack_slots_[i].entry;
  std::vector<uint32_t> ids;
  for (uint32_t u = 0; u < count; ++u) {
    const Unit& unit = units_[units[u]];
    ids.insert(ids.end(), ids_.begin() + unit.first_id, ids_.begin() + unit.first_id + unit.nids);
  }
  StackTable::Entry& e = stacks_.entry(pid, std::move(ids));
  stack_slots_[i] = {hash, &e};
  ++stacks_held_;
  return e;
}

bool StackMemo::same_frames(const StackTable::Entry& e, const uint32_t* units,
                            uint32_t count) const {
  const std::vector<uint32_t>& ids = e.first.frames;
  size_t at = 0;
  for (uint32_t u = 0; u < count; ++u) {
    const Unit& unit = units_[units[u]];
    if (ids.size() - at < unit.nids ||
        !std::equal(ids_.begin() + unit.first_id, ids_.begin() + unit.first_id + unit.nids,
                    ids.begin() + static_cast<std::ptrdiff_t>(at))) {
      return false;
    }
    at += unit.nids;
  }
  return at == ids.size();
}

const StackMemo::Stack& StackMemo::whole(const lj_rec_sample& s, const ProcessContext& ctx) {
  ++stats_.symbolized;
  last_valid_ = false;
  AgentCounts counted{};
  result_.stack = &stacks_.entry(s.pid, symbolizer_.frames(s, ctx, counted));
  result_.counted.clear();
  for (uint32_t id = 0; id < counted.size(); ++id) {
    if (counted[id] != 0) result_.counted.emplace_back(id, counted[id]);
  }
  return result_;
}

void StackMemo::clear() {
  last_valid_ = false;
  last_stack_ = nullptr;
  units_.clear();
  ids_.clear();
  std::fill(slots_.begin(), slots_.end(), 0);
  stack_slots_.clear();
  stacks_held_ = 0;
}

}  // namespace ljprof::record
