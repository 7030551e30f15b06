#include "heap/heap_profile.h"

#include <chrono>

namespace ljprof::heap {

profile::Profile heap_profile(const Retainers& retainers) {
  profile::Profile p;
  p.value_type = profile::ValueType::Heap;
  p.count_unit = "objects";
  p.start_time_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();
  p.samples.reserve(retainers.profile.size());
  for (const ProfileEntry& e : retainers.profile) {
    profile::Sample s;
    s.count = static_cast<int64_t>(e.count);
    s.bytes = static_cast<int64_t>(e.bytes);
    for (size_t i = e.frames.size(); i-- > 0;) {
      profile::Frame f;
      f.kind = profile::FrameKind::Lua;
      f.function = e.frames[i];
      s.frames.push_back(std::move(f));
    }
    p.samples.push_back(std::move(s));
  }
  p.counters["unreached objects"] = retainers.unreached_count;
  p.counters["unreached bytes"] = retainers.unreached_bytes;
  return p;
}

void subtract_base(profile::Profile& current, const profile::Profile& base) {
  for (const profile::Sample& b : base.samples) {
    profile::Sample s = b;
    s.count = -b.count;
    s.bytes = -b.bytes;
    current.samples.push_back(std::move(s));
  }
}

}  // namespace ljprof::heap
