// report/views.h: which value of a profile the text outputs (top table, folded stacks, flame
// graph) weigh stacks by. A recording with --off-cpu holds CPU samples and off-CPU time side by
// side (pprof sample types samples, cpu and off_cpu); these outputs show one at a time.
#pragma once

#include <string>

#include "common/result.h"
#include "profile/profile.h"

namespace ljprof::report {

enum class ProfileValue { Cpu, OffCpu, Space };

// "cpu", "off_cpu" (also "off-cpu") or "space" (also "inuse_space"); an error naming the value
// and the choices otherwise.
Result<ProfileValue> parse_profile_value(const std::string& text);

// The profile as the off-CPU view: every sample with off-CPU time and a state other than "idle"
// (profile/profile_frames.h is_idle_wait: an event loop waiting for work is not a problem),
// its count the time in microseconds (count_unit "us off-CPU"); the others dropped.
profile::Profile off_cpu_view(const profile::Profile& profile);

// A heap profile (`ljprof heap -o`) as the bytes view: every sample with bytes, its count its
// bytes (count_unit "bytes"); a diff's shrunk stacks (negative bytes) dropped.
profile::Profile space_view(const profile::Profile& profile);

// The value to show when the user did not choose: space for a heap profile; off-CPU when the
// profile has off-CPU time and no CPU sample, else CPU.
ProfileValue default_value(const profile::Profile& profile);

}  // namespace ljprof::report
