#include "record/stack_table.h"

#include "common/hash.h"

namespace ljprof::record {

size_t StackTable::KeyHash::operator()(const Key& k) const {
  size_t h = std::hash<uint32_t>{}(k.pid);
  for (uint32_t id : k.frames) h = hash_combine(h, id);
  return hash_combine(h, k.fiber);
}

// Every field operator== compares but the strings that follow from others (file from the
// function's chunk, build_id from module): equal frames hash equal, and near-equal ones rarely
// collide.
size_t StackTable::FrameHash::operator()(const profile::Frame& f) const {
  size_t h = std::hash<std::string>{}(f.function);
  h = hash_combine(h, std::hash<std::string>{}(f.module));
  h = hash_combine(h, static_cast<size_t>(f.kind));
  h = hash_combine(h, static_cast<size_t>(f.line));
  h = hash_combine(h, static_cast<size_t>(f.start_line));
  h = hash_combine(h, static_cast<size_t>(f.address));
  h = hash_combine(h, static_cast<size_t>(f.trace));
  return h;
}

uint32_t StackTable::intern(profile::Frame&& f) {
  auto [it, added] = ids_.try_emplace(std::move(f), static_cast<uint32_t>(by_id_.size()));
  if (added) by_id_.push_back(&it->first);
  return it->second;
}

StackTable::Entry& StackTable::entry(uint32_t pid, std::vector<profile::Frame>&& frames) {
  Key key{pid, {}};
  key.frames.reserve(frames.size());
  for (profile::Frame& f : frames) key.frames.push_back(intern(std::move(f)));
  return *stacks_.try_emplace(std::move(key), 0).first;
}

StackTable::Entry& StackTable::entry(uint32_t pid, std::vector<uint32_t>&& ids) {
  return *stacks_.try_emplace(Key{pid, std::move(ids)}, 0).first;
}

size_t StackTable::OnFiberHash::operator()(const std::pair<const Entry*, uint32_t>& k) const {
  return hash_combine(std::hash<const Entry*>{}(k.first), k.second);
}

StackTable::Entry& StackTable::on_fiber(Entry& stack, const profile::SampleFiber& fiber) {
  if (fiber.id == 0) return stack;
  auto [it, added] = fiber_ids_.try_emplace(fiber, static_cast<uint32_t>(fibers_.size() + 1));
  if (added) fibers_.push_back(&it->first);
  Entry*& known = on_fiber_[{&stack, it->second}];
  if (known == nullptr) {
    Key key{stack.first.pid, stack.first.frames, it->second};
    known = &*stacks_.try_emplace(std::move(key), 0).first;
  }
  return *known;
}

std::vector<profile::Frame> StackTable::frames(const Entry& e) const {
  std::vector<profile::Frame> out;
  out.reserve(e.first.frames.size());
  for (uint32_t id : e.first.frames) out.push_back(*by_id_[id]);
  return out;
}

profile::Sample StackTable::sample_of(const Entry& e) const {
  profile::Sample s;
  s.pid = e.first.pid;
  s.frames = frames(e);
  s.count = e.second;
  if (e.first.fiber != 0) s.fiber = *fibers_[e.first.fiber - 1];
  return s;
}

void StackTable::for_each(const std::function<void(profile::Sample)>& f) const {
  for (const Entry& e : stacks_) {
    if (e.second > 0) f(sample_of(e));
  }
}

void StackTable::clear() {
  stacks_.clear();
  on_fiber_.clear();
  fibers_.clear();
  fiber_ids_.clear();
  by_id_.clear();
  ids_.clear();
}

}  // namespace ljprof::record
