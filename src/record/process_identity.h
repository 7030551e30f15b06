// record/process_identity.h: the identity of a followed process — the LuaJIT runtime it runs and
// the service it says it is (proc/identity.h reads /proc) — for the labels `ljprof agent` gives
// its profiles.
#pragma once

#include <cstdint>
#include <string>

#include "proc/identity.h"
#include "record/process_context.h"
#include "record/recorder.h"

namespace ljprof::record {

// The identity of a process whose context was just built: runtime "openresty" for nginx and
// openresty executables, "tarantool" when the VM is Tarantool's, else "luajit".
ProcessIdentity identify_process(uint32_t pid, const ProcessContext& ctx);

}  // namespace ljprof::record
