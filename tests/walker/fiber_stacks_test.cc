// Full stacks of switched-out Tarantool fibers (ljprof core --all-fibers; x86-64, and arm64 on a
// Tarantool in miniature, below): each fiber of named_fibers.lua is walked from the registers
// its coro_transfer saved at fiber.ctx.sp. Oracles:
//  - the machine code of coro_transfer in /usr/bin/tarantool (objdump -d): the order of the saved
//    words the walk reads (core/core_fibers.cc);
//  - the fiber's own debug.traceback(), printed by the fiber: its Lua frames;
//  - the fiber's C backtrace in fiber.info() (Debian's tarantool 2.6 is built with
//    ENABLE_BACKTRACE), printed by the workload before it aborts: its native frames, by name and
//    in order;
//  - the stack ends at the x86-64 fiber root coro_init (third_party/coro/coro.c, its
//    `.cfi_undefined rip` after the first switch).
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "support/test_support.h"
#include "traceback_oracle.h"
#include "workload_core.h"

namespace ljprof {
namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

const test::Target kTarantool{"tarantool_amd64", "/usr/bin/tarantool", false};

// The instructions of `function` in `binary`, as objdump prints them ("push   %rbp").
std::vector<std::string> disassembly(const std::string& binary, const std::string& function) {
  test::CommandResult r =
      test::run({"objdump", "-d", "--no-show-raw-insn", "--disassemble=" + function, binary});
  static const std::regex insn(R"(^\s+[0-9a-f]+:\s+(\S.*?)\s*$)");
  std::vector<std::string> out;
  for (const std::string& line : test::lines_of(r.out)) {
    std::smatch m;
    if (std::regex_match(line, m, insn)) {
      out.push_back(std::regex_replace(std::string(m[1]), std::regex(R"(\s+)"), " "));
    }
  }
  return out;
}

// The walk reads, from the saved sp up: r15, r14, r13, r12, rbx, rbp, the return address. That
// holds only if coro_transfer pushes rbp first and r15 last, stores rsp, and returns with
// `pop rcx; jmp *rcx` after popping the six.
TEST(FiberStacks, CoroTransferSavesWhatTheWalkReads) {
  ASSERT_TRUE(test::file_exists(kTarantool.exe));
  const std::vector<std::string> got = disassembly(kTarantool.exe, "coro_transfer");
  const std::vector<std::string> want = {
      "push %rbp",       "push %rbx",       "push %r12", "push %r13", "push %r14", "push %r15",
      "mov %rsp,(%rdi)", "mov (%rsi),%rsp", "pop %r15",  "pop %r14",  "pop %r13",  "pop %r12",
      "pop %rbx",        "pop %rbp",        "pop %rcx",  "jmp *%rcx"};
  ASSERT_GE(got.size(), want.size());
  EXPECT_EQ(std::vector<std::string>(got.begin(), got.begin() + want.size()), want);
}

TEST(FiberStacks, SuspendedFibersShowTheirFullStacks) {
  ASSERT_TRUE(test::file_exists(kTarantool.exe));
  test::Dump d = test::dump_core(kTarantool, "named_fibers.lua");
  ASSERT_TRUE(fs::exists(d.core));
  auto blocks = test::parse_tracebacks(d.out);
  std::vector<test::PrintedFiber> fibers = test::printed_fibers(d.out, "ljprof-fiber");
  auto backtraces = test::fiber_info_backtraces(d.out);
  ASSERT_EQ(blocks.size(), 4u) << d.out;  // the three fibers', then the crash
  ASSERT_EQ(fibers.size(), 3u) << d.out;
  test::CommandResult r = test::run({test::ljprof_bin(), "core", "--json", "--all-fibers", d.core});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = Json::parse(r.out);
  test::CommandResult text = test::run({test::ljprof_bin(), "core", "--all-fibers", d.core});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  for (size_t i = 0; i < fibers.size(); ++i) {
    SCOPED_TRACE(fmt::format("fiber {} {}", fibers[i].id, fibers[i].name));
    const Json* found = test::coroutine_of_fiber(j, fibers[i].id);
    ASSERT_NE(found, nullptr) << j["coroutines"].dump(1);
    const Json& frames = (*found)["frames"];
    EXPECT_FALSE(found->contains("full_stack_error")) << (*found)["full_stack_error"];
    EXPECT_TRUE((*found)["reached_root"].get<bool>()) << (*found)["end"];
    ASSERT_FALSE(frames.empty());
    EXPECT_EQ(frames.back()["kind"], "root") << test::describe(frames);
    EXPECT_EQ(frames.back()["symbol"], "coro_init") << test::describe(frames);
    // The Lua frames, as the fiber's own traceback (the leading C function is the blocking call
    // made after it was printed).
    test::expect_lua_frames_match(frames, {blocks[i]}, 0, true);
    // The native frames hold fiber.info()'s C backtrace of this fiber, in its order.
    const std::vector<std::string>& want = backtraces[fibers[i].id];
    EXPECT_GE(want.size(), 4u) << "fiber.info() printed no C backtrace for it\n" << d.out;
    test::expect_native_names_in_order(frames, want);
    EXPECT_NE(
        text.out.find(fmt::format("Fiber {} \"{}\" (suspended):\n", fibers[i].id, fibers[i].name)),
        std::string::npos)
        << text.out;
  }
}

// The switched-out fiber `id` of the cord thread `tid` runs (cords' names repeat: every coio
// worker's is "coio") in the report: a native fiber (a C fiber, or any fiber of a cord other
// than main) or a main-cord fiber's coroutine.
const Json* switched_out_fiber(const Json& j, const std::string& cord, uint32_t tid, uint64_t id) {
  if (j.contains("native_fibers")) {
    for (const Json& f : j["native_fibers"]) {
      if (f["tid"] == tid && f["cord"] == cord && f["fiber"]["id"] == id) return &f;
    }
  }
  return cord == "main" ? test::coroutine_of_fiber(j, id) : nullptr;
}

// arm64, where no package has a Tarantool: workloads/mini_tarantool.c is one in miniature (an
// executable named tarantool, Tarantool's LuaJIT fork for arm64 from the matrix linked in, 3.3's
// struct fiber and struct cord, AArch64 coro_transfer/coro_startup as third_party/coro has them),
// built here and run under qemu-aarch64 until it aborts with three fibers switched out
// (mini_fibers.lua). Oracles: each fiber's own id, name and debug.traceback(), and the return
// addresses its C code printed (__builtin_return_address in fiber_yield and fiber_main).
TEST(FiberStacks, Arm64SuspendedFibersShowTheirFullStacks) {
  const std::string luajit_src =
      test::fixture("matrix/tarantool-arm64-gcc-O2/src/third_party/luajit/src");
  ASSERT_TRUE(test::file_exists(luajit_src + "/libluajit.a"))
      << "run scripts/luajit-matrix (make test does)";
  test::TempDir dir;
  const std::string exe = dir.file("tarantool");
  const std::string workloads = test::source_dir() + "/tests/walker/workloads";
  const test::CommandResult cc = test::run(
      {"aarch64-linux-gnu-gcc", "-O1", "-g", "-DHAVE_MADV_DONTNEED", "-I" + luajit_src,
       "-I" + test::source_dir() + "/tests/luajit/synthetic", workloads + "/mini_tarantool.c",
       luajit_src + "/libluajit.a", "-lm", "-ldl", "-pthread", "-o", exe});
  ASSERT_EQ(cc.exit_code, 0) << cc.err;
  const test::Target target{"mini_tarantool_arm64", exe, true};
  test::Dump d = test::dump_core(target, "mini_fibers.lua");
  ASSERT_TRUE(fs::exists(d.core));
  auto blocks = test::parse_tracebacks(d.out);
  std::vector<test::PrintedFiber> fibers = test::printed_fibers(d.out, "ljprof-fiber");
  ASSERT_EQ(blocks.size(), 3u) << d.out;
  ASSERT_EQ(fibers.size(), 3u) << d.out;
  const std::vector<std::string> args = {"--sysroot", "/usr/aarch64-linux-gnu", "--exe", exe,
                                         d.core};
  std::vector<std::string> argv = {test::ljprof_bin(), "core", "--json", "--all-fibers"};
  argv.insert(argv.end(), args.begin(), args.end());
  test::CommandResult r = test::run(argv);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = Json::parse(r.out);
  argv = {test::ljprof_bin(), "core", "--all-fibers"};
  argv.insert(argv.end(), args.begin(), args.end());
  test::CommandResult text = test::run(argv);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  // A qemu-user core has no NT_ARM_TLS: the thread's cord comes through glibc's thread list.
  EXPECT_FALSE(j.contains("cords_error")) << j["cords_error"];
  ASSERT_EQ(j["threads"].size(), 1u);
  EXPECT_EQ(j["threads"][0]["cord"], "main") << j["threads"][0].dump(1);
  for (size_t i = 0; i < fibers.size(); ++i) {
    SCOPED_TRACE(fmt::format("fiber {} {}", fibers[i].id, fibers[i].name));
    const Json* found = test::coroutine_of_fiber(j, fibers[i].id);
    ASSERT_NE(found, nullptr) << j["coroutines"].dump(1);
    EXPECT_FALSE(found->contains("full_stack_error")) << (*found)["full_stack_error"];
    ASSERT_TRUE((*found)["reached_root"].get<bool>()) << (*found)["end"];
    const Json& frames = (*found)["frames"];
    ASSERT_GE(frames.size(), 2u);
    test::expect_lua_frames_match(frames, {blocks[i]}, 0, true);
    const std::string ra = fmt::format(R"(ljprof-ra {} (\w+) (0x[0-9a-f]+))", fibers[i].id);
    std::map<std::string, uint64_t> printed;
    const std::regex ra_line(ra);
    for (auto it = std::sregex_iterator(d.out.begin(), d.out.end(), ra_line);
         it != std::sregex_iterator(); ++it) {
      printed[(*it)[1]] = std::stoull((*it)[2], nullptr, 16);
    }
    ASSERT_EQ(printed.size(), 2u) << d.out;
    // fiber_yield's caller, where the switch-out happened, is the frame after the resume point.
    EXPECT_EQ(frames[0]["symbol"], "fiber_yield") << test::describe(frames);
    EXPECT_EQ(test::hex(frames[1]["pc"]), printed["yield"]) << test::describe(frames);
    EXPECT_EQ(frames.back()["kind"], "root") << test::describe(frames);
    EXPECT_EQ(frames.back()["symbol"], "coro_startup") << test::describe(frames);
    EXPECT_EQ(test::hex(frames.back()["pc"]), printed["startup"]) << test::describe(frames);
    EXPECT_NE(
        text.out.find(fmt::format("Fiber {} \"{}\" (suspended):\n", fibers[i].id, fibers[i].name)),
        std::string::npos)
        << text.out;
  }
}

// Every thread's cord, found through its TLS cord_ptr, and every fiber of every cord with its
// full stack. Oracle: gdb (the cords and fiber lists through its own TLS and DWARF reading, and
// the return address each switched-out fiber's context saved: the stack's first pc).
// (fiber.info()'s C backtraces are no oracle here: for C fibers they start at a wrong pc, "_fini",
// "(nil)", and a fiber never started has none.)
TEST(FiberStacks, EveryCordsFibersWithTheirStacks) {
  ASSERT_TRUE(test::file_exists(kTarantool.exe));
  test::Dump d = test::dump_core(kTarantool, "cord_fibers.lua");
  ASSERT_TRUE(fs::exists(d.core));
  const std::map<uint32_t, test::GdbCord> cords = test::gdb_cords({kTarantool.exe, d.core});
  test::CommandResult r = test::run({test::ljprof_bin(), "core", "--json", "--all-fibers", d.core});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = Json::parse(r.out);
  EXPECT_FALSE(j.contains("cords_error")) << j["cords_error"];
  std::set<std::string> names;
  for (const auto& [tid, cord] : cords) {
    SCOPED_TRACE(fmt::format("thread {} cord {}", tid, cord.name));
    names.insert(cord.name);
    const Json* thread = nullptr;
    for (const Json& t : j["threads"]) {
      if (t["tid"] == tid) thread = &t;
    }
    ASSERT_NE(thread, nullptr);
    EXPECT_EQ((*thread)["cord"], cord.name);
    EXPECT_EQ((*thread)["fiber"]["id"], cord.running);
    for (const test::GdbFiber& want : cord.fibers) {
      SCOPED_TRACE(fmt::format("fiber {} {}", want.id, want.name));
      const Json* f = switched_out_fiber(j, cord.name, tid, want.id);
      ASSERT_NE(f, nullptr) << r.out;
      EXPECT_EQ((*f)["fiber"]["name"], want.name);
      ASSERT_TRUE((*f)["reached_root"].get<bool>()) << f->dump();
      const Json& frames = (*f)["frames"];
      EXPECT_EQ(frames.front()["pc"], want.saved_return) << test::describe(frames);
      EXPECT_EQ(frames.front()["symbol"], want.symbol) << test::describe(frames);
      EXPECT_EQ(frames.back()["symbol"], "coro_init") << test::describe(frames);
    }
  }
  // The threads box.cfg starts run cords of their own (two coio workers may both run one named
  // "coio"): ljprof finds a cord for exactly the threads gdb does.
  EXPECT_TRUE(names.count("main") && names.count("wal") && names.count("iproto"))
      << fmt::format("{}", fmt::join(names, ", "));
  size_t with_cord = 0;
  for (const Json& t : j["threads"]) with_cord += t.contains("cord") ? 1 : 0;
  EXPECT_EQ(with_cord, cords.size());
}

}  // namespace
}  // namespace ljprof
