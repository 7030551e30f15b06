#include "report/views.h"

namespace ljprof::report {

Result<ProfileValue> parse_profile_value(const std::string& text) {
  if (text == "cpu") return ProfileValue::Cpu;
  if (text == "off_cpu" || text == "off-cpu") return ProfileValue::OffCpu;
  if (text == "space" || text == "inuse_space") return ProfileValue::Space;
  return make_error("--value {}: expected cpu, off_cpu or space", text);
}

profile::Profile off_cpu_view(const profile::Profile& profile) {
  profile::Profile out;
  out.period_ns = 0;  // counts are microseconds, not samples of a period
  out.start_time_ns = profile.start_time_ns;
  out.duration_ns = profile.duration_ns;
  out.counters = profile.counters;
  out.count_unit = "us off-CPU";
  for (const profile::Sample& s : profile.samples) {
    if (s.off_cpu_ns <= 0 || s.state == "idle") continue;
    profile::Sample v = s;
    v.count = (s.off_cpu_ns + 500) / 1000;
    if (v.count > 0) out.samples.push_back(std::move(v));
  }
  return out;
}

profile::Profile space_view(const profile::Profile& profile) {
  profile::Profile out;
  out.value_type = profile.value_type;
  out.start_time_ns = profile.start_time_ns;
  out.counters = profile.counters;
  out.count_unit = "bytes";
  for (const profile::Sample& s : profile.samples) {
    if (s.bytes <= 0) continue;
    profile::Sample v = s;
    v.count = s.bytes;
    out.samples.push_back(std::move(v));
  }
  return out;
}

ProfileValue default_value(const profile::Profile& profile) {
  if (profile.value_type == profile::ValueType::Heap) return ProfileValue::Space;
  bool cpu = false, off_cpu = false;
  for (const profile::Sample& s : profile.samples) {
    cpu = cpu || s.count > 0;
    off_cpu = off_cpu || s.off_cpu_ns > 0;
  }
  return off_cpu && !cpu ? ProfileValue::OffCpu : ProfileValue::Cpu;
}

}  // namespace ljprof::report
