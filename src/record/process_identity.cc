#include "record/process_identity.h"

#include "luajit/runtime.h"

namespace ljprof::record {

ProcessIdentity identify_process(uint32_t pid, const ProcessContext& ctx) {
  ProcessIdentity id;
  id.pid = pid;
  id.comm = ctx.comm;
  id.executable = proc::executable_name(pid);
  const bool nginx = id.executable == "nginx" || id.executable == "openresty" ||
                     id.comm == "nginx" || id.comm == "openresty";
  const bool tarantool = id.executable == "tarantool" ||
                         (ctx.luajit != nullptr && ctx.luajit->object->luajit &&
                          ctx.luajit->object->luajit->runtime == luajit::Runtime::Tarantool);
  id.runtime = nginx ? "openresty" : tarantool ? "tarantool" : "luajit";
  id.service = proc::environment_value(pid, {"OTEL_SERVICE_NAME", "PYROSCOPE_APPLICATION_NAME"});
  return id;
}

}  // namespace ljprof::record
