// The walker on real cores taken inside JIT traces. Each workload compiles a one-line hot loop;
// the Lua VM prints, before the loop is hot, its own view of the stack (debug.getinfo per level)
// and, through jit.attach, the number of every trace it finishes. The core is then taken inside
// the trace: through an FFI call made from trace code (kill(getpid(), SIGABRT), written by gdb
// on amd64 and by qemu-user on arm64) or live with gcore while the trace spins.
// Oracles: the trace frame's number is one the VM reported, its start line is the loop's line;
// the Lua frames below it are the VM's frames (source, first line, and current line — for the
// innermost frame, the one running the trace, read from the trace's snapshot, or unknown
// rather than guessed where the LuaJIT has no snapshot offsets);
// the C functions the VM lists appear as cfunc frames; the stack ends at a proven root.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/core_file.h"
#include "core/core_walk.h"
#include "luajit/proc_info.h"
#include "support/test_support.h"
#include "symbolize/snapshot.h"
#include "traceback_oracle.h"

namespace ljprof {
namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

struct VmFrame {
  std::string what;  // "Lua", "main", "C"
  std::string source;
  int line = 0;
  int firstline = 0;
};

struct VmView {
  std::vector<VmFrame> frames;  // innermost first, from the function that printed them
  std::set<int> traces;         // traces the JIT finished
};

VmView parse_vm_view(const std::string& out) {
  VmView v;
  std::istringstream in(out);
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    if (line == "ljprof-frames-begin") {
      inside = true;
    } else if (line == "ljprof-frames-end") {
      inside = false;
    } else if (line.rfind("ljprof-trace-stop ", 0) == 0) {
      v.traces.insert(std::stoi(line.substr(18)));
    } else if (inside) {
      std::istringstream fields(line);
      VmFrame f;
      fields >> f.what >> f.source >> f.line >> f.firstline;
      v.frames.push_back(f);
    }
  }
  return v;
}

struct Target {
  std::string label;
  std::string exe;
  bool arm64 = false;
};

void PrintTo(const Target& t, std::ostream* os) {
  *os << t.label;
}

struct Case {
  Target target;
  std::string workload;
  bool live = false;
};

// gtest prints parameters in test names and failures: show the case, not its bytes.
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.target.label << " " << c.workload;
}

struct Dump {
  Target target;
  std::string workload;
  bool live = false;
  std::string dir, core, out;
};

void make_core(Dump& c) {
  char tmpl[] = "/tmp/ljprof-jit-XXXXXX";
  c.dir = mkdtemp(tmpl);
  const fs::path src = fs::path(test::source_dir()) / "tests/walker/workloads";
  for (const std::string& name : {std::string("jit_oracle.lua"), c.workload}) {
    fs::copy_file(src / name, fs::path(c.dir) / name);
  }
  test::CommandResult r;
  if (c.live) {
    // Start it, wait (bounded) for its frames and its trace, gcore it, kill it.
    c.core = c.dir + "/core";
    r = test::run({"env", "-C", c.dir, "bash", "-c",
                   "\"$0\" \"$1\" >out 2>&1 & pid=$!; "
                   "for i in $(seq 100); do grep -q ljprof-trace-stop out && break; sleep 0.1; "
                   "done; sleep 0.2; gcore -o core.$pid $pid >/dev/null 2>&1; "
                   "mv core.$pid.$pid core; kill -9 $pid; cat out",
                   c.target.exe, c.workload});
  } else if (c.target.arm64) {
    r = test::run(
        {"env", "-C", c.dir, "bash", "-c",
         "ulimit -c unlimited; exec qemu-aarch64-static -L /usr/aarch64-linux-gnu \"$0\" \"$1\"",
         c.target.exe, c.workload});
    for (const auto& e : fs::directory_iterator(c.dir)) {
      if (e.path().extension() == ".core") c.core = e.path();
    }
  } else {
    c.core = c.dir + "/core";
    r = test::run({"env", "-C", c.dir, "gdb", "-nx", "-batch", "-ex", "run", "-ex",
                   "generate-core-file " + c.core, "--args", c.target.exe, c.workload});
  }
  c.out = r.out;
  ASSERT_TRUE(!c.core.empty() && fs::exists(c.core)) << c.workload << "\n" << r.out << r.err;
}

Json ljprof_core(const Dump& c) {
  std::vector<std::string> argv = {test::ljprof_bin(), "core", "--json", c.core};
  if (c.target.arm64) {
    argv.insert(argv.end(), {"--sysroot", "/usr/aarch64-linux-gnu", "--exe", c.target.exe});
  }
  test::CommandResult r = test::run(argv);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return Json::parse(r.out, nullptr, false);
}

// The one thread whose stack runs a trace.
const Json* trace_thread(const Json& j) {
  const Json* found = nullptr;
  for (const Json& t : j["threads"]) {
    for (const Json& f : t["frames"]) {
      if (f["kind"] == "trace") found = &t;
    }
  }
  return found;
}

class JitTrace : public ::testing::TestWithParam<Case> {};

TEST_P(JitTrace, TraceFrameThenTheVmsLuaFrames) {
  Dump c{GetParam().target, GetParam().workload, GetParam().live, "", "", ""};
  ASSERT_NO_FATAL_FAILURE(make_core(c));
  const VmView vm = parse_vm_view(c.out);
  ASSERT_FALSE(vm.frames.empty()) << c.out;
  ASSERT_FALSE(vm.traces.empty()) << "the JIT compiled no trace:\n" << c.out;
  const Json j = ljprof_core(c);
  ASSERT_FALSE(j.is_discarded());
  const Json* thread = trace_thread(j);
  ASSERT_NE(thread, nullptr) << "no trace frame in any thread:\n" << j.dump(1);
  const Json& frames = (*thread)["frames"];
  SCOPED_TRACE(frames.dump(1));

  size_t i = 0;
  if (!c.live) {
    // The FFI callee the trace called: the leaf.
    ASSERT_EQ(frames[i]["kind"], "native");
    EXPECT_EQ(frames[i]["symbol"], "kill");
    ++i;
  }
  const Json& trace = frames[i++];
  ASSERT_EQ(trace["kind"], "trace");
  EXPECT_TRUE(vm.traces.count(trace["trace"].get<int>())) << "trace " << trace["trace"];
  EXPECT_EQ(trace["start_source"], vm.frames[0].source);
  EXPECT_EQ(trace["start_line"], vm.frames[0].line);

  // The Lua and C-function frames, in the VM's order.
  std::vector<const Json*> lua;
  for (size_t k = i; k < frames.size(); ++k) {
    if (frames[k]["kind"] == "lua" || frames[k]["kind"] == "cfunc") lua.push_back(&frames[k]);
  }
  ASSERT_EQ(lua.size(), vm.frames.size());
  for (size_t k = 0; k < lua.size(); ++k) {
    const Json& got = *lua[k];
    const VmFrame& want = vm.frames[k];
    SCOPED_TRACE("VM frame " + std::to_string(k) + ": " + want.what + " " + want.source + ":" +
                 std::to_string(want.line));
    if (want.what == "C") {
      EXPECT_EQ(got["kind"], "cfunc");
      continue;
    }
    ASSERT_EQ(got["kind"], "lua");
    EXPECT_EQ(got["source"], want.source);
    EXPECT_EQ(got["firstline"], want.firstline);
    EXPECT_EQ(got["main_chunk"].get<bool>(), want.what == "main");
    if (k == 0 && !trace.contains("snapshot")) {
      // No snapshot to read it from (a LuaJIT without SnapShot.mcofs): unknown, not guessed.
      EXPECT_TRUE(got["line"].is_null()) << trace["snapshot_error"];
    } else if (k == 0) {
      EXPECT_EQ(got["line"], want.line);
      EXPECT_EQ(got["jit_trace"], trace["trace"]);
    } else {
      EXPECT_EQ(got["line"], want.line);
    }
  }
  EXPECT_TRUE((*thread)["reached_root"].get<bool>()) << (*thread)["end"];
  fs::remove_all(c.dir);
}

const Target kLuajitAmd64{"luajit_amd64", "/usr/bin/luajit", false};
const Target kLuajitArm64{"luajit_arm64", test::fixture("arm64/usr/bin/luajit"), true};
const Target kTarantoolAmd64{"tarantool_amd64", "/usr/bin/tarantool", false};

// The interpreter's traceback of the workload run with `arg` (jit.off() inside it).
std::string run_interpreted(const Target& target, const std::string& dir,
                            const std::string& workload, const std::string& arg) {
  std::vector<std::string> argv = {"env", "-C", dir};
  if (target.arm64)
    argv.insert(argv.end(), {"qemu-aarch64-static", "-L", "/usr/aarch64-linux-gnu"});
  argv.insert(argv.end(), {target.exe, workload, arg});
  return test::run(argv).out;
}

// A function LuaJIT inlined into a trace (trace_inlined_abort.lua: g's frame exists only in
// the trace's snapshot when its FFI call aborts the process). The Lua frames of the core must
// equal the traceback the same calls print when run by the interpreter (jit.off()): file, line
// and name of each, the inlined g included, and the frames the trace runs are marked JIT.
class JitInlined : public ::testing::TestWithParam<Target> {};

TEST_P(JitInlined, LuaFramesEqualTheInterpretersTraceback) {
  Dump c{GetParam(), "trace_inlined_abort.lua", false, "", "", ""};
  ASSERT_NO_FATAL_FAILURE(make_core(c));
  const std::string interp = run_interpreted(c.target, c.dir, c.workload, "interp");
  const auto blocks = test::parse_tracebacks(interp);
  ASSERT_EQ(blocks.size(), 1u) << interp;
  const Json j = ljprof_core(c);
  ASSERT_FALSE(j.is_discarded());
  const Json* thread = trace_thread(j);
  ASSERT_NE(thread, nullptr) << j.dump(1);
  const Json& frames = (*thread)["frames"];
  SCOPED_TRACE(frames.dump(1));
  size_t at = 0;
  while (at < frames.size() && frames[at]["kind"] != "trace") ++at;
  ASSERT_LT(at, frames.size());
  const Json& trace = frames[at];
  ASSERT_TRUE(trace.contains("snapshot")) << trace["snapshot_error"];
  std::vector<const Json*> lua;
  for (size_t k = at + 1; k < frames.size(); ++k) {
    if (frames[k]["kind"] == "lua" || frames[k]["kind"] == "cfunc") lua.push_back(&frames[k]);
  }
  const std::vector<test::ExpectedFrame>& want = blocks[0];
  ASSERT_EQ(lua.size(), want.size());
  for (size_t k = 0; k < want.size(); ++k) {
    const Json& got = *lua[k];
    SCOPED_TRACE("traceback frame " + std::to_string(k) + ": " + want[k].text);
    if (want[k].is_c) {
      EXPECT_EQ(got["kind"], "cfunc");
      continue;
    }
    EXPECT_EQ(got["source"], want[k].source);
    EXPECT_EQ(got["line"], want[k].line);
    EXPECT_EQ(got["name"], want[k].name ? Json(*want[k].name) : Json(nullptr));
    // g and f run as the trace's machine code; the main chunk called f from the interpreter.
    if (k < 2) {
      EXPECT_EQ(got["jit_trace"], trace["trace"]);
    } else {
      EXPECT_FALSE(got.contains("jit_trace"));
    }
  }
  fs::remove_all(c.dir);
}

// The exit-based snapshot lookup (for LuaJITs without SnapShot.mcofs, like Tarantool's) checked
// against LuaJIT's own mcofs: on a build that has both, at every instruction of every trace of
// a core with varied JIT code, the snapshot the guards' exits prove must be the one mcofs names.
class ExitSnapshots : public ::testing::TestWithParam<Target> {};

TEST_P(ExitSnapshots, AgreeWithMcofsAtEveryInstruction) {
  Dump c{GetParam(), "trace_mix_abort.lua", false, "", "", ""};
  ASSERT_NO_FATAL_FAILURE(make_core(c));
  core::CoreOptions options;
  if (c.target.arm64) options = {{"/usr/aarch64-linux-gnu"}, c.target.exe};
  auto core = core::CoreFile::open(c.core, options);
  ASSERT_TRUE(core.ok()) << core.message();
  auto walker = core::CoreWalker::create(*core);
  ASSERT_TRUE(walker.ok()) << walker.message();
  ASSERT_TRUE((*walker)->luajit().has_value()) << (*walker)->luajit_error();
  auto info = luajit::to_walker_info(*(*walker)->luajit());
  ASSERT_TRUE(info.ok()) << info.message();
  uint64_t g = 0;
  for (const core::Thread& t : core->threads()) g = g ? g : (*walker)->walk(t).g;
  ASSERT_NE(g, 0u);
  const ljprof_mem_reader mem = core->mem_reader();
  auto traces = core->read_u64(g + info->g_jit_trace);
  auto sizetrace = core->read_u32(g + info->g_jit_sizetrace);
  ASSERT_TRUE(traces.ok() && sizetrace.ok());
  size_t ntraces = 0, proven = 0, unproven = 0;
  for (uint32_t n = 1; n < std::min<uint32_t>(*sizetrace, 4096); ++n) {
    uint64_t gctrace = 0;
    ASSERT_EQ(mem.read_mem(mem.ctx, *traces + n * info->ref_size, &gctrace, info->ref_size), 0);
    if (gctrace == 0) continue;
    auto t = symbolize::read_trace_snapshots(mem, *info, gctrace);
    ASSERT_TRUE(t.ok()) << t.message();
    ASSERT_TRUE(t->has_mcofs);
    symbolize::read_guard_exits(mem, *info, *t);
    ASSERT_EQ(t->exits_error, "") << "trace " << n;
    ++ntraces;
    for (const symbolize::TraceInsn& insn : t->exits) {
      const uint64_t pc = t->mcode + insn.offset;
      auto by_exits = symbolize::snapshots_by_exits(t->exits, t->snap_ir, t->mcode, pc);
      ASSERT_TRUE(by_exits.ok()) << by_exits.message();
      auto by_mcofs = symbolize::snapshots_at(*t, pc);
      ASSERT_TRUE(by_mcofs.ok()) << by_mcofs.message();
      // One snapshot: the one mcofs names; a span: it holds the one mcofs names.
      EXPECT_LE(by_exits->first, by_mcofs->first)
          << "trace " << n << " +" << std::hex << insn.offset;
      EXPECT_GE(by_exits->last, by_mcofs->first)
          << "trace " << n << " +" << std::hex << insn.offset;
      ++(by_exits->first == by_exits->last ? proven : unproven);
    }
  }
  std::cout << c.target.label << ": " << ntraces << " traces, " << proven
            << " instructions proven, " << unproven << " in a span of snapshots\n";
  EXPECT_GE(ntraces, 4u);
  EXPECT_GT(proven, unproven);
  fs::remove_all(c.dir);
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string name = info.param.target.label + "_" + info.param.workload;
  for (char& ch : name) {
    if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(
    Cores, JitTrace,
    ::testing::Values(Case{kLuajitAmd64, "trace_ffi_abort.lua", false},
                      Case{kLuajitArm64, "trace_ffi_abort.lua", false},
                      Case{kTarantoolAmd64, "trace_ffi_abort.lua", false},
                      // qemu-user runs the guest inside a host process: no live arm64 gcore.
                      Case{kLuajitAmd64, "spin_trace.lua", true},
                      Case{kTarantoolAmd64, "spin_trace.lua", true}),
    case_name);

INSTANTIATE_TEST_SUITE_P(Cores, ExitSnapshots, ::testing::Values(kLuajitAmd64, kLuajitArm64),
                         [](const ::testing::TestParamInfo<Target>& info) {
                           return info.param.label;
                         });

// Tarantool's LuaJIT has no SnapShot.mcofs: its snapshot comes from the guards' exits.
INSTANTIATE_TEST_SUITE_P(Cores, JitInlined,
                         ::testing::Values(kLuajitAmd64, kLuajitArm64, kTarantoolAmd64),
                         [](const ::testing::TestParamInfo<Target>& info) {
                           return info.param.label;
                         });

}  // namespace
}  // namespace ljprof
