// `ljprof inspect` end to end on the real binaries. Oracles: readelf (symbols, build-id,
// machine, sections), ldd (where the dynamic loader finds libluajit).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "support/test_support.h"

namespace ljprof {
namespace {

using Json = nlohmann::json;
using test::run;

test::CommandResult inspect(std::vector<std::string> args) {
  args.insert(args.begin(), {test::ljprof_bin(), "inspect"});
  return run(args);
}

Json inspect_json(const std::string& path, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"--json", path};
  args.insert(args.end(), extra.begin(), extra.end());
  test::CommandResult r = inspect(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;
  return Json::parse(r.out);
}

struct ReadelfFacts {
  std::map<std::string, uint64_t> defined;  // name -> value, first definition (.symtab first)
  std::string machine;
  std::string build_id;
  bool has_symtab = false;
  bool has_debug_info = false;
};

ReadelfFacts readelf_facts(const std::string& path) {
  ReadelfFacts facts;
  test::CommandResult r = run({"readelf", "-W", "-h", "-S", "-s", "-n", path});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  static const std::regex sym_re(
      R"(^\s*\d+:\s+([0-9a-f]+)\s+\d+\s+\S+\s+\S+\s+\S+\s+(\S+)\s+([^@\s]+))");
  static const std::regex machine_re(R"(^\s+Machine:\s+(.*)$)");
  static const std::regex build_id_re(R"(Build ID: ([0-9a-f]+))");
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, sym_re)) {
      if (m[2] != "UND") facts.defined.emplace(m[3], std::stoull(m[1], nullptr, 16));
    } else if (std::regex_match(line, m, machine_re)) {
      facts.machine = m[1];
    } else if (std::regex_search(line, m, build_id_re)) {
      facts.build_id = m[1];
    }
    if (line.find("] .symtab ") != std::string::npos) facts.has_symtab = true;
    if (line.find("] .debug_info ") != std::string::npos) facts.has_debug_info = true;
  }
  return facts;
}

uint64_t hex_value(const Json& v) {
  return std::stoull(v.get<std::string>(), nullptr, 16);
}

// The foundation issue's acceptance check.
TEST(Inspect, TarantoolRuntimeAndAnchorsMatchReadelf) {
  Json j = inspect_json("/usr/bin/tarantool");
  ReadelfFacts want = readelf_facts("/usr/bin/tarantool");
  EXPECT_EQ(j["runtime"]["kind"], "tarantool");
  EXPECT_EQ(j["runtime"]["luajit"], "linked-in");
  for (const char* name : {"lj_vm_asm_begin", "lua_close"}) {
    ASSERT_TRUE(want.defined.count(name)) << name << " missing from readelf";
    ASSERT_FALSE(j["symbols"][name].is_null()) << name;
    EXPECT_EQ(hex_value(j["symbols"][name]["address"]), want.defined[name]) << name;
  }
  // Tarantool keeps lj_vm_asm_begin only in .symtab.
  EXPECT_EQ(j["symbols"]["lj_vm_asm_begin"]["table"], ".symtab");
}

TEST(Inspect, EveryRealBinaryAgreesWithReadelf) {
  for (const test::RealBinary& bin : test::real_binaries()) {
    SCOPED_TRACE(bin.path);
    Json j = inspect_json(bin.path);
    ReadelfFacts want = readelf_facts(bin.path);
    EXPECT_EQ(j["path"], bin.path);
    EXPECT_EQ(j["arch"], want.machine == "AArch64" ? "aarch64" : "x86-64") << want.machine;
    EXPECT_EQ(j["build_id"], want.build_id);
    EXPECT_EQ(j["has_symtab"], want.has_symtab);
    EXPECT_EQ(j["has_debug_info"], want.has_debug_info);
    ASSERT_TRUE(j["symbols"].is_object());
    for (const auto& [name, sym] : j["symbols"].items()) {
      auto it = want.defined.find(name);
      if (it == want.defined.end()) {
        EXPECT_TRUE(sym.is_null()) << name;
      } else {
        ASSERT_FALSE(sym.is_null()) << name;
        EXPECT_EQ(hex_value(sym["address"]), it->second) << name;
      }
    }
    // Classification follows from what readelf shows: a file defining lua_close has LuaJIT
    // linked in.
    EXPECT_EQ(j["runtime"]["luajit"] == "linked-in", want.defined.count("lua_close") == 1);
  }
}

TEST(Inspect, RuntimeKinds) {
  EXPECT_EQ(inspect_json("/usr/bin/luajit")["runtime"]["kind"], "luajit");
  EXPECT_EQ(inspect_json(test::fixture("arm64/usr/bin/luajit"))["runtime"]["kind"], "luajit");
  for (const std::string& lib :
       {std::string("/usr/lib/x86_64-linux-gnu/libluajit-5.1.so.2"),
        test::fixture("arm64/usr/lib/aarch64-linux-gnu/libluajit-5.1.so.2"),
        test::fixture("nginx-lua/usr/lib/x86_64-linux-gnu/libluajit-5.1.so.2")}) {
    EXPECT_EQ(inspect_json(lib)["runtime"]["kind"], "libluajit") << lib;
  }
  // Tarantool under another name, stripped or not, by the module API its .dynsym exports
  // (readelf --dyn-syms lists box_txn_begin and luaT_pushtuple in Debian's tarantool).
  test::TempDir dir;
  const std::string renamed = dir.file("tt-2.6"), stripped = dir.file("server");
  ASSERT_EQ(test::run({"cp", "/usr/bin/tarantool", renamed}).exit_code, 0);
  ASSERT_EQ(test::run({"strip", "--strip-all", "-o", stripped, "/usr/bin/tarantool"}).exit_code, 0);
  const test::CommandResult dynsym = test::run({"readelf", "--dyn-syms", "-W", stripped});
  for (const char* name : {" box_txn_begin\n", " luaT_pushtuple\n"}) {
    ASSERT_NE(dynsym.out.find(name), std::string::npos) << name;
  }
  for (const std::string& exe : {renamed, stripped}) {
    EXPECT_EQ(inspect_json(exe)["runtime"]["kind"], "tarantool") << exe;
  }
  Json nginx = inspect_json("/usr/sbin/nginx");
  EXPECT_EQ(nginx["runtime"]["kind"], "nginx");
  EXPECT_EQ(nginx["runtime"]["luajit"], "loaded-at-run-time");
  EXPECT_TRUE(nginx["runtime"]["needed_libluajit"].is_null());
}

// Where the loader would find the module's libluajit: ldd is the oracle, with and without the
// fixture tree on the library path.
TEST(Inspect, ModuleNeedsLibluajitResolvedLikeLdd) {
  const std::string module =
      test::fixture("nginx-lua/usr/lib/nginx/modules/ngx_http_lua_module.so");
  const std::string tree_lib = test::fixture("nginx-lua/usr/lib/x86_64-linux-gnu");
  auto ldd_path = [&](const std::vector<std::string>& env) {
    std::vector<std::string> argv = {"env"};
    argv.insert(argv.end(), env.begin(), env.end());
    argv.insert(argv.end(), {"ldd", module});
    test::CommandResult r = run(argv);
    std::smatch m;
    static const std::regex re(R"(libluajit-5\.1\.so\.2 => (\S+))");
    EXPECT_TRUE(std::regex_search(r.out, m, re)) << r.out;
    return std::string(m[1]);
  };
  Json system = inspect_json(module);
  EXPECT_EQ(system["runtime"]["luajit"], "needed-library");
  EXPECT_EQ(system["runtime"]["needed_libluajit"]["name"], "libluajit-5.1.so.2");
  EXPECT_EQ(system["runtime"]["needed_libluajit"]["path"], ldd_path({}));

  Json in_tree = inspect_json(module, {"--lib-path", tree_lib});
  EXPECT_EQ(in_tree["runtime"]["needed_libluajit"]["path"],
            ldd_path({"LD_LIBRARY_PATH=" + tree_lib}));
}

TEST(Inspect, TextOutput) {
  test::CommandResult r = inspect({"/usr/bin/tarantool"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("path:       /usr/bin/tarantool"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("runtime:    tarantool"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("lj_vm_asm_begin"), std::string::npos);
}

TEST(Inspect, BadInputExitsTwoWithErrorOnStderrOnly) {
  char dir_template[] = "/tmp/ljprof-inspect-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  // A truncated copy of a real binary.
  std::vector<uint8_t> bytes = test::read_file("/usr/bin/luajit");
  const std::string truncated = dir + "/luajit-truncated";
  {
    std::ofstream out(truncated, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), 4000);
  }
  for (const std::string& bad :
       {std::string("/etc/passwd"), std::string("/nonexistent/binary"), dir, truncated}) {
    for (bool json : {false, true}) {
      SCOPED_TRACE(bad);
      test::CommandResult r = json ? inspect({"--json", bad}) : inspect({bad});
      EXPECT_EQ(r.exit_code, 2);
      EXPECT_TRUE(r.out.empty()) << r.out;
      EXPECT_NE(r.err.find("ljprof inspect: "), std::string::npos) << r.err;
      EXPECT_NE(r.err.find(bad), std::string::npos) << r.err;
    }
  }
  std::remove(truncated.c_str());
  std::remove(dir.c_str());
}

TEST(Inspect, UsageErrorsAndHelp) {
  test::CommandResult none = inspect({});
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_TRUE(none.out.empty() || none.out.find("BINARY") != std::string::npos);
  test::CommandResult help = inspect({"--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("--json"), std::string::npos) << help.out;
  test::CommandResult top = run({test::ljprof_bin(), "--help"});
  EXPECT_EQ(top.exit_code, 0);
  EXPECT_NE(top.out.find("inspect"), std::string::npos) << top.out;
}

}  // namespace
}  // namespace ljprof
