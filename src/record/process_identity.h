// record/process_identity.h: who a process is, from /proc — its names, the LuaJIT runtime it
// runs, the service it says it is, its cgroup — for the recorder's -a filters and the labels
// `ljprof agent` gives its profiles.
#pragma once

#include <cstdint>
#include <string>

#include "record/process_context.h"
#include "record/recorder.h"

namespace ljprof::record {

std::string read_comm(uint32_t pid);        // /proc/PID/comm; "" if unreadable
std::string executable_name(uint32_t pid);  // the basename of /proc/PID/exe; "" if unreadable

// The value of the first of `names` set in /proc/PID/environ (the environment the process
// started with); "" if none is, or the file is unreadable (at most kMaxEnvironBytes are read).
std::string environment_value(uint32_t pid, std::initializer_list<std::string_view> names);
inline constexpr size_t kMaxEnvironBytes = 1 << 20;

// Whether one of the process's cgroups (/proc/PID/cgroup: the v2 path, or any v1 hierarchy's)
// is `prefix` or lies below it ("/system.slice/tarantool@app.service" is below
// "/system.slice"). An empty prefix matches every process.
bool in_cgroup(uint32_t pid, const std::string& prefix);

// The identity of a process whose context was just built: runtime "openresty" for nginx and
// openresty executables, "tarantool" when the VM is Tarantool's, else "luajit".
ProcessIdentity identify_process(uint32_t pid, const ProcessContext& ctx);

}  // namespace ljprof::record
