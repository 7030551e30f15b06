// Golden matrix of the one walker on real cores. Each workload (tests/walker/workloads) prints the
// Lua VM's own debug.traceback() and aborts in the same statement; the core is written by gdb
// (amd64) or by qemu-user (arm64). Oracles:
//  - Lua frames must equal the traceback frame for frame (source, line, first line, main chunk,
//    C functions and the C entry address LuaJIT prints for them);
//  - native frames must equal gdb's backtrace of the same core (amd64), with gdb's one frame per
//    interpreter entry removed (the walker replaces it by the Lua frames it stands for). The
//    interpreter's range comes from readelf: LuaJIT's single large FDE whose CIE has a personality
//    ("zPR");
//  - every stack must end at a proven root.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <tuple>

#include "support/tarantool_copies.h"
#include "support/test_support.h"
#include "traceback_oracle.h"
#include "workload_core.h"

namespace ljprof {
namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;
using test::coroutine_of_fiber;
using test::describe;
using test::Dump;
using test::dump_core;
using test::expect_lua_frames_match;
using test::ExpectedFrame;
using test::hex;
using test::is_live;
using test::lines_of;
using test::parse_tracebacks;
using test::printed_fibers;
using test::PrintedFiber;
using test::Target;

// [begin, end) of LuaJIT's interpreter FDE (link-time), from readelf.
std::pair<uint64_t, uint64_t> interpreter_fde(const std::string& binary, bool arm64) {
  test::CommandResult r =
      test::run({arm64 ? "aarch64-linux-gnu-readelf" : "readelf", "--debug-dump=frames", binary});
  static const std::regex cie_re(R"(^([0-9a-f]+) [0-9a-f]+ [0-9a-f]+ CIE$)");
  static const std::regex aug_re(R"re(^\s+Augmentation:\s+"(\S*)")re");
  static const std::regex fde_re(
      R"(^[0-9a-f]+ [0-9a-f]+ [0-9a-f]+ FDE cie=([0-9a-f]+) pc=([0-9a-f]+)\.\.([0-9a-f]+)$)");
  std::string cie;
  std::set<uint64_t> personality_cies;
  std::pair<uint64_t, uint64_t> best{0, 0};
  for (const std::string& line : lines_of(r.out)) {
    std::smatch m;
    if (std::regex_match(line, m, cie_re)) {
      cie = m[1];
    } else if (std::regex_search(line, m, aug_re) && !cie.empty()) {
      if (std::string(m[1]).find('P') != std::string::npos) {
        personality_cies.insert(std::stoull(cie, nullptr, 16));
      }
      cie.clear();
    } else if (std::regex_match(line, m, fde_re)) {
      if (!personality_cies.count(std::stoull(m[1], nullptr, 16))) continue;
      uint64_t lo = std::stoull(m[2], nullptr, 16), hi = std::stoull(m[3], nullptr, 16);
      if (hi - lo > best.second - best.first) best = {lo, hi};
    }
  }
  EXPECT_GT(best.second, best.first) << "no interpreter FDE in " << binary;
  return best;
}

struct GdbStack {
  std::vector<uint64_t> pcs;  // first thread, innermost first
  uint64_t exe_bias = 0;      // runtime - link address of the file that carries LuaJIT
};

// `vm_file` is the file that carries LuaJIT (the executable, or libluajit for nginx): its load
// bias places the interpreter FDE in the process.
GdbStack gdb_stack(const std::string& exe, const std::string& vm_file, const std::string& core) {
  GdbStack s;
  // No separate debug info: gdb then reports only the physical frames (with libc's debug info
  // it adds synthetic tail-call frames that are not on the stack).
  // gdb's Python API lists the frames; inlined frames (tarantool has DWARF) share their
  // caller's pc and are not stack frames, so they are skipped.
  const std::string list_frames =
      "python exec(\"f = gdb.newest_frame()\\nwhile f is not None:\\n"
      "  if f.type() != gdb.INLINE_FRAME: print('ljprof-pc 0x%x' % f.pc())\\n"
      "  f = f.older()\")";
  test::CommandResult r = test::run(
      {"gdb", "-nx", "-batch", "-iex", "set debug-file-directory /nonexistent", "-iex",
       "set debuginfod enabled off", "-ex", "set backtrace past-main on", "-ex",
       "set backtrace past-entry on", "-ex", "info proc mappings", "-ex", list_frames, exe, core});
  static const std::regex pc_re(R"(^ljprof-pc 0x([0-9a-f]+)$)");
  static const std::regex map_re(
      R"(^\s+0x([0-9a-f]+)\s+0x[0-9a-f]+\s+0x[0-9a-f]+\s+0x([0-9a-f]+)\s+(\S+)$)");
  bool have_bias = false;
  for (const std::string& line : lines_of(r.out)) {
    std::smatch m;
    if (std::regex_search(line, m, map_re)) {
      if (!have_bias && fs::path(m[3].str()) == fs::canonical(vm_file) &&
          std::stoull(m[2], nullptr, 16) == 0) {
        s.exe_bias = std::stoull(m[1], nullptr, 16);
        have_bias = true;
      }
    } else if (std::regex_match(line, m, pc_re)) {
      s.pcs.push_back(std::stoull(m[1], nullptr, 16));
    }
  }
  EXPECT_FALSE(s.pcs.empty()) << r.out << r.err;
  EXPECT_TRUE(have_bias) << r.out;
  // A non-PIE executable (Debian's tarantool) is linked at the address it runs at.
  test::CommandResult header = test::run({"readelf", "-h", vm_file});
  if (header.out.find("EXEC (Executable file)") != std::string::npos) s.exe_bias = 0;
  return s;
}

Json ljprof_core(const Target& target, const Dump& d) {
  std::vector<std::string> argv = {test::ljprof_bin(), "core", "--json", d.core};
  if (target.arm64) {
    argv.insert(argv.end(), {"--sysroot", "/usr/aarch64-linux-gnu", "--exe", target.exe});
  }
  test::CommandResult r = test::run(argv);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return Json::parse(r.out);
}

void expect_native_frames_match_gdb(const std::string& exe, const std::string& vm_file,
                                    const Dump& d, const Json& frames) {
  GdbStack gdb = gdb_stack(exe, vm_file, d.core);
  auto [vm_lo, vm_hi] = interpreter_fde(vm_file, false);
  std::vector<uint64_t> want;
  for (uint64_t pc : gdb.pcs) {
    uint64_t link = pc - gdb.exe_bias;
    // gdb's frames are return addresses (except #0): the call is at pc - 1.
    if (link - 1 >= vm_lo && link - 1 < vm_hi) continue;
    want.push_back(pc);
  }
  std::vector<uint64_t> got;
  for (const Json& f : frames) {
    if (f["kind"] == "native" || f["kind"] == "ffi" || f["kind"] == "root") {
      got.push_back(hex(f["pc"]));
    }
  }
  EXPECT_EQ(got, want) << describe(frames);
}

// Native source lines (libdw over .debug_line) against LLVM's own DWARF reader
// (llvm-addr2line, which also finds Debian's separate debug files by build-id): the same line,
// and its path ends with ours (it prefixes the compilation directory to relative names).
// binutils' addr2line is not used: it names the enclosing function's file for code inlined
// from a header (libc's __libc_start_call_main), where gdb's `info line` and LLVM agree with
// the line table. A return address is looked up at its call (pc - 1), as the symbol column
// is; a C function's entry and the leaf pc are exact.
void expect_source_lines_match_addr2line(const Json& frames) {
  std::map<std::string, std::vector<std::pair<uint64_t, const Json*>>> by_module;
  for (size_t i = 0; i < frames.size(); ++i) {
    const Json& f = frames[i];
    if (!f.contains("file") || f["module"].is_null()) continue;
    const bool exact = i == 0 || f["kind"] == "cfunc";
    by_module[f["module"].get<std::string>()].emplace_back(
        hex(f["module_offset"]) - (exact ? 0 : 1), &f);
  }
  for (const auto& [module, lookups] : by_module) {
    std::vector<std::string> argv = {"llvm-addr2line", "-e", module};
    for (const auto& l : lookups) argv.push_back(fmt::format("{:#x}", l.first));
    test::CommandResult r = test::run(argv);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::vector<std::string> lines = lines_of(r.out);
    ASSERT_EQ(lines.size(), lookups.size()) << r.out;
    for (size_t i = 0; i < lookups.size(); ++i) {
      const Json& f = *lookups[i].second;
      SCOPED_TRACE(module + fmt::format(" {:#x}: llvm-addr2line says ", lookups[i].first) +
                   lines[i] + ", got " + f.dump());
      const size_t colon = lines[i].rfind(':');
      const std::string file = lines[i].substr(0, colon);
      const std::string line = lines[i].substr(colon + 1, lines[i].find(' ', colon) - colon - 1);
      if (file == "??" || line == "?" || line == "0") {
        EXPECT_TRUE(f["file"].is_null());
        continue;
      }
      ASSERT_FALSE(f["file"].is_null());
      EXPECT_EQ(f["line"], std::stoi(line));
      const std::string ours = f["file"].get<std::string>();
      EXPECT_TRUE(file.size() >= ours.size() &&
                  file.compare(file.size() - ours.size(), ours.size(), ours) == 0)
          << file << " does not end with " << ours;
    }
  }
}

class CoreGolden : public ::testing::TestWithParam<std::tuple<Target, std::string>> {};

TEST_P(CoreGolden, MatchesTracebackAndGdb) {
  const auto& [target, workload] = GetParam();
  ASSERT_TRUE(test::file_exists(target.exe)) << target.exe << ": run scripts/bootstrap";
  Dump d = dump_core(target, workload);
  ASSERT_TRUE(fs::exists(d.core));
  auto blocks = parse_tracebacks(d.out);
  ASSERT_FALSE(blocks.empty()) << d.out;
  Json j = ljprof_core(target, d);
  ASSERT_FALSE(j["luajit"].is_null()) << j.dump(2);
  ASSERT_GE(j["threads"].size(), 1u);
  const Json& thread = j["threads"][0];
  const Json& frames = thread["frames"];
  EXPECT_TRUE(thread["reached_root"].get<bool>()) << thread["end"] << "\n" << describe(frames);
  EXPECT_EQ(frames.back()["kind"], "root");
  expect_lua_frames_match(frames, blocks, 1, !is_live(workload));
  if (!target.arm64) expect_native_frames_match_gdb(target.exe, target.exe, d, frames);
  expect_source_lines_match_addr2line(frames);
  // The crashing workloads end in common.crash's ffi.C.abort() from the interpreter: exactly one
  // frame is the C function that FFI call entered, and it is libc's abort.
  std::vector<std::string> ffi;
  for (const Json& f : frames) {
    if (f["kind"] == "ffi")
      ffi.push_back(f["symbol"].is_null() ? "?" : f["symbol"].get<std::string>());
  }
  EXPECT_EQ(ffi, is_live(workload) ? std::vector<std::string>{} : std::vector<std::string>{"abort"})
      << describe(frames);
}

const Target kLuajitAmd64{"luajit_amd64", "/usr/bin/luajit", false};

// A thread stopped inside the kernel's vDSO (spin_vdso.lua: an FFI clock_gettime loop). The
// process is stopped (SIGSTOP) until /proc/PID/syscall shows its user pc inside the vDSO (about
// one stop in ten), then gcore'd while stopped, so it is dumped once rather than until a dump
// happens to have the leaf there. The vDSO comes from the core's memory at AT_SYSINFO_EHDR:
// native frames must equal gdb's (which reads it the same way), the Lua frames the traceback,
// and the stack must reach the root.
TEST(CoreGoldenVdso, LeafInsideTheVdso) {
  char tmpl[] = "/tmp/ljprof-golden-XXXXXX";
  Dump d;
  d.dir = mkdtemp(tmpl);
  d.core = d.dir + "/core";
  fs::copy_file(fs::path(test::source_dir()) / "tests/walker/workloads/spin_vdso.lua",
                fs::path(d.dir) / "spin_vdso.lua");
  test::CommandResult r = test::run(
      {"env", "-C", d.dir, "bash", "-c",
       "\"$0\" spin_vdso.lua >out 2>&1 & pid=$!; "
       "for i in $(seq 100); do grep -q ljprof-traceback-end out && break; sleep 0.1; done; "
       "vdso=$(grep '\\[vdso\\]' /proc/$pid/maps | cut -d' ' -f1); "
       "lo=$((0x${vdso%-*})); hi=$((0x${vdso#*-})); "
       "for i in $(seq 1000); do kill -STOP $pid; "
       "while ! grep -q '^State:.*stopped' /proc/$pid/status; do sleep 0.001; done; "
       "pc=$(cut -d' ' -f3 /proc/$pid/syscall); "
       "if [ -n \"$pc\" ] && [ \"$pc\" != running ] && (( pc >= lo && pc < hi )); then "
       "gcore -o c $pid >/dev/null 2>&1; mv c.$pid core; break; fi; "
       "kill -CONT $pid; done; kill -9 $pid; cat out",
       "/usr/bin/luajit"});
  d.out = r.out;
  ASSERT_TRUE(fs::exists(d.core)) << "1000 stops, none in the vDSO\n" << r.out << r.err;
  auto blocks = parse_tracebacks(d.out);
  ASSERT_FALSE(blocks.empty()) << d.out;
  Json j = ljprof_core(kLuajitAmd64, d);
  const Json& thread = j["threads"][0];
  const Json& frames = thread["frames"];
  ASSERT_EQ(frames[0]["module"], "[vdso]") << describe(frames);
  EXPECT_TRUE(thread["reached_root"].get<bool>()) << thread["end"] << "\n" << describe(frames);
  // The C function in progress is the FFI call of clock_gettime, made after the traceback.
  expect_lua_frames_match(frames, blocks, 0, true);
  expect_native_frames_match_gdb(kLuajitAmd64.exe, kLuajitAmd64.exe, d, frames);
}
// A thread stopped inside lazy symbol binding: luajit's first call of `syscall` (through its
// PLT, from lua_newstate) runs glibc's trampoline, whose CFA is rbx + 32
// (sysdeps/x86_64/dl-trampoline.h), under _dl_fixup and _dl_lookup_symbol_x, which saved and
// reused rbx. The walk takes rbx back from _dl_fixup's save slot (its FDE's rule) and goes on
// to the root; gdb, stopped there by breakpoints, walks the same frames.
TEST(CoreGoldenLazyBinding, InsideTheResolverUnderGlibcsTrampoline) {
  char tmpl[] = "/tmp/ljprof-golden-XXXXXX";
  Dump d;
  d.dir = mkdtemp(tmpl);
  d.core = d.dir + "/core";
  test::CommandResult r = test::run({"gdb",
                                     "-nx",
                                     "-batch",
                                     "-iex",
                                     "set debuginfod enabled off",
                                     "-ex",
                                     "set breakpoint pending on",
                                     "-ex",
                                     "break lua_newstate",
                                     "-ex",
                                     "run",
                                     "-ex",
                                     "delete",
                                     "-ex",
                                     "break _dl_fixup",
                                     "-ex",
                                     "continue",
                                     "-ex",
                                     "delete",
                                     "-ex",
                                     "break _dl_lookup_symbol_x",
                                     "-ex",
                                     "continue",
                                     "-ex",
                                     "generate-core-file " + d.core,
                                     "-ex",
                                     "kill",
                                     "--args",
                                     kLuajitAmd64.exe,
                                     "-e",
                                     "print(1)"});
  ASSERT_TRUE(fs::exists(d.core)) << r.out << r.err;
  Json j = ljprof_core(kLuajitAmd64, d);
  const Json& thread = j["threads"][0];
  const Json& frames = thread["frames"];
  ASSERT_GE(frames.size(), 4u) << describe(frames);
  EXPECT_EQ(frames[0]["symbol"], "_dl_lookup_symbol_x") << describe(frames);
  EXPECT_EQ(frames[1]["symbol"], "_dl_fixup") << describe(frames);
  EXPECT_EQ(frames[2]["symbol"].get<std::string>().rfind("_dl_runtime_resolve", 0), 0u)
      << describe(frames);
  EXPECT_TRUE(thread["reached_root"].get<bool>()) << thread["end"] << "\n" << describe(frames);
  expect_native_frames_match_gdb(kLuajitAmd64.exe, kLuajitAmd64.exe, d, frames);
}

// Names of a stripped library's functions: each frame in libc is named by a symbol that readelf
// lists, with a range holding the frame's address, in libc's .dynsym or — when its separate debug
// file is installed (Debian's libc6-dbg, found by build-id) — in that file's .symtab; and with
// the debug file every libc frame has a name.
void expect_libc_names_match_readelf(const Json& frames) {
  const std::string libc = "/usr/lib/x86_64-linux-gnu/libc.so.6";
  std::smatch m;
  const std::string notes = test::run({"readelf", "-n", libc}).out;
  ASSERT_TRUE(std::regex_search(notes, m, std::regex(R"(Build ID: ([0-9a-f]+))"))) << notes;
  const std::string id = m[1];
  const std::string debug =
      "/usr/lib/debug/.build-id/" + id.substr(0, 2) + "/" + id.substr(2) + ".debug";
  const bool have_debug = fs::exists(debug);
  std::multimap<std::string, std::pair<uint64_t, uint64_t>> symbols;  // name -> [value, end)
  for (const std::string& file :
       have_debug ? std::vector<std::string>{libc, debug} : std::vector<std::string>{libc}) {
    static const std::regex sym_re(
        R"(^\s*\d+: ([0-9a-f]+)\s+(\d+) (FUNC|NOTYPE|IFUNC)\s+\S+\s+\S+\s+\d+ ([^@\s]+))");
    for (const std::string& line : lines_of(test::run({"readelf", "-sW", file}).out)) {
      if (!std::regex_search(line, m, sym_re)) continue;
      const uint64_t value = std::stoull(m[1], nullptr, 16), size = std::stoull(m[2]);
      symbols.emplace(m[4], std::pair{value, value + std::max<uint64_t>(size, 1)});
    }
  }
  size_t checked = 0;
  for (size_t i = 0; i < frames.size(); ++i) {
    const Json& f = frames[i];
    if (f["kind"] != "native" || f.value("module", "") != libc) continue;
    const std::string name = f.value("symbol", "");
    if (name == "<signal handler called>") continue;
    if (have_debug) {
      EXPECT_FALSE(name.empty() || name.find(":sub_") != std::string::npos) << f;
    }
    if (name.empty() || name.find(":sub_") != std::string::npos) continue;
    const uint64_t at = hex(f["module_offset"]) - (i == 0 ? 0 : 1);
    auto [lo, hi] = symbols.equal_range(name);
    EXPECT_TRUE(std::any_of(
        lo, hi, [&](const auto& s) { return at >= s.second.first && at < s.second.second; }))
        << name << " does not hold libc+" << std::hex << at;
    ++checked;
  }
  EXPECT_GT(checked, 0u) << describe(frames);
}

// A thread parked inside a signal handler (signal_parked.lua: an FFI call raises SIGUSR1, whose
// C handler never returns), dumped with gcore: the walk goes from the handler through glibc's
// signal trampoline into the code the signal interrupted (raise, the FFI call) and on to the Lua
// frames and the root. Native frames equal gdb's (which unwinds signal frames itself), the Lua
// frames the traceback printed from the call's line.
TEST(CoreGoldenSignal, HandlerStackedOnAnFfiCall) {
  char tmpl[] = "/tmp/ljprof-golden-XXXXXX";
  Dump d;
  d.dir = mkdtemp(tmpl);
  d.core = d.dir + "/core";
  const std::string lib = d.dir + "/libsignal_handler.so";
  test::CommandResult cc =
      test::run({"gcc", "-O1", "-g", "-fPIC", "-shared", "-o", lib,
                 test::source_dir() + "/tests/record/workloads/signal_handler.c"});
  ASSERT_EQ(cc.exit_code, 0) << cc.err;
  fs::copy_file(fs::path(test::source_dir()) / "tests/walker/workloads/signal_parked.lua",
                fs::path(d.dir) / "signal_parked.lua");
  // Dumped once the handler waits in pause() (x86-64 system call 34, /proc/PID/syscall).
  test::CommandResult r =
      test::run({"env", "-C", d.dir, "bash", "-c",
                 "/usr/bin/luajit signal_parked.lua \"$0\" >out 2>&1 & pid=$!; "
                 "for i in $(seq 200); do grep -q ljprof-traceback-end out && "
                 "[ \"$(cut -d' ' -f1 /proc/$pid/syscall)\" = 34 ] && break; sleep 0.05; done; "
                 "gcore -o c $pid >/dev/null 2>&1; mv c.$pid core; kill -9 $pid; cat out",
                 lib});
  d.out = r.out;
  ASSERT_TRUE(fs::exists(d.core)) << r.out << r.err;
  auto blocks = parse_tracebacks(d.out);
  ASSERT_FALSE(blocks.empty()) << d.out;
  Json j = ljprof_core(kLuajitAmd64, d);
  const Json& thread = j["threads"][0];
  const Json& frames = thread["frames"];
  EXPECT_TRUE(thread["reached_root"].get<bool>()) << thread["end"] << "\n" << describe(frames);
  size_t trampoline = 0;
  while (trampoline < frames.size() &&
         frames[trampoline].value("symbol", "") != "<signal handler called>") {
    ++trampoline;
  }
  ASSERT_LT(trampoline, frames.size()) << describe(frames);
  ASSERT_GT(trampoline, 0u);
  EXPECT_EQ(frames[trampoline - 1]["symbol"], "on_usr1") << describe(frames);
  expect_libc_names_match_readelf(frames);
  // The C function in progress is the FFI call of park_in_handler, made after the traceback.
  expect_lua_frames_match(frames, blocks, 0, true);
  expect_native_frames_match_gdb(kLuajitAmd64.exe, kLuajitAmd64.exe, d, frames);
}
const Target kLuajitArm64{"luajit_arm64", test::fixture("arm64/usr/bin/luajit"), true};
const Target kTarantoolAmd64{"tarantool_amd64", "/usr/bin/tarantool", false};

// An nginx-lua worker (OpenResty's luajit2 from the fixture tree) blocked in a C function called
// from a content_by_lua_block handler, dumped live with gcore. OpenResty runs the handler in a
// coroutine (lua_resume), so the Lua part ends at the coroutine's bottom and native frames
// continue in ngx_http_lua_run_thread. The C function (os.execute of a shell) waits until the
// core is written, however long gcore takes, rather than a fixed time.
TEST(CoreGoldenNginx, WorkerBlockedInCFromAHandler) {
  const std::string tree = test::fixture("nginx-lua");
  const std::string lib = tree + "/usr/lib/x86_64-linux-gnu/libluajit-5.1.so.2.1.0";
  ASSERT_TRUE(test::file_exists(lib)) << lib << ": run scripts/bootstrap";
  char tmpl[] = "/tmp/ljprof-golden-nginx-XXXXXX";
  Dump d;
  d.dir = mkdtemp(tmpl);
  {
    std::ofstream conf(d.dir + "/nginx.conf");
    conf << "load_module " << tree << "/usr/lib/nginx/modules/ndk_http_module.so;\n"
         << "load_module " << tree << "/usr/lib/nginx/modules/ngx_http_lua_module.so;\n"
         << "daemon off;\nmaster_process off;\nerror_log " << d.dir << "/error.log;\n"
         << "pid " << d.dir << "/nginx.pid;\nevents { worker_connections 16; }\n"
         << "http {\n access_log off;\n lua_package_path \"" << tree
         << "/usr/share/lua/5.1/?.lua;;\";\n client_body_temp_path " << d.dir << "/body;\n"
         << " server {\n  listen unix:" << d.dir << "/sock;\n  location /block {\n"
         << "   content_by_lua_block {\n"
         << "    local function handler()\n"
         << "      local f = io.open(\"" << d.dir
         << "/trace.out\", \"w\") f:write(\"ljprof-traceback-begin\\n\", "
            "debug.traceback(\"\", 1), \"\\nljprof-traceback-end\\n\") f:close() "
            "os.execute(\"i=0; while [ ! -e "
         << d.dir << "/release ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done\")\n"
         << "    end\n    handler()\n    ngx.say(\"done\")\n   }\n  }\n }\n}\n";
  }
  d.core = d.dir + "/core";
  test::CommandResult r = test::run(
      {"env", "-C", d.dir, "bash", "-c",
       "LD_LIBRARY_PATH=\"$0\" /usr/sbin/nginx -p \"$PWD\" -c \"$PWD/nginx.conf\" & pid=$!; "
       "for i in $(seq 100); do [ -S sock ] && break; sleep 0.1; done; "
       "curl -s --max-time 10 --unix-socket sock http://localhost/block >/dev/null & "
       "for i in $(seq 100); do grep -q ljprof-traceback-end trace.out 2>/dev/null && break; "
       "sleep 0.1; done; sleep 0.3; gcore -o core.$pid $pid >/dev/null 2>&1; mv core.$pid.$pid "
       "core; "
       "touch release; kill -9 $pid; cat trace.out",
       tree + "/usr/lib/x86_64-linux-gnu"});
  d.out = r.out;
  ASSERT_TRUE(fs::exists(d.core)) << r.out << r.err;
  auto blocks = parse_tracebacks(d.out);
  ASSERT_EQ(blocks.size(), 1u) << d.out;
  Json j = ljprof_core(Target{"nginx", "/usr/sbin/nginx", false}, d);
  EXPECT_NE(j["luajit"].get<std::string>().find("nginx-lua/usr/lib/x86_64-linux-gnu/libluajit"),
            std::string::npos)
      << j.dump(2);
  const Json& frames = j["threads"][0]["frames"];
  EXPECT_TRUE(j["threads"][0]["reached_root"].get<bool>()) << describe(frames);
  // The handler's traceback was written before os.execute was called: that C function leads.
  expect_lua_frames_match(frames, blocks, 0, true);
  expect_native_frames_match_gdb("/usr/sbin/nginx", lib, d, frames);
}

// --all-fibers: the coroutines suspended_coroutines.lua leaves suspended (found on the GC list
// through global_State.gc.root, which is extracted from lj_mem_newgco) must each equal their own
// debug.traceback(co), frame for frame, and end at the bottom of their stack.
// The --all-fibers entry whose innermost Lua frame is at `top`'s source and line, or nullptr.
const Json* coroutine_at(const Json& j, const ExpectedFrame& top) {
  for (const Json& co : j["coroutines"]) {
    for (const Json& f : co["frames"]) {
      if (f["kind"] != "lua") continue;
      if (f["line"] == top.line && f["source"] == top.source) return &co;
      break;
    }
  }
  return nullptr;
}

class CoreAllFibers : public ::testing::TestWithParam<Target> {};

TEST_P(CoreAllFibers, SuspendedCoroutinesMatchTheirTracebacks) {
  const Target& target = GetParam();
  ASSERT_TRUE(test::file_exists(target.exe)) << target.exe << ": run scripts/bootstrap";
  Dump d = dump_core(target, "suspended_coroutines.lua");
  ASSERT_TRUE(fs::exists(d.core));
  auto blocks = parse_tracebacks(d.out);
  ASSERT_EQ(blocks.size(), 3u) << d.out;  // two coroutines, then the crash
  std::vector<std::string> argv = {test::ljprof_bin(), "core", "--json", "--all-fibers", d.core};
  if (target.arm64) {
    argv.insert(argv.end(), {"--sysroot", "/usr/aarch64-linux-gnu", "--exe", target.exe});
  }
  test::CommandResult r = test::run(argv);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Json j = Json::parse(r.out);
  ASSERT_TRUE(j.contains("coroutines")) << j.value("coroutines_error", std::string("?"));
  EXPECT_GE(j["coroutines_not_started"].get<int>(), 1);  // `fresh`
  // luajit has no fibers (so nothing to explain); Debian's tarantool names them.
  EXPECT_FALSE(j.contains("fibers_error")) << j["fibers_error"];
  for (size_t b = 0; b < 2; ++b) {
    // The coroutine whose innermost Lua frame is on the line this traceback names.
    const ExpectedFrame& top = blocks[b].at(1);
    const Json* found = coroutine_at(j, top);
    ASSERT_NE(found, nullptr) << "no coroutine for " << top.text << "\n" << j["coroutines"].dump(1);
    SCOPED_TRACE("coroutine " + (*found)["lua_state"].get<std::string>());
    EXPECT_EQ((*found)["status"], "suspended");
    EXPECT_TRUE((*found)["reached_root"].get<bool>()) << (*found)["end"];
    expect_lua_frames_match((*found)["frames"], {blocks[b]}, 0, false);
  }
}

// A Tarantool fiber switched out in fiber.sleep: its lua_State is inside a C call, so the Lua-only
// walk starts at the C function (the leading `sleep`, called after the traceback was printed)
// and ends at the lua_pcall boundary the fiber's C entry made, the bottom of its stack.
TEST(CoreAllFibersTarantool, SleepingFiberMatchesItsTraceback) {
  Dump d = dump_core(kTarantoolAmd64, "sleeping_fibers.lua");
  ASSERT_TRUE(fs::exists(d.core));
  auto blocks = parse_tracebacks(d.out);
  ASSERT_EQ(blocks.size(), 2u) << d.out;  // the fiber's, then the crash
  test::CommandResult r = test::run({test::ljprof_bin(), "core", "--json", "--all-fibers", d.core});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Json j = Json::parse(r.out);
  ASSERT_TRUE(j.contains("coroutines")) << j.value("coroutines_error", std::string("?"));
  const ExpectedFrame& top = blocks[0].at(0);
  const Json* found = coroutine_at(j, top);
  ASSERT_NE(found, nullptr) << "no fiber for " << top.text << "\n" << j["coroutines"].dump(1);
  EXPECT_EQ((*found)["status"], "normal");
  EXPECT_TRUE((*found)["reached_root"].get<bool>()) << (*found)["end"];
  expect_lua_frames_match((*found)["frames"], {blocks[0]}, 0, true);
}

// Tarantool fibers named by --all-fibers: named_fibers.lua prints, from inside each of three
// named fibers, its own id and name ("ljprof-fiber ID NAME") and its traceback, then the main
// fiber's ("ljprof-running ID NAME") and aborts. Every fiber must be named with its own frames,
// and the crashing thread with the running fiber.

test::CommandResult ljprof_all_fibers(const std::string& core, bool json) {
  std::vector<std::string> argv = {test::ljprof_bin(), "core", "--all-fibers", core};
  if (json) argv.insert(argv.begin() + 2, "--json");
  return test::run(argv);
}

void expect_every_fiber_named_with_its_frames(const Target& target) {
  Dump d = dump_core(target, "named_fibers.lua");
  ASSERT_TRUE(fs::exists(d.core));
  auto blocks = parse_tracebacks(d.out);
  std::vector<PrintedFiber> fibers = printed_fibers(d.out, "ljprof-fiber");
  std::vector<PrintedFiber> running = printed_fibers(d.out, "ljprof-running");
  ASSERT_EQ(blocks.size(), 4u) << d.out;  // the three fibers', then the crash
  ASSERT_EQ(fibers.size(), 3u) << d.out;
  ASSERT_EQ(running.size(), 1u) << d.out;
  test::CommandResult r = ljprof_all_fibers(d.core, true);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Json j = Json::parse(r.out);
  EXPECT_FALSE(j.contains("fibers_error")) << j["fibers_error"];
  test::CommandResult text = ljprof_all_fibers(d.core, false);
  for (size_t i = 0; i < fibers.size(); ++i) {
    SCOPED_TRACE(fmt::format("fiber {} {}", fibers[i].id, fibers[i].name));
    const Json* found = coroutine_of_fiber(j, fibers[i].id);
    ASSERT_NE(found, nullptr) << j["coroutines"].dump(1);
    EXPECT_EQ((*found)["fiber"]["name"], fibers[i].name);
    EXPECT_TRUE((*found)["reached_root"].get<bool>()) << (*found)["end"];
    // Each suspended in a C function (sleep, get, wait) called after its traceback.
    expect_lua_frames_match((*found)["frames"], {blocks[i]}, 0, true);
    EXPECT_NE(text.out.find(fmt::format("Fiber {} \"{}\" (", fibers[i].id, fibers[i].name)),
              std::string::npos)
        << text.out;
  }
  // The crashing thread runs the main cord: its Lua stack is the running fiber's.
  const Json& thread = j["threads"][0];
  ASSERT_TRUE(thread.contains("fiber")) << thread.dump();
  EXPECT_EQ(thread["fiber"]["id"], running[0].id);
  EXPECT_EQ(thread["fiber"]["name"], running[0].name);
  expect_lua_frames_match(thread["frames"], {blocks[3]}, 0, true);
  EXPECT_NE(text.out.find(fmt::format("Fiber {} \"{}\" (running)", running[0].id, running[0].name)),
            std::string::npos)
      << text.out;
}

TEST(CoreFiberNames, EveryFiberNamedWithItsFrames) {
  expect_every_fiber_named_with_its_frames(kTarantoolAmd64);
}

// The same of a Tarantool without any debug information (strip --strip-all): the fiber layout
// comes from its machine code (luajit/fiber_list_code.cc).
TEST(CoreFiberNames, AStrippedTarantoolsFibersAreNamedFromItsMachineCode) {
  test::TempDir bin;
  const std::string exe = test::stripped_tarantool(bin.file("tarantool"));
  ASSERT_FALSE(exe.empty());
  expect_every_fiber_named_with_its_frames({"tarantool_stripped", exe, false});
}

// The core file offset of virtual address `vaddr` (readelf's PT_LOAD rows of the core).
std::optional<uint64_t> core_offset(const std::string& core, uint64_t vaddr) {
  test::CommandResult r = test::run({"readelf", "-lW", core});
  static const std::regex load_re(
      R"(^\s+LOAD\s+0x([0-9a-f]+) 0x([0-9a-f]+) 0x[0-9a-f]+ 0x([0-9a-f]+) 0x[0-9a-f]+ .*$)");
  for (const std::string& line : lines_of(r.out)) {
    std::smatch m;
    if (!std::regex_match(line, m, load_re)) continue;
    const uint64_t off = std::stoull(m[1], nullptr, 16), va = std::stoull(m[2], nullptr, 16);
    if (vaddr >= va && vaddr + 8 <= va + std::stoull(m[3], nullptr, 16)) return off + vaddr - va;
  }
  return std::nullopt;
}

// A corrupt fiber list names nothing: main_cord.alive.next overwritten in a copy of the core
// (with an unmapped address; with a link that loops back to itself), found where gdb says the
// field is (the non-PIE executable runs at its link addresses). The coroutines are still listed
// as coroutines, and one line says why fibers are not named.
TEST(CoreFiberNames, CorruptListNamesNothing) {
  Dump d = dump_core(kTarantoolAmd64, "named_fibers.lua");
  ASSERT_TRUE(fs::exists(d.core));
  ASSERT_NE(test::run({"readelf", "-h", kTarantoolAmd64.exe}).out.find("EXEC (Executable file)"),
            std::string::npos);
  test::CommandResult gdb = test::run(
      {"gdb", "-nx", "-batch", "-ex", "print/x (long)&main_cord.alive.next", kTarantoolAmd64.exe});
  std::smatch m;
  static const std::regex value_re(R"(\$1 = 0x([0-9a-f]+))");
  ASSERT_TRUE(std::regex_search(gdb.out, m, value_re)) << gdb.out << gdb.err;
  const std::optional<uint64_t> head_next = core_offset(d.core, std::stoull(m[1], nullptr, 16));
  ASSERT_TRUE(head_next) << "main_cord is in no PT_LOAD of the core";
  std::vector<uint8_t> bytes = test::read_file(d.core);
  uint64_t first = 0;
  std::memcpy(&first, &bytes[*head_next], 8);
  const std::optional<uint64_t> first_next = core_offset(d.core, first + 8);
  ASSERT_TRUE(first_next) << "the first fiber's link is in no PT_LOAD of the core";
  // {where to write, what, the reason expected}
  const std::vector<std::tuple<uint64_t, uint64_t, std::string>> cases = {
      {*head_next, 0x10000, "unreadable"}, {*first_next, first, "loops back"}};
  for (const auto& [offset, value, reason] : cases) {
    SCOPED_TRACE(reason);
    std::vector<uint8_t> corrupt = bytes;
    std::memcpy(&corrupt[offset], &value, 8);
    const std::string path = d.dir + "/core.corrupt";
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(corrupt.data()),
               static_cast<std::streamsize>(corrupt.size()));
    test::CommandResult r = ljprof_all_fibers(path, true);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    Json j = Json::parse(r.out);
    ASSERT_TRUE(j.contains("fibers_error")) << r.out;
    EXPECT_NE(j["fibers_error"].get<std::string>().find(reason), std::string::npos)
        << j["fibers_error"];
    EXPECT_GE(j["coroutines"].size(), 3u) << j["coroutines"].dump(1);  // still walked
    for (const Json& co : j["coroutines"]) EXPECT_FALSE(co.contains("fiber")) << co.dump();
    for (const Json& t : j["threads"]) EXPECT_FALSE(t.contains("fiber")) << t.dump();
    test::CommandResult text = ljprof_all_fibers(path, false);
    EXPECT_NE(text.out.find("Fibers: not named: "), std::string::npos) << text.out;
    EXPECT_EQ(text.out.find("Fiber "), std::string::npos) << text.out;
  }
}

INSTANTIATE_TEST_SUITE_P(Interpreter, CoreAllFibers,
                         ::testing::Values(kLuajitAmd64, kLuajitArm64, kTarantoolAmd64),
                         [](const ::testing::TestParamInfo<Target>& info) {
                           return info.param.label;
                         });

std::string golden_name(const ::testing::TestParamInfo<CoreGolden::ParamType>& info) {
  return test::gtest_name(std::get<0>(info.param).label + "_" + std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(
    Interpreter, CoreGolden,
    ::testing::Combine(::testing::Values(kLuajitAmd64, kLuajitArm64, kTarantoolAmd64),
                       ::testing::Values("gsub_callback.lua", "sort_pcall.lua",
                                         "coroutine_abort.lua", "deep_recursion.lua",
                                         "call_names.lua")),
    golden_name);

// The LuaJIT build matrix (tests/matrix/variants.txt, built from Debian's sources by
// scripts/luajit-matrix): the sort-callback workload's core against its own traceback and gdb.
std::vector<Target> matrix_targets() {
  std::vector<Target> out;
  for (const test::MatrixVariant& v : test::matrix_variants()) {
    out.push_back({v.name, v.exe, v.arm64});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Matrix, CoreGolden,
                         ::testing::Combine(::testing::ValuesIn(matrix_targets()),
                                            ::testing::Values("sort_pcall.lua")),
                         golden_name);

// qemu-user runs the guest inside a host process: gcore would dump the host, so arm64 cores come
// only from the guest crashing (qemu writes those).
INSTANTIATE_TEST_SUITE_P(Live, CoreGolden,
                         ::testing::Combine(::testing::Values(kLuajitAmd64),
                                            ::testing::Values("spin_interpreter.lua")),
                         golden_name);

}  // namespace
}  // namespace ljprof
