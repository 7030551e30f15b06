// `ljprof fibers -p PID` on a running Debian tarantool 2.6, never stopped. Oracles, all from the
// workload itself (tests/walker/workloads):
//  - live_fibers.lua: each fiber's own id, name and debug.traceback() printed right before it
//    suspends; its status() as the main fiber reads it; fiber.info()'s fiber names and C
//    backtraces (ENABLE_BACKTRACE);
//  - wall_fiber.lua: the time one fiber spends in each of two waits, by the monotonic clock;
//  - cord_fibers.lua: a configured box's threads; gdb names each thread's cord and fibers.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "support/tarantool_copies.h"
#include "support/test_support.h"
#include "traceback_oracle.h"
#include "workload_core.h"

namespace ljprof {
namespace {

using Json = nlohmann::json;
const char* const kTarantool = "/usr/bin/tarantool";

// A workload of tests/walker/workloads running under tarantool in its own directory (box.cfg
// writes there), until the guard goes; ready() once it printed "ljprof-ready".
struct LiveWorkload {
  test::TempDir dir;
  std::unique_ptr<test::Background> process;
  // `env`: NAME=VALUE settings for the workload; `exe`: the tarantool that runs it.
  explicit LiveWorkload(const std::string& workload, const std::vector<std::string>& env = {},
                        const std::string& exe = kTarantool) {
    const std::filesystem::path workloads =
        std::filesystem::path(test::source_dir()) / "tests/walker/workloads";
    for (const std::string& file : {workload, std::string("common.lua")}) {
      std::filesystem::copy_file(workloads / file, dir.file(file));
    }
    std::vector<std::string> argv = {"env", "-C", dir.path()};
    argv.insert(argv.end(), env.begin(), env.end());
    argv.insert(argv.end(), {exe, workload});
    process = std::make_unique<test::Background>(argv, dir.file("out"));
  }
  bool ready() { return test::wait_for_text(dir.file("out"), "ljprof-ready", 60); }
  std::string out() const { return test::read_text(dir.file("out")); }
  std::string pid() const { return std::to_string(process->pid()); }
};

// Fiber `id` of cord `cord` (ids are per cord: each starts at 101).
const Json* fiber_by_id(const Json& j, uint64_t id, const std::string& cord = "main") {
  for (const Json& f : j["fibers"]) {
    if (f["id"] == id && f["cord"] == cord) return &f;
  }
  return nullptr;
}

// Fiber `id` of the cord that thread `tid` runs: cords' names repeat, their threads do not.
const Json* fiber_of_thread(const Json& j, uint64_t id, uint32_t tid) {
  for (const Json& f : j["fibers"]) {
    if (f["id"] == id && f["tid"] == tid) return &f;
  }
  return nullptr;
}

// "ljprof-status ID STATUS" lines: fiber:status() as the workload saw it.
std::map<uint64_t, std::string> printed_statuses(const std::string& out) {
  std::map<uint64_t, std::string> by_id;
  for (const test::PrintedFiber& f : test::printed_fibers(out, "ljprof-status")) {
    by_id[f.id] = f.name;
  }
  return by_id;
}

// What live_fibers.lua printed of itself: its output, the tracebacks of its three fibers (then
// the main one's), their ids and names, and each fiber's status() as the main fiber read it.
struct LiveFibersPrinted {
  std::string out;
  std::vector<std::vector<test::ExpectedFrame>> blocks;
  std::vector<test::PrintedFiber> fibers;
  std::map<uint64_t, std::string> statuses;
};
LiveFibersPrinted live_fibers_printed(const LiveWorkload& w) {
  LiveFibersPrinted p;
  p.out = w.out();
  p.blocks = test::parse_tracebacks(p.out);
  p.fibers = test::printed_fibers(p.out, "ljprof-fiber");
  p.statuses = printed_statuses(p.out);
  EXPECT_EQ(p.blocks.size(), 3u) << p.out;
  EXPECT_EQ(p.fibers.size(), 3u) << p.out;
  return p;
}

// ljprof's fiber `i` of the workload's own account, its name, state and whole stack as printed;
// null (a failure) when missing.
const Json* fiber_as_printed(const Json& j, LiveFibersPrinted& p, size_t i) {
  const Json* f = fiber_by_id(j, p.fibers[i].id);
  EXPECT_NE(f, nullptr) << j.dump(1);
  if (f == nullptr) return nullptr;
  EXPECT_EQ((*f)["name"], p.fibers[i].name);
  EXPECT_EQ((*f)["state"], p.statuses[p.fibers[i].id]);
  EXPECT_TRUE((*f)["reached_root"].get<bool>()) << f->dump();
  return f;
}

TEST(LiveFibers, EveryFiberWithItsStateAndFullStack) {
  ASSERT_TRUE(test::file_exists(kTarantool));
  LiveWorkload w("live_fibers.lua");
  ASSERT_TRUE(w.ready()) << w.out();
  test::CommandResult r = test::run({test::ljprof_bin(), "fibers", "-p", w.pid(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = Json::parse(r.out);
  test::CommandResult text = test::run({test::ljprof_bin(), "fibers", "-p", w.pid()});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  // Never stopped (T) or traced (t): running or asleep in its event loop, whichever it was then.
  const char state = test::process_state(w.process->pid());
  EXPECT_TRUE(state == 'S' || state == 'R') << "the process must not be stopped: " << state;
  LiveFibersPrinted printed = live_fibers_printed(w);
  auto& [out, blocks, fibers, statuses] = printed;
  ASSERT_TRUE(blocks.size() == 3 && fibers.size() == 3);
  auto backtraces = test::fiber_info_backtraces(out);
  EXPECT_EQ(j["cord"], "main");
  // Every fiber fiber.info() lists is there, by id (fiber.info() names them too, but its YAML
  // keys are the ids; the names are checked on the fibers that printed theirs).
  for (const auto& [id, names] : backtraces) {
    EXPECT_NE(fiber_by_id(j, id), nullptr) << "fiber " << id << " of fiber.info() is missing";
  }
  for (size_t i = 0; i < fibers.size(); ++i) {
    SCOPED_TRACE(fmt::format("fiber {} {}", fibers[i].id, fibers[i].name));
    const Json* f = fiber_as_printed(j, printed, i);
    ASSERT_NE(f, nullptr);
    EXPECT_EQ((*f)["cord"], "main");
    const Json& frames = (*f)["frames"];
    ASSERT_FALSE(frames.empty());
    EXPECT_EQ(frames.back()["kind"], "root") << test::describe(frames);
    EXPECT_EQ(frames.back()["symbol"], "coro_init") << test::describe(frames);
    test::expect_lua_frames_match(frames, {blocks[i]}, 0, true);
    const std::vector<std::string>& want = backtraces[fibers[i].id];
    EXPECT_GE(want.size(), 4u) << "fiber.info() printed no C backtrace for it\n" << out;
    test::expect_native_names_in_order(frames, want);
    EXPECT_NE(text.out.find(fmt::format("Fiber {} \"{}\" ({}):\n", fibers[i].id, fibers[i].name,
                                        statuses[fibers[i].id])),
              std::string::npos)
        << text.out;
  }
}

// The function addr2line names at each of `pcs` in `exe` (from its DWARF), by pc.
std::map<uint64_t, std::string> addr2line_functions(const std::string& exe,
                                                    const std::set<uint64_t>& pcs) {
  std::vector<std::string> argv = {"addr2line", "-f", "-e", exe};
  for (uint64_t pc : pcs) argv.push_back(fmt::format("{:#x}", pc));
  test::CommandResult r = test::run(argv);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const std::vector<std::string> lines = test::lines_of(r.out);
  std::map<uint64_t, std::string> out;
  size_t at = 0;
  for (uint64_t pc : pcs) {
    if (at < lines.size()) out[pc] = lines[at];
    at += 2;  // the function, then file:line
  }
  return out;
}

// A Tarantool installed without any debug information (strip --strip-all, no debug file): its
// fiber layout comes from its machine code (luajit/fiber_list_code.cc) and `ljprof fibers`
// lists its fibers all the same. Oracles: the workload's own ids, names, statuses and
// tracebacks, and the pcs of its fiber.info() C backtraces (its stripped names are nearest
// exports, often another function's), the VM's own frames among them told apart by addr2line on
// the unstripped binary, which has the same code at the same addresses.
TEST(LiveFibers, AStrippedTarantoolsFibersComeFromItsMachineCode) {
  test::TempDir bin;
  const std::string exe = test::stripped_tarantool(bin.file("tarantool"));
  ASSERT_FALSE(exe.empty());
  LiveWorkload w("live_fibers.lua", {}, exe);
  ASSERT_TRUE(w.ready()) << w.out();
  test::CommandResult r = test::run({test::ljprof_bin(), "fibers", "-p", w.pid(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = Json::parse(r.out);
  LiveFibersPrinted printed = live_fibers_printed(w);
  auto& [out, blocks, fibers, statuses] = printed;
  ASSERT_TRUE(blocks.size() == 3 && fibers.size() == 3);
  auto backtraces = test::fiber_info_frames(out);
  std::set<uint64_t> pcs;
  for (const auto& [id, frames] : backtraces) {
    EXPECT_NE(fiber_by_id(j, id), nullptr) << "fiber " << id << " of fiber.info() is missing";
    for (const test::FiberInfoFrame& f : frames) pcs.insert(f.pc);
  }
  const std::map<uint64_t, std::string> names = addr2line_functions(kTarantool, pcs);
  // The root, the static coro_init, is named by its FDE, not after the export before it
  // (coro_transfer, unsized): its address from nm on the unstripped binary.
  std::smatch m;
  const std::string symbols = test::run({"nm", kTarantool}).out;
  ASSERT_TRUE(std::regex_search(symbols, m, std::regex(R"((?:^|\n)([0-9a-f]+) t coro_init\n)")));
  const std::string root_name = fmt::format("tarantool:sub_{:x}", std::stoull(m[1], nullptr, 16));
  for (size_t i = 0; i < fibers.size(); ++i) {
    SCOPED_TRACE(fmt::format("fiber {} {}", fibers[i].id, fibers[i].name));
    const Json* f = fiber_as_printed(j, printed, i);
    ASSERT_NE(f, nullptr);
    const Json& frames = (*f)["frames"];
    ASSERT_FALSE(frames.empty());
    EXPECT_EQ(frames.back()["kind"], "root") << test::describe(frames);
    EXPECT_EQ(frames.back()["symbol"], root_name) << test::describe(frames);
    test::expect_lua_frames_match(frames, {blocks[i]}, 0, true);
    std::vector<uint64_t> ours;
    for (const Json& frame : frames) {
      if (frame["kind"] != "lua")
        ours.push_back(std::stoull(frame["pc"].get<std::string>(), 0, 16));
    }
    size_t at = 0, checked = 0;
    for (const test::FiberInfoFrame& want : backtraces[fibers[i].id]) {
      auto name = names.find(want.pc);
      if (name == names.end() || name->second == "??" || test::vm_frame_name(name->second))
        continue;
      while (at < ours.size() && ours[at] != want.pc) ++at;
      EXPECT_LT(at, ours.size()) << fmt::format(
                                        "{:#x} ({}) of fiber.info() is missing or out of "
                                        "order in ours:\n",
                                        want.pc, name->second)
                                 << test::describe(frames);
      if (at < ours.size()) ++at;
      ++checked;
    }
    EXPECT_GE(checked, 4u) << "fiber.info() printed no C backtrace for it\n" << out;
  }
}

// The Lua lines of `frames` (a fiber's, innermost first) after its leading C function.
std::vector<int> lua_lines(const Json& frames) {
  std::vector<int> lines;
  for (const Json& f : frames) {
    if (f["kind"] == "lua") lines.push_back(f["line"].get<int>());
  }
  return lines;
}

// Fibers that switch all the time are shown as their stack was at one moment (one of the two
// shapes their own tracebacks printed), or with no frames and a note — never a mix of two.
// Which of the two a busy fiber gets depends on the machine's speed; neither is asserted.
TEST(LiveFibers, FibersThatKeepSwitchingAreShownWholeOrMarked) {
  LiveWorkload w("busy_fibers.lua");
  ASSERT_TRUE(w.ready()) << w.out();
  const std::string out = w.out();
  auto blocks = test::parse_tracebacks(out);
  std::vector<test::PrintedFiber> printed = test::printed_fibers(out, "ljprof-fiber");
  ASSERT_EQ(blocks.size(), 6u) << out;
  std::map<uint64_t, std::vector<std::vector<int>>> shapes;  // per fiber id
  for (size_t i = 0; i < blocks.size(); ++i) {
    std::vector<int> lines;
    for (const test::ExpectedFrame& e : blocks[i]) {
      if (!e.is_c) lines.push_back(e.line);
    }
    shapes[printed[i].id].push_back(lines);
  }
  int whole = 0, marked = 0, slow_whole = 0;
  for (int round = 0; round < 5; ++round) {
    test::CommandResult r = test::run({test::ljprof_bin(), "fibers", "-p", w.pid(), "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const Json j = Json::parse(r.out);
    for (const auto& [id, valid] : shapes) {
      const Json* f = fiber_by_id(j, id);
      ASSERT_NE(f, nullptr) << j.dump(1);
      if ((*f)["frames"].empty()) {
        EXPECT_TRUE(f->contains("note")) << f->dump();
        ++marked;
        continue;
      }
      ++whole;
      if ((*f)["name"] == "flip slow") ++slow_whole;
      EXPECT_TRUE((*f)["reached_root"].get<bool>()) << f->dump();
      const std::vector<int> got = lua_lines((*f)["frames"]);
      EXPECT_TRUE(got == valid[0] || got == valid[1])
          << "fiber " << id << ": " << test::describe((*f)["frames"]);
    }
  }
  // The slow one sleeps 100 ms between switches: most reads of it settle.
  EXPECT_GT(slow_whole, 0) << "no snapshot read the slow fiber whole";
  RecordProperty("whole", whole);
  RecordProperty("marked", marked);
}

TEST(LiveFibers, FailsClearlyOnAProcessWithoutFibers) {
  test::Background luajit({"/usr/bin/luajit", "-e", "while true do end"});
  ASSERT_TRUE(test::wait_until([&] { return test::process_state(luajit.pid()) == 'R'; }, 30));
  test::CommandResult r =
      test::run({test::ljprof_bin(), "fibers", "-p", std::to_string(luajit.pid())});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("is not Tarantool"), std::string::npos) << r.err;
  r = test::run({test::ljprof_bin(), "fibers", "-p", "999999999"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("999999999"), std::string::npos) << r.err;
}

// "SLEEP_S CHAN_S" the wall_fiber.lua workload last wrote.
std::pair<double, double> waited(const std::string& path) {
  std::ifstream in(path);
  double sleep_s = 0, chan_s = 0;
  in >> sleep_s >> chan_s;
  return {sleep_s, chan_s};
}

// The wall profile's split of the "waiter" fiber's samples between its two waits agrees with
// the time the fiber measured in each over the same run (by design 75/25), within 5 points.
// Read back through `go tool pprof`, which also proves the sample type and labels.
TEST(LiveFibers, WallProfileSplitsAFibersWaitsAsItsOwnClock) {
  LiveWorkload w("wall_fiber.lua");
  ASSERT_TRUE(w.ready()) << w.out();
  const auto before = waited(w.dir.file("wall_fiber.out"));
  // 37 Hz: no multiple of the workload's 10 Hz round, so ticks do not lock to its phase.
  test::CommandResult r = test::run({test::ljprof_bin(), "fibers", "-p", w.pid(), "--sample", "37",
                                     "-d", "4", "-o", w.dir.file("wall.pb.gz")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto after = waited(w.dir.file("wall_fiber.out"));
  const double sleep_s = after.first - before.first, chan_s = after.second - before.second;
  ASSERT_GT(sleep_s + chan_s, 2.0) << "the workload did not run its rounds";
  test::CommandResult pprof = test::go_tool_pprof(
      w.dir.path(),
      {"-top", "-sample_index=samples", "-tagfocus=fiber=waiter", w.dir.file("wall.pb.gz")});
  ASSERT_EQ(pprof.exit_code, 0) << pprof.err;
  auto rows = test::parse_pprof_top(pprof.out);
  ASSERT_TRUE(rows.count("sleep_part") && rows.count("chan_part")) << pprof.out;
  const double in_sleep = std::stod(rows["sleep_part"].cum);
  const double in_chan = std::stod(rows["chan_part"].cum);
  ASSERT_GT(in_sleep + in_chan, 80) << pprof.out;
  const double ours = 100 * in_sleep / (in_sleep + in_chan);
  const double theirs = 100 * sleep_s / (sleep_s + chan_s);
  EXPECT_NEAR(ours, theirs, 5) << pprof.out;
  test::CommandResult types = test::go_tool_pprof(w.dir.path(), {"-raw", w.dir.file("wall.pb.gz")});
  EXPECT_NE(types.out.find("wall/nanoseconds"), std::string::npos) << types.out.substr(0, 400);
  EXPECT_NE(types.out.find("state:[suspended]"), std::string::npos) << types.out.substr(0, 2000);
}

// Every cord's fibers, the other threads' cords found without a stop by their thread control
// blocks. Oracle: gdb attached after the read (tests/walker/cord_oracle.py: each thread's cord
// by its own TLS and DWARF reading, the cord's fibers and each one's saved return address). The
// configured box is idle, so nothing moves between the two reads.
TEST(LiveFibers, EveryCordsFibers) {
  ASSERT_TRUE(test::file_exists(kTarantool));
  LiveWorkload w("cord_fibers.lua", {"LJPROF_CORDS_WAIT=1"});
  ASSERT_TRUE(w.ready()) << w.out();
  test::CommandResult r = test::run({test::ljprof_bin(), "fibers", "-p", w.pid(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = Json::parse(r.out);
  EXPECT_FALSE(j.contains("cords_error")) << j["cords_error"];
  std::set<std::string> cords;  // names; two threads may run cords of one name ("coio")
  size_t fibers = 0;
  const auto gdb = test::gdb_cords({"-p", w.pid()});
  for (const auto& [tid, cord] : gdb) {
    SCOPED_TRACE(fmt::format("cord {}", cord.name));
    cords.insert(cord.name);
    const Json* running = fiber_of_thread(j, cord.running, tid);
    ASSERT_NE(running, nullptr) << r.out;
    EXPECT_EQ((*running)["state"], "running");
    for (const test::GdbFiber& want : cord.fibers) {
      SCOPED_TRACE(fmt::format("fiber {} {}", want.id, want.name));
      const Json* f = fiber_of_thread(j, want.id, tid);
      ASSERT_NE(f, nullptr) << r.out;
      EXPECT_EQ((*f)["name"], want.name);
      EXPECT_EQ((*f)["cord"], cord.name);
      EXPECT_TRUE((*f)["reached_root"].get<bool>()) << f->dump();
      ASSERT_FALSE((*f)["frames"].empty());
      EXPECT_EQ((*f)["frames"].front()["pc"], want.saved_return) << test::describe((*f)["frames"]);
      ++fibers;
    }
  }
  EXPECT_TRUE(cords.count("main") && cords.count("wal") && cords.count("iproto"));
  EXPECT_EQ(j["cords"].size(), gdb.size()) << j["cords"].dump();
  EXPECT_GE(fibers, 3u);
}

// The wall profile samples every cord's fibers, each sample labelled with its cord and, for a
// cord other than the main one, the thread that runs it. Oracle: gdb attached after the
// recording (cord_oracle.py: each thread's cord by its own TLS and DWARF reading, the cord's name
// and fibers); the configured box is idle, so the fibers are the same. Read back through
// `go tool pprof -raw`.
TEST(LiveFibers, WallProfileSamplesEveryCordsFibers) {
  ASSERT_TRUE(test::file_exists(kTarantool));
  LiveWorkload w("cord_fibers.lua", {"LJPROF_CORDS_WAIT=1"});
  ASSERT_TRUE(w.ready()) << w.out();
  const std::string wall = w.dir.file("wall.pb.gz");
  test::CommandResult r = test::run(
      {test::ljprof_bin(), "fibers", "-p", w.pid(), "--sample", "20", "-d", "1", "-o", wall});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("only the main cord"), std::string::npos) << r.err;
  test::CommandResult raw = test::go_tool_pprof(w.dir.path(), {"-raw", wall});
  ASSERT_EQ(raw.exit_code, 0) << raw.err;
  std::set<std::string> seen;  // "cord tid id name"
  for (test::PprofRawSample& s : test::parse_pprof_raw_samples(raw.out)) {
    if (!s.labels.count("cord")) continue;
    seen.insert(fmt::format("{} {} {} {}", s.labels["cord"], s.labels["tid"], s.labels["fiber_id"],
                            s.labels["fiber"]));
  }
  size_t others = 0;
  for (const auto& [tid, cord] : test::gdb_cords({"-p", w.pid()})) {
    const std::string tid_label = cord.name == "main" ? "" : std::to_string(tid);
    others += cord.name == "main" ? 0 : 1;
    for (const test::GdbFiber& want : cord.fibers) {
      EXPECT_TRUE(seen.count(fmt::format("{} {} {} {}", cord.name, tid_label, want.id, want.name)))
          << "cord " << cord.name << " (thread " << tid << "), fiber " << want.id << " "
          << want.name << "\n"
          << raw.out.substr(0, 4000);
    }
  }
  EXPECT_GE(others, 2u) << "the workload's wal and iproto threads";
}

}  // namespace
}  // namespace ljprof
