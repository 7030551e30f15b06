// `ljprof inspect --verify-live PID` on real running workloads: Debian luajit, Debian
// tarantool and an nginx worker running a content_by_lua_block (OpenResty's libluajit2 from
// the fixture tree). The workloads run Lua with the JIT off so stops land in the interpreter;
// after the check the target must still be running. Each workload says when its Lua code runs
// (a "ready" line, a file), and the check waits for that, not for a fixed time.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "support/test_support.h"

namespace ljprof {
namespace {

constexpr const char* kFib =
    "jit.off() local function f(n) if n < 2 then return n end return f(n-1) + f(n-2) end ";
// Then: says it runs and loops until killed.
constexpr const char* kReadyLoop = "io.write('ready\\n') io.stdout:flush() while true do f(25) end";

using test::Background;

nlohmann::json verify_live(pid_t pid) {
  test::CommandResult r =
      test::run({test::ljprof_bin(), "inspect", "--verify-live", std::to_string(pid), "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  if (r.out.empty()) return {};
  return nlohmann::json::parse(r.out);
}

// `chunk_prefix`: the start of the chunk name the VM gave the running code.
void expect_all_pass(const nlohmann::json& j, const std::string& chunk_prefix) {
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["pass"], true) << j.dump(2);
  ASSERT_EQ(j["checks"].size(), 6u) << j.dump(2);
  for (const auto& c : j["checks"]) EXPECT_EQ(c["result"], "PASS") << c.dump();
  // The chunk name read through the extracted GCstr layout is the one the VM gave the code.
  EXPECT_NE(j["checks"].back()["detail"].get<std::string>().find("chunkname=\"" + chunk_prefix),
            std::string::npos)
      << j.dump(2);
}

TEST(VerifyLive, DebianLuajit) {
  test::TempDir dir;
  Background lua({"/usr/bin/luajit", "-e", std::string(kFib) + kReadyLoop}, dir.file("out"));
  ASSERT_GT(lua.pid(), 0);
  ASSERT_TRUE(test::wait_for_text(dir.file("out"), "ready", 60))
      << test::read_text(dir.file("out"));
  nlohmann::json j = verify_live(lua.pid());
  expect_all_pass(j, "=(command line)\"");
  EXPECT_EQ(j["module"], "/usr/bin/luajit");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_TRUE(lua.running()) << "the target must keep running";
}

TEST(VerifyLive, DebianTarantool) {
  const std::string dir = testing::TempDir() + "/ljprof-tt-" + std::to_string(getpid());
  mkdir(dir.c_str(), 0700);
  const std::string script = dir + "/fib.lua";
  std::ofstream(script) << kFib << kReadyLoop << "\n";
  Background tt({"/usr/bin/tarantool", script}, dir + "/out");
  ASSERT_GT(tt.pid(), 0);
  ASSERT_TRUE(test::wait_for_text(dir + "/out", "ready", 60)) << test::read_text(dir + "/out");
  nlohmann::json j = verify_live(tt.pid());
  expect_all_pass(j, "@" + script + "\"");
  EXPECT_EQ(j["module"], "/usr/bin/tarantool");
  EXPECT_TRUE(tt.running());
  test::run({"rm", "-rf", dir});
}

TEST(VerifyLive, NginxLuaWorker) {
  const std::string tree = test::fixture("nginx-lua");
  const std::string dir = testing::TempDir() + "/ljprof-nginx-" + std::to_string(getpid());
  mkdir(dir.c_str(), 0700);
  const int port = test::free_loopback_port();  // not a port another test holds
  {
    std::ofstream conf(dir + "/nginx.conf");
    conf << "load_module " << tree << "/usr/lib/nginx/modules/ndk_http_module.so;\n"
         << "load_module " << tree << "/usr/lib/nginx/modules/ngx_http_lua_module.so;\n"
         << "daemon off;\nmaster_process off;\nerror_log " << dir << "/error.log;\n"
         << "pid " << dir << "/nginx.pid;\nevents { worker_connections 16; }\n"
         << "http {\n access_log off;\n lua_package_path \"" << tree
         << "/usr/share/lua/5.1/?.lua;;\";\n"
         << " client_body_temp_path " << dir << "/body;\n"
         << " server {\n  listen 127.0.0.1:" << port << ";\n"
         << "  location /burn { content_by_lua_block { " << kFib << " io.open('" << dir
         << "/burning', 'w'):close()"
         << " local t = ngx.now() while ngx.now() - t < 120 do f(22) ngx.update_time() end "
            "ngx.say('done') } }\n"
         << " }\n}\n";
  }
  Background nginx({"env", "LD_LIBRARY_PATH=" + tree + "/usr/lib/x86_64-linux-gnu",
                    "/usr/sbin/nginx", "-p", dir, "-c", dir + "/nginx.conf"});
  ASSERT_GT(nginx.pid(), 0);
  bool up = false;
  for (int i = 0; i < 100 && !up; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    up = test::port_open(port);
  }
  std::ifstream log(dir + "/error.log");
  std::string log_text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  ASSERT_TRUE(up) << "nginx did not listen on 127.0.0.1:" << port << "\n" << log_text;
  // The handler burns (until nginx is killed at the end) once it has written `burning`.
  Background request({"curl", "-s", "-o", "/dev/null", "--max-time", "10",
                      "http://127.0.0.1:" + std::to_string(port) + "/burn"});
  ASSERT_TRUE(test::wait_until([&] { return test::file_exists(dir + "/burning"); }, 60))
      << test::read_text(dir + "/error.log");
  nlohmann::json j = verify_live(nginx.pid());
  expect_all_pass(j, "=content_by_lua(nginx.conf:");
  EXPECT_NE(j["module"].get<std::string>().find("nginx-lua/usr/lib/x86_64-linux-gnu/libluajit"),
            std::string::npos)
      << j.dump(2);
  EXPECT_TRUE(nginx.running());
  test::run({"rm", "-rf", dir});
}

TEST(VerifyLive, RejectsANonLuaProcess) {
  Background sleeper({"sleep", "30"});
  ASSERT_GT(sleeper.pid(), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  test::CommandResult r =
      test::run({test::ljprof_bin(), "inspect", "--verify-live", std::to_string(sleeper.pid())});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("lua_close"), std::string::npos) << r.err;
  EXPECT_TRUE(sleeper.running());
}

}  // namespace
}  // namespace ljprof
