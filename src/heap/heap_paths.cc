// PathNamer (heap/heap_graph_internal.h): shortest paths from the roots named as Lua code writes
// them, and the cache of labelled edges it names them from.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <numeric>
#include <unordered_map>

#include "common/printable.h"
#include "heap/heap_graph.h"
#include "heap/heap_graph_internal.h"

namespace ljprof::heap {

namespace {

constexpr size_t kMaxKeyText = 40;    // characters of a string key shown in a path
constexpr size_t kMaxPathText = 400;  // characters of a whole path

bool is_identifier(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char ch : s) {
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_') return false;
  }
  return true;
}

// A clause that starts a path over (the way to its function or thread is a path of its own).
bool restarts(EdgeKind k) {
  switch (k) {
    case EdgeKind::Upvalue:
    case EdgeKind::CUpvalue:
    case EdgeKind::Prototype:
    case EdgeKind::Constant:
    case EdgeKind::ChunkName:
    case EdgeKind::StackSlot:
    case EdgeKind::OpenUpvalue:
    case EdgeKind::TraceProto:
      return true;
    default:
      return false;
  }
}

}  // namespace

PathNamer::PathNamer(const Memory& mem, const Census& census, const Graph& graph,
                     const ThreadNames& thread_names)
    : mem_(mem),
      census_(census),
      thread_names_(thread_names),
      root_(graph.root),
      labels_(mem, census) {
  const size_t n = graph.first.size() - 1;
  parent_.assign(n, kUnreached);
  std::deque<uint32_t> queue{graph.root};
  parent_[graph.root] = graph.root;
  while (!queue.empty()) {
    const uint32_t v = queue.front();
    queue.pop_front();
    for (uint32_t e = graph.first[v]; e < graph.first[v + 1]; ++e) {
      const uint32_t w = graph.edges[e];
      if (parent_[w] != kUnreached) continue;
      parent_[w] = v;
      // A leaf leads nowhere: not queued (a heap is half leaves, and the queue's widest level
      // is mostly them).
      if (!graph.is_leaf(w)) queue.push_back(w);
    }
  }
}

EdgeLabelCache::Entry& EdgeLabelCache::of(uint32_t v) {
  if (!recent_.empty() && recent_.front().node == v) return recent_.front();
  if (auto hit = where_.find(v); hit != where_.end()) {
    recent_.splice(recent_.begin(), recent_, hit->second);
    return *hit->second;
  }
  recent_.push_front({v, labelled_edges(mem_, census_, v), {}, {}, 0});
  Entry& fresh = recent_.front();
  // The rows read for names leave the core's pages they touched resident (a big table's array
  // part: 100 MiB of a 1 GiB heap's core, after the walk's arrays had gone down).
  read_since_release_ += fresh.edges.size() + 1;
  if (read_since_release_ >= kEdgesPerRelease) {
    mem_.release();
    read_since_release_ = 0;
  }
  where_[v] = recent_.begin();
  if (fresh.edges.size() >= kIndexFrom) {
    // Which positions are the first to their target, in one pass: a bit per node, set for the
    // row's targets as they come, cleared after.
    if (seen_.empty()) seen_.assign(census_.objects.size() / 64 + 1, 0);
    fresh.first_of_target.resize(fresh.edges.size());
    for (size_t i = 0; i < fresh.edges.size(); ++i) {
      const uint32_t to = fresh.edges[i].to;
      const uint64_t bit = uint64_t{1} << (to % 64);
      fresh.first_of_target[i] = (seen_[to / 64] & bit) == 0;
      seen_[to / 64] |= bit;
    }
    for (const Edge& e : fresh.edges) seen_[e.to / 64] = 0;
  }
  edges_ += fresh.edges.size();
  // The newest stays, whatever its size.
  while (edges_ > kMaxEdges && recent_.size() > 1) {
    edges_ -= recent_.back().edges.size();
    where_.erase(recent_.back().node);
    recent_.pop_back();
  }
  return fresh;
}

const Edge* EdgeLabelCache::first_to(uint32_t parent, uint32_t child) {
  Entry& row = of(parent);
  if (row.first_of_target.empty()) {  // a short row
    for (const Edge& e : row.edges) {
      if (e.to == child) return &e;
    }
    return nullptr;
  }
  if (row.next < row.edges.size() && row.edges[row.next].to == child &&
      row.first_of_target[row.next]) {
    return &row.edges[row.next++];
  }
  if (row.by_target.empty()) {  // the first name asked out of the row's order
    row.by_target.resize(row.edges.size());
    std::iota(row.by_target.begin(), row.by_target.end(), 0u);
    std::stable_sort(row.by_target.begin(), row.by_target.end(),
                     [&](uint32_t a, uint32_t b) { return row.edges[a].to < row.edges[b].to; });
  }
  auto it = std::lower_bound(row.by_target.begin(), row.by_target.end(), child,
                             [&](uint32_t pos, uint32_t to) { return row.edges[pos].to < to; });
  if (it == row.by_target.end() || row.edges[*it].to != child) return nullptr;
  row.next = *it + 1;
  return &row.edges[*it];
}

Edge PathNamer::via(uint32_t v) const {
  const Edge* e = labels_.first_to(parent_[v], v);
  return e != nullptr ? *e : Edge{v, 0, EdgeKind::Changed};
}

std::string PathNamer::string_at(uint64_t s, size_t max) const {
  const lj_luajit_info& in = mem_.info();
  const uint32_t len = mem_.get<uint32_t>(s + in.str_len).value_or(0);
  std::string text(std::min<size_t>(len, max), '\0');
  if (!mem_.read(s + in.str_data, text.data(), text.size())) return "?";
  return printable_text(text) + (len > max ? "…" : "");
}

std::string PathNamer::proto_name(uint64_t pt) const {
  const lj_luajit_info& in = mem_.info();
  auto chunk = mem_.ref(pt + in.pt_chunkname);
  const uint32_t line = mem_.get<uint32_t>(pt + in.pt_firstline).value_or(0);
  std::string name = chunk && *chunk != 0 ? string_at(*chunk, 120) : "?";
  if (!name.empty() && (name[0] == '@' || name[0] == '=')) name.erase(0, 1);
  return fmt::format("<{}:{}>", name, line);
}

std::string PathNamer::function_name(uint64_t fn) const {
  const lj_luajit_info& in = mem_.info();
  if (mem_.get<uint8_t>(fn + in.fn_ffid).value_or(1) != 0)
    return fmt::format("C function {:#x}", fn);
  auto pc = mem_.ref(fn + in.fn_pc);
  if (!pc) return fmt::format("function {:#x}", fn);
  return "function " + proto_name(*pc - static_cast<uint64_t>(in.pt_size));
}

// lj_debug.c debug_uvname: GCproto.uvinfo holds the upvalue names, NUL-terminated, in order.
std::string PathNamer::upvalue_name(uint64_t fn, uint64_t index) const {
  const lj_luajit_info& in = mem_.info();
  auto pc = mem_.ref(fn + in.fn_pc);
  if (!pc) return fmt::format("#{}", index + 1);
  auto info = mem_.ref(*pc - static_cast<uint64_t>(in.pt_size) + in.pt_uvinfo);
  if (!info || *info == 0) return fmt::format("#{}", index + 1);
  char buf[256];
  uint64_t at = *info;
  for (uint64_t i = 0; i <= index; ++i) {
    if (!mem_.read(at, buf, sizeof buf)) return fmt::format("#{}", index + 1);
    const void* nul = std::memchr(buf, 0, sizeof buf);
    if (nul == nullptr) return fmt::format("#{}", index + 1);
    const size_t len = static_cast<const char*>(nul) - buf;
    if (i == index) return "'" + printable_text(std::string(buf, len)) + "'";
    at += len + 1;
  }
  return fmt::format("#{}", index + 1);
}

std::string PathNamer::thread_name(uint64_t L) const {
  if (L == census_.main_thread) return "main thread";
  auto named = thread_names_.find(L);
  return named != thread_names_.end() ? named->second : fmt::format("thread {:#x}", L);
}

// "local 'held' of thread 0x… at app.lua:40" (a fiber's: "of fiber 104 \"worker\""); a temporary
// or a frame whose pc is not known "local #2 of thread 0x… in function <app.lua:12>"; a C frame's
// slot "slot 5 of thread 0x…".
std::string PathNamer::slot_name(uint64_t L, uint64_t slot) const {
  auto owner = name_stack_slot(mem_, L, slot);
  if (!owner) return fmt::format("slot {} of {}", slot, thread_name(L));
  const std::string fn = function_name(owner->fn);
  if (!owner->name.empty() && owner->line != 0) {
    // function_name is "function <chunk:firstline>": the chunk, then the current line.
    const size_t open = fn.find('<'), colon = fn.rfind(':');
    const std::string chunk =
        open != std::string::npos && colon > open ? fn.substr(open + 1, colon - open - 1) : "?";
    return fmt::format("local '{}' of {} at {}:{}", printable_text(owner->name), thread_name(L),
                       chunk, owner->line);
  }
  return fmt::format("local #{} of {} in {}", owner->reg, thread_name(L), fn);
}

std::string PathNamer::key_text(uint64_t raw, bool as_key) const {
  const bool gc64 = mem_.gc64();
  const uint32_t itype = gc64 ? static_cast<uint32_t>(static_cast<int64_t>(raw) >> 47)
                              : static_cast<uint32_t>(raw >> 32);
  auto v = decode_tvalue(raw, gc64);
  if (v && v->gct == static_cast<uint8_t>(Gct::Str)) {
    const std::string s = string_at(v->addr, kMaxKeyText);
    if (as_key) return "[key \"" + s + "\"]";
    return is_identifier(s) ? "." + s : "[\"" + s + "\"]";
  }
  if (v) return fmt::format("[{}{} {:#x}]", as_key ? "key " : "", gct_name(v->gct), v->addr);
  if (itype == 0xfffffffeu) return "[false]";  // LJ_TFALSE
  if (itype == 0xfffffffdu) return "[true]";   // LJ_TTRUE
  if (itype < 0xfffffff2u || !gc64) {          // a number (below LJ_TISNUM)
    double d;
    std::memcpy(&d, &raw, sizeof d);
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 1e15) {
      return fmt::format("[{}]", static_cast<int64_t>(d));
    }
    return fmt::format("[{}]", d);
  }
  return "[?]";
}

std::optional<uint64_t> PathNamer::hash_key(uint32_t parent, const Edge& e) const {
  const lj_luajit_info& in = mem_.info();
  if (parent >= census_.objects.size()) return std::nullopt;
  const uint64_t t = census_.objects[parent].addr();
  auto node = mem_.ref(t + in.tab_node);
  const uint32_t hmask = mem_.get<uint32_t>(t + in.tab_hmask).value_or(0);
  if (!node || e.aux > hmask) return std::nullopt;
  const uint64_t at = *node + uint64_t{e.aux} * in.node_size;
  auto val = mem_.get<uint64_t>(at);
  auto key = mem_.get<uint64_t>(at + in.node_key);
  if (!val || !key) return std::nullopt;
  auto held = decode_tvalue(e.kind == EdgeKind::HashKey ? *key : *val, mem_.gc64());
  if (!held || held->addr != census_.objects[e.to].addr()) return std::nullopt;
  return *key;
}

std::string PathNamer::edge_text(uint32_t parent, const Edge& e, const std::string& before) const {
  const uint64_t from = parent < census_.objects.size() ? census_.objects[parent].addr() : 0;
  switch (e.kind) {
    case EdgeKind::RootGlobals:
      return "_G";
    case EdgeKind::RootRegistry:
      return "registry";
    case EdgeKind::RootMainThread:
      return "main thread";
    case EdgeKind::RootGcRoot:
      return fmt::format("gcroot[{}]", e.aux);
    case EdgeKind::RootTrace:
      return "JIT trace";
    case EdgeKind::RootFinalizing:
      return "userdata being finalized";
    case EdgeKind::ArraySlot:
      return before + fmt::format("[{}]", e.aux);
    case EdgeKind::HashValue: {
      const auto raw = hash_key(parent, e);
      const std::string key = raw ? key_text(*raw, false) : "[?]";
      if (before == "registry" && key == "._LOADED") return "package.loaded";
      return before + key;
    }
    case EdgeKind::HashKey: {
      const auto raw = hash_key(parent, e);
      return before + (raw ? key_text(*raw, true) : "[key ?]");
    }
    case EdgeKind::Metatable:
      return before + "[metatable]";
    case EdgeKind::Env:
      return before + "[env]";
    case EdgeKind::Upvalue:
      return "upvalue " + upvalue_name(from, e.aux) + " of " + function_name(from);
    case EdgeKind::UpvalueValue:
      return before;
    case EdgeKind::CUpvalue:
      return fmt::format("upvalue #{} of {}", e.aux + 1, function_name(from));
    case EdgeKind::Prototype:
      return "prototype of " + function_name(from);
    case EdgeKind::Constant:
      return "constant of " + proto_name(from);
    case EdgeKind::ChunkName:
      return "chunk name of " + proto_name(from);
    case EdgeKind::StackSlot:
      return slot_name(from, e.aux);
    case EdgeKind::OpenUpvalue:
      return "open upvalue of " + thread_name(from);
    case EdgeKind::TraceProto:
      return fmt::format("start of JIT trace {:#x}", from);
    case EdgeKind::Changed:
      return before + "[?]";
  }
  return before;
}

std::string PathNamer::path(uint32_t v) const {
  if (parent_[v] == kUnreached) return "(unreached)";
  std::vector<uint32_t> chain;
  for (uint32_t u = v; u != root_ && chain.size() < (1u << 20); u = parent_[u]) {
    chain.push_back(u);
  }
  // Only the part after the last restart matters: find it, then name forward from there.
  std::vector<Edge> steps;  // chain[i]'s edge from its parent
  for (size_t i = 0; i < chain.size(); ++i) {
    steps.push_back(via(chain[i]));
    if (restarts(steps.back().kind)) break;
  }
  std::string text;
  for (size_t i = steps.size(); i-- > 0;) {
    text = edge_text(parent_[chain[i]], steps[i], text);
    if (text.size() > kMaxPathText) return text.substr(0, kMaxPathText) + "…";
  }
  return text;
}

std::string PathNamer::step(uint32_t v) const {
  if (parent_[v] == kUnreached) return "(unreached)";
  // A closed upvalue's value adds nothing to a path; as a frame of its own it needs a name.
  const Edge e = via(v);
  if (e.kind == EdgeKind::UpvalueValue) return "[value]";
  return edge_text(parent_[v], e, "");
}

std::string PathNamer::frame(uint32_t v) const {
  if (parent_[v] == kUnreached) return "(unreached)";
  const Edge e = via(v);
  if (e.kind == EdgeKind::ArraySlot) return "[*]";
  if (e.kind == EdgeKind::HashValue || e.kind == EdgeKind::HashKey) {
    // A record's fields keep their names; a big map's keys (1024 hash slots or more) are one
    // frame.
    const uint64_t t = census_.objects[parent_[v]].addr();
    const bool map = mem_.get<uint32_t>(t + mem_.info().tab_hmask).value_or(0) >= 1023;
    const auto raw = hash_key(parent_[v], e);
    auto key = raw ? decode_tvalue(*raw, mem_.gc64()) : std::nullopt;
    if (map || !key || key->gct != static_cast<uint8_t>(Gct::Str)) {
      return e.kind == EdgeKind::HashKey ? "[key *]" : "[*]";
    }
  }
  return step(v);
}

}  // namespace ljprof::heap
