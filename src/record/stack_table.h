// record/stack_table.h: the symbolized stacks of a recording and their sample counts, every
// distinct frame stored once. A profile of varied stacks (recursion, many call sites) holds
// thousands of stacks that share a few hundred frames; keeping a stack as a list of frame ids
// makes it a few bytes per frame instead of a profile::Frame with four strings, and its hash and
// comparison integer work.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

#include "profile/profile.h"

namespace ljprof::record {

class StackTable {
 public:
  struct Key {
    uint32_t pid = 0;
    std::vector<uint32_t> frames;  // frame ids, leaf first
    uint32_t fiber = 0;            // the fiber's number in fibers_ + 1; 0 for samples of no fiber
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const;
  };
  using Entry = std::pair<const Key, int64_t>;  // the stack and its sample count

  // The entry of (pid, frames), added with count 0 when new. Entries stay where they are until
  // clear(), whatever is added meanwhile.
  Entry& entry(uint32_t pid, std::vector<profile::Frame>&& frames);
  // The same by frame ids (intern's, or an entry's), leaf first.
  Entry& entry(uint32_t pid, std::vector<uint32_t>&& ids);
  // The id of a frame, added when new; ids stay valid until clear().
  uint32_t intern(profile::Frame&& f);
  // The entry of `stack`'s pid and frames as run by `fiber` (a Tarantool fiber: the same
  // frames on two fibers are two samples, labelled apart), added with count 0 when new. A fiber
  // of id 0 is no fiber: `stack` itself.
  Entry& on_fiber(Entry& stack, const profile::SampleFiber& fiber);
  // The frames of an entry's stack, leaf first.
  std::vector<profile::Frame> frames(const Entry& e) const;
  // An entry as a profile sample (pid, frames, count, fiber).
  profile::Sample sample_of(const Entry& e) const;
  // Every entry with a count above 0, as a profile sample (pid, frames, count, fiber).
  void for_each(const std::function<void(profile::Sample)>& f) const;
  size_t stack_count() const { return stacks_.size(); }
  size_t frame_count() const { return by_id_.size(); }
  void clear();

 private:
  struct FrameHash {
    size_t operator()(const profile::Frame& f) const;
  };
  std::unordered_map<profile::Frame, uint32_t, FrameHash> ids_;
  std::vector<const profile::Frame*> by_id_;  // keys of ids_ (nodes do not move)
  std::unordered_map<Key, int64_t, KeyHash> stacks_;
  std::map<profile::SampleFiber, uint32_t> fiber_ids_;  // fibers seen, numbered from 1
  std::vector<const profile::SampleFiber*> fibers_;     // keys of fiber_ids_, by id - 1
  // (stack entry, fiber number) -> the fiber's entry of that stack: every sample of a Tarantool
  // main thread takes this path, and the lookup spares copying and hashing the stack's frames.
  struct OnFiberHash {
    size_t operator()(const std::pair<const Entry*, uint32_t>& k) const;
  };
  std::unordered_map<std::pair<const Entry*, uint32_t>, Entry*, OnFiberHash> on_fiber_;
};

}  // namespace ljprof::record
