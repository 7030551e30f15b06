#include "support/nginx_lua.h"

#include <signal.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

namespace ljprof::test {

namespace {

void write_conf(const std::string& dir, const std::string& tree, int port, bool jit_off) {
  std::ofstream conf(dir + "/nginx.conf");
  conf << "load_module " << tree << "/usr/lib/nginx/modules/ndk_http_module.so;\n"
       << "load_module " << tree << "/usr/lib/nginx/modules/ngx_http_lua_module.so;\n"
       << "daemon off;\nmaster_process on;\nworker_processes 1;\n"
       << "error_log " << dir << "/error.log;\npid " << dir << "/nginx.pid;\n"
       << "events { worker_connections 16; }\nhttp {\n  access_log off;\n"
       << "  lua_package_path \"" << record_workloads_dir() << "/?.lua;" << tree
       << "/usr/share/lua/5.1/?.lua;;\";\n";
  for (const char* temp : {"client_body", "proxy", "fastcgi", "uwsgi", "scgi"}) {
    conf << "  " << temp << "_temp_path " << dir << "/" << temp << ";\n";
  }
  // The master runs init_by_lua before it forks the worker, which inherits the VM's mode.
  if (jit_off) conf << "  init_by_lua_block { jit.off() }\n";
  conf << "  server {\n    listen 127.0.0.1:" << port << ";\n"
       << "    location / { content_by_lua_file " << record_workloads_dir()
       << "/nginx_split.lua; }\n"
       << "  }\n}\n";
}

}  // namespace

NginxLua::NginxLua(const std::string& dir, bool jit_off) : dir_(dir) {
  const std::string tree = fixture("nginx-lua");
  if (!file_exists(tree + "/usr/lib/nginx/modules/ngx_http_lua_module.so")) {
    error_ = tree + ": no nginx-lua tree; run scripts/bootstrap";
    return;
  }
  run({"rm", "-rf", dir_});
  run({"mkdir", "-p", dir_});
  port_ = free_loopback_port();
  write_conf(dir_, tree, port_, jit_off);
  master_ = std::make_unique<Background>(
      std::vector<std::string>{"env", "LD_LIBRARY_PATH=" + tree + "/usr/lib/x86_64-linux-gnu",
                               "/usr/sbin/nginx", "-p", dir_, "-c", dir_ + "/nginx.conf"},
      dir_ + "/nginx.out");
  bool up = false;
  for (int i = 0; i < 100 && !up && master_->running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    up = port_open(port_);
  }
  if (!up) {
    error_ = "nginx did not listen on 127.0.0.1:" + std::to_string(port_) + "\n" + logs();
    return;
  }
  const HttpResponse reply = http_get(port_, "/pid", 5000);
  if (reply.status != 200) {
    error_ = "GET /pid: " + std::to_string(reply.status) + " " + reply.body + "\n" + logs();
    return;
  }
  worker_ = std::stoi(reply.body);
  if (worker_ == master_->pid()) error_ = "expected a worker process forked by the master";
}

NginxLua::~NginxLua() {
  if (worker_ > 0) ::kill(worker_, SIGKILL);
}

std::string NginxLua::logs() const {
  return read_text(dir_ + "/error.log") + read_text(dir_ + "/nginx.out");
}

int NginxLua::stop() {
  if (!master_) return -1;
  ::kill(master_->pid(), SIGTERM);
  return master_->wait(10000);
}

}  // namespace ljprof::test
