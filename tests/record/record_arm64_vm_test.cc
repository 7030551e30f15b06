// Live recording on a real arm64 kernel: `ljprof record` cross-built for aarch64 (make arm64) runs
// inside Debian's arm64 kernel booted under qemu-system-aarch64 (scripts/arm64-vm; emulated, no
// KVM here) against Debian's arm64 luajit and Tarantool's LuaJIT fork for arm64, JIT on and off
// (both processes of a runtime in one recording, split by `ljprof report --pid`), and an arm64
// nginx-lua worker with OpenResty's luajit2 under a local HTTP load
// (arm64_vm/guest_record.sh). The oracle is the one
// of the x86-64 split tests (split_oracle.h): the workload's own per-part os.clock, >= 99% of
// the samples with an unwind context at a proven root, Lua -> table.sort -> Lua nesting. The
// kernel's verifier of that arm64 kernel loads the program; the VM boots once for all cases.
// The same boot writes a kernel core of tests/core/workloads/tls_threads.c, for what qemu-user
// cores cannot show: each thread's TPIDR_EL0 (NT_ARM_TLS) and glibc's thread list on AArch64.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "signal_oracle.h"
#include "split_oracle.h"
#include "support/test_support.h"
#include "support/tls_threads_oracle.h"

namespace ljprof {
namespace {

using namespace record_oracle;

// The recordings last this long (guest seconds). The emulated CPU runs the workload some 20x
// slower than the host, and its speed follows the host's: the split sizes its rounds by its own
// CPU clock (0.1 s each in the guest, guest_record.sh), so the window holds ~50 rounds on any
// host (with few rounds, the parts it cuts at its ends skew the shares).
constexpr int kSeconds = 5;
// The emulated guest takes fewer samples than 999 Hz would give natively (the kernel throttles
// perf events whose handler runs long under emulation); enough to measure shares to 5 points.
constexpr double kMinSamples = 400;
// Under emulation the C <-> Lua transition of each comparator call (lj_vm_call's register
// saves and restores, lua_call) costs more next to the comparator itself than on hardware:
// cmp under table.sort measured 27% of in_c for Debian's luajit, 12% for the nginx-lua worker
// with the JIT off and 7.6% with it on (where cmp runs as a trace). A broken hand-over gives
// next to none.
constexpr double kMinNestedShare = 0.05;

// Tarantool's LuaJIT fork (Debian's tarantool source) built for arm64 by the LuaJIT matrix:
// Tarantool's VM layout, run as a plain luajit (Debian ships no arm64 tarantool).
std::string tarantool_luajit() {
  return test::fixture("matrix/tarantool-arm64-gcc-O2/luajit");
}

class RecordArm64Vm : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    out_ = testing::TempDir() + "/ljprof-arm64-vm";
    std::filesystem::remove_all(out_);
    std::filesystem::create_directories(out_ + "/mini");
    if (!test::file_exists(test::arm64_ljprof_bin())) {
      vm_.err = test::arm64_ljprof_bin() + " missing: run make arm64";
      return;
    }
    if (!test::file_exists(tarantool_luajit())) {
      vm_.err = tarantool_luajit() + " missing: run scripts/luajit-matrix (make test does)";
      return;
    }
    const std::string tests = test::source_dir() + "/tests/record";
    const std::string signal_lib = out_ + "/libsignal_handler.so";
    const test::CommandResult cc =
        test::run({"aarch64-linux-gnu-gcc", "-O1", "-g", "-fPIC", "-shared", "-o", signal_lib,
                   tests + "/workloads/signal_handler.c"});
    if (cc.exit_code != 0) {
      vm_.err = "cannot cross-build the signal handler: " + cc.err;
      return;
    }
    const std::string luajit_src =
        test::fixture("matrix/tarantool-arm64-gcc-O2/src/third_party/luajit/src");
    const test::CommandResult mini_cc = test::run(
        {"aarch64-linux-gnu-gcc", "-O1", "-g", "-DHAVE_MADV_DONTNEED", "-I" + luajit_src,
         "-I" + test::source_dir() + "/tests/luajit/synthetic",
         test::source_dir() + "/tests/walker/workloads/mini_tarantool.c",
         luajit_src + "/libluajit.a", "-lm", "-ldl", "-pthread", "-o", mini_tarantool_exe()});
    if (mini_cc.exit_code != 0) {
      vm_.err = "cannot cross-build the mini Tarantool: " + mini_cc.err;
      return;
    }
    const test::CommandResult tls_cc =
        test::run({"aarch64-linux-gnu-gcc", "-O1", "-g", "-pthread", "-o", tls_threads_exe(),
                   test::source_dir() + "/tests/core/workloads/tls_threads.c"});
    if (tls_cc.exit_code != 0) {
      vm_.err = "cannot cross-build tls_threads: " + tls_cc.err;
      return;
    }
    vm_ = test::run(
        {test::source_dir() + "/scripts/arm64-vm",
         "--timeout",
         "900",
         "--smp",
         "2",
         "--add",
         test::arm64_ljprof_bin() + ":/opt/ljprof/ljprof",
         "--add",
         tarantool_luajit() + ":/opt/tarantool-luajit/luajit",
         "--add",
         tests + "/workloads:/opt/workloads",
         "--add",
         signal_lib + ":/opt/libsignal_handler.so",
         "--add",
         tls_threads_exe() + ":/opt/tls_threads",
         "--add",
         mini_tarantool_exe() + ":/opt/mini/tarantool",
         "--add",
         test::source_dir() + "/tests/walker/workloads/mini_live.lua:/opt/mini/mini_live.lua",
         "--add",
         tests + "/arm64_vm/guest_record.sh:/opt/guest_record.sh",
         "--out",
         out_,
         "--",
         "sh",
         "/opt/guest_record.sh",
         "/opt/ljprof/ljprof",
         "/opt/workloads",
         std::to_string(kSeconds),
         "luajit=/usr/bin/luajit",
         "tarantool_luajit=/opt/tarantool-luajit/luajit"});
    std::cout << vm_.out;
  }

  static std::string file(const std::string& name) { return out_ + "/" + name; }
  static std::string tls_threads_exe() { return out_ + "/tls_threads"; }
  // Named so, the executable is taken for a Tarantool (luajit/runtime.h).
  static std::string mini_tarantool_exe() { return out_ + "/mini/tarantool"; }

  // One recording's exit status and summary, asserted by the caller.
  static void expect_recorded(const std::string& name) {
    ASSERT_EQ(vm_.exit_code, 0) << "the VM run failed:\n" << vm_.err << vm_.out;
    ASSERT_TRUE(test::file_exists(file(name + ".rc"))) << name << " did not run:\n" << vm_.out;
    EXPECT_EQ(test::read_text(file(name + ".rc")), "0\n") << test::read_text(file(name + ".log"));
  }

  // A runtime ljprof attached to inside the VM: its split against its own clock.
  static void expect_split(const std::string& name) {
    expect_recorded(name);
    expect_profile_matches_vm(file(name + ".folded"),
                              VmReport::parse(test::read_text(file(name + ".report"))), 0.99,
                              test::read_text(file(name + ".log")), kMinSamples, kMinNestedShare);
  }

  static inline std::string out_;
  static inline test::CommandResult vm_;
};

TEST_F(RecordArm64Vm, LuajitJitOnSharesMatchTheVmsOwnClock) {
  expect_split("luajit_jit_on");
}

TEST_F(RecordArm64Vm, LuajitJitOffSharesMatchTheVmsOwnClock) {
  expect_split("luajit_jit_off");
}

TEST_F(RecordArm64Vm, TarantoolLuajitJitOnSharesMatchTheVmsOwnClock) {
  expect_split("tarantool_luajit_jit_on");
}

TEST_F(RecordArm64Vm, TarantoolLuajitJitOffSharesMatchTheVmsOwnClock) {
  expect_split("tarantool_luajit_jit_off");
}

void expect_nginx_case(const std::string& name) {
  const std::string dir = testing::TempDir() + "/ljprof-arm64-vm/";
  EXPECT_FALSE(test::file_exists(dir + name + ".failed"))
      << test::read_text(dir + name + ".failed");
  const VmReport before = VmReport::parse(test::read_text(dir + name + ".before"));
  const VmReport after = VmReport::parse(test::read_text(dir + name + ".after"));
  ASSERT_EQ(before.parts.size(), 5u) << test::read_text(dir + name + ".log");
  expect_profile_matches_vm(dir + name + ".folded", after.since(before), 0.99,
                            test::read_text(dir + name + ".log"), kMinSamples, kMinNestedShare);
}

TEST_F(RecordArm64Vm, NginxLuaWorkerJitOnSharesMatchItsOwnClock) {
  expect_recorded("nginx_lua_jit_on");
  expect_nginx_case("nginx_lua_jit_on");
}

TEST_F(RecordArm64Vm, NginxLuaWorkerJitOffSharesMatchItsOwnClock) {
  expect_recorded("nginx_lua_jit_off");
  expect_nginx_case("nginx_lua_jit_off");
}

// Debian 12's arm64 vDSO has no CFI; its functions are proven leaves (cfi/leaf_code.cc), so a
// sample in clock_gettime's vDSO code (os.clock, the split's CLOCK_MONOTONIC reads, nginx's
// time updates) unwinds through it to the root: the vDSO function's caller is glibc's
// clock_gettime (or the FFI's call of it), and no walk ends in the vDSO.
TEST_F(RecordArm64Vm, SamplesInTheVdsoUnwindThroughIt) {
  double in_vdso = 0;
  for (const char* name : {"luajit_jit_on", "luajit_jit_off", "tarantool_luajit_jit_on",
                           "tarantool_luajit_jit_off", "nginx_lua_jit_on", "nginx_lua_jit_off"}) {
    expect_recorded(name);
    const std::string log = test::read_text(file(std::string(name) + ".log"));
    EXPECT_EQ(log.find("[vdso]"), std::string::npos) << name << ": a walk ended in the vDSO\n"
                                                     << log;
    for (const FoldedStack& stack : read_folded(file(std::string(name) + ".folded"))) {
      const std::vector<std::string>& f = stack.frames;
      if (f.size() < 2 || f.back() != "__kernel_clock_gettime") continue;
      in_vdso += stack.count;
      EXPECT_TRUE(stack.rooted()) << name << ": " << stack.line;
      EXPECT_EQ(f[f.size() - 2].rfind("clock_gettime", 0), 0u) << name << ": " << stack.line;
    }
  }
  // Each case reads the clock 9 times a round; a few hundred rounds give a few dozen samples.
  EXPECT_GT(in_vdso, 0) << "no sample in the vDSO's clock_gettime";
}

// record --off-cpu on the arm64 kernel: the off-CPU view's split between the two Lua functions
// that block in usleep is the one the workload measured with its own clock (90/10), within 5
// points (tests/record/workloads/off_cpu.lua; the x86-64 twin is RecordOffCpu).
TEST_F(RecordArm64Vm, OffCpuTimeSplitsAsTheWorkloadsOwnClock) {
  expect_recorded("off_cpu");
  const std::string out = test::read_text(file("off_cpu.out"));
  const size_t at = out.find("off_cpu long=");
  ASSERT_NE(at, std::string::npos) << out << test::read_text(file("off_cpu.log"));
  double long_s = 0, short_s = 0;
  ASSERT_EQ(std::sscanf(out.c_str() + at, "off_cpu long=%lf short=%lf", &long_s, &short_s), 2);
  double in_long = 0, in_short = 0;
  for (const FoldedStack& stack : read_folded(file("off_cpu.folded"))) {
    for (const std::string& frame : stack.frames) {
      if (frame.rfind("long_wait", 0) == 0) in_long += stack.count;
      if (frame.rfind("short_wait", 0) == 0) in_short += stack.count;
    }
  }
  ASSERT_GT(in_long + in_short, 0) << test::read_text(file("off_cpu.log"));
  std::cout << "arm64 off-CPU: long_wait " << in_long / 1e6 << " s, short_wait " << in_short / 1e6
            << " s; the workload measured " << long_s << " s and " << short_s << " s\n";
  EXPECT_NEAR(100 * in_long / (in_long + in_short), 100 * long_s / (long_s + short_s), 5);
}

// Every recording loaded the program through the arm64 kernel's verifier and, once ljprof
// exited, the kernel holds exactly the BPF programs it held before (nothing leaked: a link or
// program left behind would keep its JIT image listed in /proc/kallsyms).
// A signal handler's samples go on through the vDSO's __kernel_rt_sigreturn (this kernel's vDSO
// has no unwind tables: the trampoline is found by its symbol and instructions) into the Lua
// loop the signal interrupted; the x86-64 twin is RecordSignal.
TEST_F(RecordArm64Vm, SignalHandlerSamplesContinueIntoTheInterruptedLuaLoop) {
  expect_recorded("signal");
  const SignalLines lines = signal_lines(test::read_text(file("signal.out")));
  ASSERT_FALSE(lines.loop.empty()) << test::read_text(file("signal.out"));
  const SignalTally t = tally_signal_stacks(file("signal.folded"), lines);
  const std::string log = test::read_text(file("signal.log"));
  std::cout << t.walked << " samples, " << t.rooted << " rooted, " << t.in_handler
            << " in the handler, " << t.at_loop << " at " << lines.loop << ", " << t.at_clock
            << " at " << lines.clock << "\n";
  EXPECT_GE(t.walked, 200) << log;
  EXPECT_GE(t.rooted, 0.95 * t.walked) << log;
  EXPECT_GE(t.in_handler, 0.2 * t.walked) << test::read_text(file("signal.folded"));
  EXPECT_GE(t.at_loop + t.at_clock, 0.95 * t.in_handler) << test::read_text(file("signal.folded"));
  EXPECT_GE(t.at_loop, 0.05 * t.in_handler) << test::read_text(file("signal.folded"));
}

// The trace exit handler and lj_trace_exit (workloads/trace_exits.lua: every exit goes through
// them), as on x86-64 (record_test.cc RecordFromTrace): at least 98% of the walks reach a root
// (23-25% before the AArch64 handler had rows of its own) and, where lj_trace_exit is named
// (Tarantool's fork keeps its symbols), it nests under the loop function whose trace exits, by
// the name the VM reports, with no Lua frame inside it.
void expect_trace_exits(const std::string& name, bool named) {
  SCOPED_TRACE(name);
  const std::string folded = name + "_trace_exits.folded";
  ASSERT_EQ(test::read_text(name + "_trace_exits.rc"), "0\n")
      << test::read_text(name + "_trace_exits.log");
  std::istringstream report(test::read_text(name + "_trace_exits.report"));
  std::string loop, linedefined;
  ASSERT_TRUE(report >> loop >> linedefined);
  RootTally tally;
  double inside = 0, nested = 0;
  for (const FoldedStack& stack : read_folded(folded)) {
    tally.add(stack);
    const auto at = std::find(stack.frames.begin(), stack.frames.end(), "lj_trace_exit");
    if (at == stack.frames.end()) continue;
    inside += stack.count;
    if (at != stack.frames.begin() && (at - 1)->rfind(loop + " (trace_exits.lua", 0) == 0) {
      nested += stack.count;
    }
    for (auto k = at + 1; k != stack.frames.end(); ++k) {
      EXPECT_EQ(k->find(".lua:"), std::string::npos) << stack.line;
    }
  }
  std::cout << fmt::format(
      "{}: {} samples, {:.2f}% rooted, {} in lj_trace_exit, {} under {}\n", name, tally.total,
      100 * tally.rooted / std::max(tally.with_context, 1.0), inside, nested, loop);
  EXPECT_GE(tally.rooted, 0.98 * tally.with_context);
  if (named) {
    EXPECT_GT(inside, 0.1 * tally.total);
    EXPECT_GE(nested, 0.99 * inside);
  }
}

TEST_F(RecordArm64Vm, TraceExitsWalkThroughTheExitHandler) {
  ASSERT_EQ(vm_.exit_code, 0) << "the VM run failed:\n" << vm_.err << vm_.out;
  expect_trace_exits(file("tarantool_luajit"), true);
  expect_trace_exits(file("luajit"), false);
}

// The Tarantool in miniature (tests/walker/workloads/mini_tarantool.c running mini_live.lua):
// `ljprof fibers -p` lists both cords' fibers with full stacks. Oracles: the fiber's own printed
// id, name and debug.traceback() (its Lua frames); the cords and fiber names the workload
// creates; coro_startup, the proven root.
TEST_F(RecordArm64Vm, MiniTarantoolLiveFibersOfEveryCordWithFullStacks) {
  ASSERT_EQ(vm_.exit_code, 0) << "the VM run failed:\n" << vm_.err << vm_.out;
  const std::string out = test::read_text(file("mini.out"));
  ASSERT_EQ(test::read_text(file("mini_fibers.rc")), "0\n")
      << test::read_text(file("mini_fibers.log"));
  const auto j = nlohmann::json::parse(test::read_text(file("mini_fibers.json")));
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(ljprof-fiber (\d+) (\S+))"))) << out;
  const uint64_t sleeper_id = std::stoull(m[1]);
  std::vector<std::pair<std::string, int>> traceback;  // innermost first, as frames are
  static const std::regex line(R"(\t([^\n:]+):(\d+): in )");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), line); it != std::sregex_iterator();
       ++it) {
    traceback.emplace_back((*it)[1], std::stoi((*it)[2]));
  }
  ASSERT_GE(traceback.size(), 3u) << out;
  std::map<std::string, const nlohmann::json*> by_name;  // "cord/name"
  for (const auto& f : j["fibers"]) {
    by_name[f["cord"].get<std::string>() + "/" + f["name"].get<std::string>()] = &f;
  }
  for (const char* name :
       {"main/sleeper", "main/spin3", "main/spin1", "worker/c-idle", "worker/c-spin"}) {
    EXPECT_TRUE(by_name.count(name)) << name << " not listed:\n" << j.dump(1);
  }
  for (const char* name : {"main/sleeper", "worker/c-idle"}) {
    SCOPED_TRACE(name);
    if (!by_name.count(name)) continue;
    const auto& f = *by_name[name];
    EXPECT_EQ(f["state"], "suspended");
    ASSERT_TRUE(f["reached_root"].get<bool>()) << f.dump(1);
    const auto& frames = f["frames"];
    EXPECT_EQ(frames.back()["kind"], "root") << f.dump(1);
    EXPECT_EQ(frames.back()["symbol"], "coro_startup") << f.dump(1);
    if (std::string(name) != "main/sleeper") continue;
    EXPECT_EQ(f["id"], sleeper_id);
    std::vector<std::pair<std::string, int>> lua;
    for (const auto& frame : frames) {
      if (frame["kind"] == "lua") lua.emplace_back(frame["source"], frame["line"]);
    }
    EXPECT_EQ(lua, traceback) << f.dump(1);
  }
  EXPECT_NE(by_name.count("worker/c-idle") ? (*by_name["worker/c-idle"])["tid"] : nlohmann::json(),
            by_name.count("main/sleeper") ? (*by_name["main/sleeper"])["tid"] : nlohmann::json())
      << "the worker cord runs on a thread of its own";
}

// `ljprof fibers --sample` (a wall-clock profile) of both cords: every tick has one sample of
// each fiber that lives through it, so the two parked fibers (one per cord) and the fibers that
// never end weigh the same, and the parked ones are shown at full stacks where they wait.
TEST_F(RecordArm64Vm, MiniTarantoolWallProfileOfBothCords) {
  ASSERT_EQ(vm_.exit_code, 0) << "the VM run failed:\n" << vm_.err << vm_.out;
  ASSERT_EQ(test::read_text(file("mini_wall.rc")), "0\n") << test::read_text(file("mini_wall.log"));
  std::map<std::string, double> weight;             // by fiber group
  std::map<std::string, std::string> parked_stack;  // the parked fibers' (one stack each)
  for (const FoldedStack& stack : read_folded(file("mini_wall.folded"))) {
    ASSERT_FALSE(stack.frames.empty());
    const std::string& group = stack.frames.front();
    weight[group] += stack.count;
    if (group == "fiber:sleeper" || group == "fiber:c-idle (worker)") {
      EXPECT_FALSE(parked_stack.count(group)) << "two stacks for a parked fiber:\n" << stack.line;
      parked_stack[group] = stack.line;
    }
  }
  const double ticks = weight["fiber:sleeper"];
  EXPECT_GT(ticks, 10);
  for (const char* group :
       {"fiber:c-idle (worker)", "fiber:spin3", "fiber:spin1", "fiber:c-spin (worker)"}) {
    EXPECT_EQ(weight[group], ticks) << group;
  }
  const std::string& sleeper = parked_stack["fiber:sleeper"];
  EXPECT_NE(sleeper.find(";coro_startup [root];"), std::string::npos) << sleeper;
  EXPECT_NE(sleeper.find(";nap (mini_live.lua:"), std::string::npos) << sleeper;
  const std::string& idle = parked_stack["fiber:c-idle (worker)"];
  EXPECT_NE(idle.find(";coro_startup [root];c_idle;c_idle_wait;fiber_yield "), std::string::npos)
      << idle;
}

// Samples labelled with the fiber they ran on, on both cords: the main thread's through
// main_cord or its TPIDR_EL0, the worker thread's through its own TPIDR_EL0 (the kernel's saved
// tp_value), and short-lived fibers' though each is gone within milliseconds. Oracle: the
// workload's own per-fiber CPU clock (its reports before and after).
TEST_F(RecordArm64Vm, MiniTarantoolSamplesCarryTheirFibersOnBothCords) {
  expect_recorded("mini");
  auto cpu = [&](const std::string& name) {
    std::map<std::string, double> v;
    std::istringstream in(test::read_text(file(name)));
    std::string key;
    double value = 0;
    while (in >> key >> value) v[key] = value;
    return v;
  };
  auto before = cpu("mini.before"), after = cpu("mini.after");
  const double spin3 = after["spin3"] - before["spin3"], spin1 = after["spin1"] - before["spin1"];
  ASSERT_GT(spin3 + spin1, 0.5) << "the fibers did not spin";
  std::map<std::string, double> by_group;  // the folded stacks' outermost frame
  double total = 0, in_short = 0, in_short_named = 0;
  std::istringstream folded(test::read_text(file("mini.folded")));
  for (std::string l; std::getline(folded, l);) {
    const size_t space = l.rfind(' ');
    if (space == std::string::npos) continue;
    const double n = std::stod(l.substr(space + 1));
    const std::string first = l.substr(0, l.find(';'));
    by_group[first.rfind("fiber:", 0) == 0 ? first : "(no fiber)"] += n;
    total += n;
    if (l.find(";short_burn ") != std::string::npos) {
      in_short += n;
      in_short_named += first == "fiber:short" ? n : 0;
    }
  }
  std::string groups;
  for (const auto& [g, n] : by_group) groups += fmt::format("  {} {}\n", g, n);
  const double ours = by_group["fiber:spin3"] / (by_group["fiber:spin3"] + by_group["fiber:spin1"]);
  std::cout << fmt::format(
      "mini tarantool: spin3 {:.1f}% of the spinners' samples (its clock {:.1f}%); {} of {} "
      "samples in short-lived fibers named; the workload: {}\n{}",
      100 * ours, 100 * spin3 / (spin3 + spin1), in_short_named, in_short,
      test::read_text(file("mini.out")).substr(0, 200), groups);
  EXPECT_NEAR(100 * ours, 100 * spin3 / (spin3 + spin1), 5) << groups;
  EXPECT_GT(by_group["fiber:c-spin (worker)"], 0.2 * total) << groups;
  EXPECT_LT(by_group["(no fiber)"], 0.05 * total) << groups;
  // Fibers that live a few milliseconds (one created and finished about every 10 ms).
  ASSERT_GT(in_short, 20) << groups;
  EXPECT_GE(in_short_named, 0.95 * in_short) << groups;
}

// Oracles: the threads' own gettid(), __builtin_thread_pointer() and cord_ptr values, printed
// before the abort; cord_ptr's place in the TLS block by aarch64-linux-gnu-nm and -readelf.
TEST_F(RecordArm64Vm, KernelCoreThreadPointersAndGlibcsThreadListAsTheThreadsSawThem) {
  ASSERT_EQ(vm_.exit_code, 0) << "the VM run failed:\n" << vm_.err << vm_.out;
  const test::TlsThreadsOutput printed =
      test::parse_tls_threads(test::read_text(file("tls_threads.out")));
  core::CoreOptions options;
  options.exe = tls_threads_exe();
  auto core = core::CoreFile::open(file("tls_threads.core"), options);
  ASSERT_TRUE(core.ok()) << core.message();
  std::map<uint32_t, uint64_t> noted;
  for (const core::Thread& t : core->threads()) {
    ASSERT_TRUE(t.thread_pointer.has_value()) << "thread " << t.tid << " has no NT_ARM_TLS";
    noted[t.tid] = *t.thread_pointer;
  }
  ASSERT_EQ(noted.size(), printed.threads.size());
  for (const test::PrintedThread& p : printed.threads) {
    EXPECT_EQ(noted[p.tid], p.thread_pointer) << "thread " << p.tid;
  }
  auto listed = core::glibc_threads(*core);
  ASSERT_TRUE(listed.ok()) << listed.message();
  test::expect_threads_as_printed(*core, *listed, printed,
                                  test::cord_ptr_tls(tls_threads_exe(), true));
}

TEST_F(RecordArm64Vm, ProgramsLoadAndNothingIsLeftBehind) {
  ASSERT_EQ(vm_.exit_code, 0) << vm_.err << vm_.out;
  const std::vector<std::string> lines = split(test::read_text(file("bpf_programs")), '\n');
  ASSERT_EQ(lines.size(), 2u) << test::read_text(file("bpf_programs"));
  EXPECT_EQ(split(lines[0], ' ').at(1), split(lines[1], ' ').at(1))
      << test::read_text(file("bpf_programs"));
  EXPECT_GT(std::stoi("0" + test::read_text(file("bpf_programs_during"))),
            std::stoi(split(lines[0], ' ').at(1)))
      << "the kernel never listed ljprof's programs while it recorded";
  for (const char* name : {"luajit_jit_on", "luajit_jit_off", "tarantool_luajit_jit_on",
                           "tarantool_luajit_jit_off", "nginx_lua_jit_on", "nginx_lua_jit_off"}) {
    EXPECT_NE(test::read_text(file(std::string(name) + ".log")).find("unwound to a proven root"),
              std::string::npos)
        << name << ": no summary of delivered samples:\n"
        << test::read_text(file(std::string(name) + ".log"));
  }
}

}  // namespace
}  // namespace ljprof
