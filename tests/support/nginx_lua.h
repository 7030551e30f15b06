// An nginx-lua deployment as it runs in production, for the live tests: Debian's nginx with
// OpenResty's lua module and luajit2 (the fixture tree scripts/bootstrap extracts), a master
// and one worker running tests/record/workloads/nginx_split.lua on a free loopback port.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "support/test_support.h"

namespace ljprof::test {

class NginxLua {
 public:
  // Starts it in `dir` (created afresh) and waits until the worker answers /pid. With `jit_off`
  // the master turns the JIT off in init_by_lua, before it forks the worker.
  NginxLua(const std::string& dir, bool jit_off);
  // Kills the worker (it runs as `nobody` and must never outlive a failed test) and the master.
  ~NginxLua();
  NginxLua(const NginxLua&) = delete;
  NginxLua& operator=(const NginxLua&) = delete;

  const std::string& error() const { return error_; }  // "" once it is up
  int port() const { return port_; }
  pid_t master() const { return master_ ? master_->pid() : 0; }
  pid_t worker() const { return worker_; }
  std::string logs() const;  // error.log and the master's output
  // SIGTERM to the master: its exit status (0 when master and worker shut down normally).
  int stop();

 private:
  std::string dir_;
  std::string error_;
  int port_ = 0;
  std::unique_ptr<Background> master_;
  pid_t worker_ = 0;
};

}  // namespace ljprof::test
