#include "record/stack_memo.h"

#include <algorithm>
#include <cstring>

namespace ljprof::record {

namespace {

// Open addressing over a power-of-two table with room for every node at half load.
constexpr size_t slot_count(size_t nodes) {
  size_t n = 1;
  while (n < 2 * nodes) n <<= 1;
  return n;
}

uint64_t mix(uint64_t h, uint64_t word) {
  h = (h ^ word) * 0x9e3779b97f4a7c15ULL;
  return h ^ (h >> 29);
}

// A candidate finder only: nodes are compared on their exact bytes.
uint64_t unit_hash(uint32_t parent, const lj_rec_frame* raw, uint32_t n) {
  uint64_t h = mix(0x243f6a8885a308d3ULL, parent);
  const auto* bytes = reinterpret_cast<const unsigned char*>(raw);
  for (size_t off = 0; off < n * sizeof(lj_rec_frame); off += sizeof(uint64_t)) {
    uint64_t word;
    std::memcpy(&word, bytes + off, sizeof(word));
    h = mix(h, word);
  }
  return h;
}

uint64_t context_hash(uint64_t generation, uint32_t end, uint64_t end_pc) {
  return mix(mix(mix(0x13198a2e03707344ULL, generation), end), end_pc);
}

bool counted_nothing(const AgentCounts& counts) {
  return std::all_of(counts.begin(), counts.end(), [](uint64_t n) { return n == 0; });
}

}  // namespace

static_assert(sizeof(lj_rec_frame) % sizeof(uint64_t) == 0, "unit_hash reads whole words");

StackMemo::StackMemo(SampleSymbolizer& symbolizer, StackTable& stacks)
    : symbolizer_(symbolizer), stacks_(stacks) {}

const StackMemo::Stack& StackMemo::stack_of(const lj_rec_sample& s, const ProcessContext& ctx) {
  const uint32_t n = std::min<uint32_t>(s.nframes, LJ_WALK_MAX_FRAMES);
  if (n == 0) return whole(s, ctx);  // only the walk's end: nothing to share
  // Room for this sample's nodes (at most one per frame, and its context).
  if (nodes_.size() + n + 1 > kMaxNodes) clear();
  if (slots_.empty()) slots_.assign(slot_count(kMaxNodes), 0);

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

  bool found = false, symbolized = false;
  const uint32_t context = context_node(s, ctx);
  uint32_t parent = context;
  bool as_last = context == last_context_;  // the outer units so far equal the last sample's
  std::array<uint32_t, LJ_WALK_MAX_FRAMES + 1> nodes;
  nodes.fill(kNone);
  for (uint32_t u = units; u-- > 0;) {
    const uint32_t start = starts[u], len = starts[u + 1] - start, from_root = n - start;
    as_last = as_last && from_root <= last_n_ && last_nodes_[from_root] != kNone &&
              nodes_[last_nodes_[from_root]].nraw == len &&
              std::memcmp(&s.frames[start], &last_frames_[last_n_ - from_root],
                          len * sizeof(lj_rec_frame)) == 0;
    if (as_last) {
      found = true;
      parent = nodes[from_root] = last_nodes_[from_root];
      continue;
    }
    const uint64_t hash = unit_hash(parent, &s.frames[start], len);
    const uint32_t known = find(parent, &s.frames[start], len, hash);
    if (known != kNone) {
      found = true;
      parent = nodes[from_root] = known;
      continue;
    }
    // The unit with the next frame out as context; that frame's one result is dropped.
    const bool outermost = u + 1 == units;
    AgentCounts counted{};
    std::vector<report::Frame> frames =
        symbolizer_.frames(s, ctx, counted, start, len + (outermost ? 0 : 1), outermost);
    ++stats_.units_symbolized;
    if (!counted_nothing(counted) || (!outermost && frames.empty())) return whole(s, ctx);
    if (!outermost) frames.pop_back();
    Node node;
    node.hash = hash;
    node.parent = parent;
    node.nraw = len;
    std::copy_n(&s.frames[start], len, node.raw.begin());
    node.ids.reserve(frames.size());
    for (report::Frame& f : frames) node.ids.push_back(stacks_.intern(std::move(f)));
    parent = nodes[from_root] = add(std::move(node));
    symbolized = true;
  }
  std::copy_n(s.frames, n, last_frames_.begin());
  last_nodes_ = nodes;
  last_n_ = n;
  last_context_ = context;
  if (!symbolized) {
    ++stats_.whole_hits;
  } else {
    ++(found ? stats_.suffix_hits : stats_.symbolized);
  }
  if (nodes_[parent].entry == nullptr) nodes_[parent].entry = &entry_of(parent, s.pid);
  result_.stack = nodes_[parent].entry;
  result_.counted.clear();
  return result_;
}

uint32_t StackMemo::context_node(const lj_rec_sample& s, const ProcessContext& ctx) {
  const uint64_t hash = context_hash(ctx.generation, s.end, s.end_pc);
  const uint32_t known = probe(hash, [&](const Node& node) {
    return node.parent == kNone && node.generation == ctx.generation && node.end == s.end &&
           node.end_pc == s.end_pc;
  });
  if (known != kNone) return known;
  Node node;
  node.hash = hash;
  node.generation = ctx.generation;
  node.end = s.end;
  node.end_pc = s.end_pc;
  return add(std::move(node));
}

uint32_t StackMemo::find(uint32_t parent, const lj_rec_frame* raw, uint32_t n,
                         uint64_t hash) const {
  return probe(hash, [&](const Node& node) {
    return node.parent == parent && node.nraw == n &&
           std::memcmp(node.raw.data(), raw, n * sizeof(lj_rec_frame)) == 0;
  });
}

uint32_t StackMemo::add(Node&& node) {
  const auto id = static_cast<uint32_t>(nodes_.size());
  size_t i = node.hash & (slots_.size() - 1);
  while (slots_[i] != 0) i = (i + 1) & (slots_.size() - 1);
  slots_[i] = id + 1;
  nodes_.push_back(std::move(node));
  return id;
}

StackTable::Entry& StackMemo::entry_of(uint32_t leaf, uint32_t pid) {
  std::vector<uint32_t> ids;
  for (uint32_t at = leaf; nodes_[at].parent != kNone; at = nodes_[at].parent) {
    ids.insert(ids.end(), nodes_[at].ids.begin(), nodes_[at].ids.end());
  }
  return stacks_.entry(pid, std::move(ids));
}

const StackMemo::Stack& StackMemo::whole(const lj_rec_sample& s, const ProcessContext& ctx) {
  ++stats_.symbolized;
  AgentCounts counted{};
  result_.stack = &stacks_.entry(s.pid, symbolizer_.frames(s, ctx, counted));
  result_.counted.clear();
  for (uint32_t id = 0; id < counted.size(); ++id) {
    if (counted[id] != 0) result_.counted.emplace_back(id, counted[id]);
  }
  return result_;
}

void StackMemo::clear() {
  last_n_ = 0;
  last_context_ = kNone;
  nodes_.clear();
  std::fill(slots_.begin(), slots_.end(), 0);
}

}  // namespace ljprof::record
