// proc/identity.h: who a process is, from /proc — its names, its environment, its cgroups —
// for the recorder's -a filters and the labels `ljprof agent` gives its profiles.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

namespace ljprof::proc {

std::string read_comm(uint32_t pid);        // /proc/PID/comm; "" if unreadable
std::string executable_name(uint32_t pid);  // the basename of /proc/PID/exe; "" if unreadable
// The target of /proc/PID/exe as the kernel words it (a replaced file ends in " (deleted)", as
// its lines of /proc/PID/maps do); "" if unreadable.
std::string executable_path(uint32_t pid);

// The value of the first of `names` set in /proc/PID/environ (the environment the process
// started with); "" if none is, or the file is unreadable (at most kMaxEnvironBytes are read).
std::string environment_value(uint32_t pid, std::initializer_list<std::string_view> names);
inline constexpr size_t kMaxEnvironBytes = 1 << 20;

// Whether one of the process's cgroups (/proc/PID/cgroup: the v2 path, or any v1 hierarchy's)
// is `prefix` or lies below it ("/system.slice/tarantool@app.service" is below
// "/system.slice"). An empty prefix matches every process.
bool in_cgroup(uint32_t pid, const std::string& prefix);

}  // namespace ljprof::proc
