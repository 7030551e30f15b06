#include "workload_core.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <map>
#include <regex>

#include "support/test_support.h"

namespace ljprof::test {

using Json = nlohmann::json;
namespace fs = std::filesystem;

void PrintTo(const Target& target, std::ostream* os) {
  *os << target.label;
}

Dump::~Dump() {
  std::error_code ignored;
  if (!dir.empty()) fs::remove_all(dir, ignored);
}

bool is_live(const std::string& workload) {
  return workload.rfind("spin_", 0) == 0;
}

Dump dump_core(const Target& target, const std::string& workload) {
  char tmpl[] = "/tmp/ljprof-golden-XXXXXX";
  Dump d;
  d.dir = mkdtemp(tmpl);
  const fs::path src = fs::path(source_dir()) / "tests/walker/workloads";
  for (const char* name : {"common.lua", workload.c_str()}) {
    fs::copy_file(src / name, fs::path(d.dir) / name);
  }
  CommandResult r;
  if (is_live(workload)) {
    // Start it, wait (bounded) until it printed its traceback, gcore it, kill it.
    d.core = d.dir + "/core";
    r = run({"env", "-C", d.dir, "bash", "-c",
             "\"$0\" \"$1\" >out 2>&1 & pid=$!; "
             "for i in $(seq 100); do grep -q ljprof-traceback-end out && break; sleep 0.1; done; "
             "gcore -o core.$pid $pid >/dev/null 2>&1; mv core.$pid.$pid core; kill -9 $pid; "
             "cat out",
             target.exe, workload});
  } else if (target.arm64) {
    // qemu-user writes the guest's core itself (qemu_<prog>_<date>_<pid>.core in the cwd).
    r = run(
        {"env", "-C", d.dir, "bash", "-c",
         "ulimit -c unlimited; exec qemu-aarch64-static -L /usr/aarch64-linux-gnu \"$0\" \"$1\"",
         target.exe, workload});
    for (const auto& e : fs::directory_iterator(d.dir)) {
      if (e.path().extension() == ".core") d.core = e.path();
    }
  } else {
    // gdb stops the process at the SIGABRT and writes the core, whatever core_pattern says.
    d.core = d.dir + "/core";
    r = run({"env", "-C", d.dir, "gdb", "-nx", "-batch", "-ex", "run", "-ex",
             "generate-core-file " + d.core, "--args", target.exe, workload});
  }
  d.out = r.out;
  EXPECT_TRUE(fs::exists(d.core)) << "no core for " << workload << "\n" << r.out << r.err;
  return d;
}

uint64_t hex(const Json& v) {
  return std::stoull(v.get<std::string>(), nullptr, 16);
}

std::string describe(const Json& frames) {
  std::string s;
  for (const Json& f : frames) s += "  " + f.dump() + "\n";
  return s;
}

void expect_lua_frames_match(const Json& frames, std::vector<std::vector<ExpectedFrame>> blocks,
                             size_t c_frames_between_blocks, bool leading_ffi_call) {
  // Innermost block last printed: blocks were printed outermost thread first (the resuming
  // thread prints before the coroutine runs).
  std::vector<ExpectedFrame> expected;
  for (size_t b = blocks.size(); b-- > 0;) {
    expected.insert(expected.end(), blocks[b].begin(), blocks[b].end());
    if (b > 0) {
      for (size_t i = 0; i < c_frames_between_blocks; ++i) {
        ExpectedFrame c;
        c.is_c = true;
        c.check_name = false;
        c.text = "[C] (the resume call, after the outer traceback was printed)";
        expected.push_back(c);
      }
    }
  }
  std::vector<Json> ours;
  for (const Json& f : frames) {
    if (f["kind"] == "lua" || f["kind"] == "cfunc") ours.push_back(f);
  }
  // The first C function is the FFI call to abort(), made after the traceback was printed.
  ASSERT_FALSE(ours.empty());
  if (leading_ffi_call) {
    ASSERT_EQ(ours.front()["kind"], "cfunc") << describe(frames);
    ours.erase(ours.begin());
  }
  // A traceback of a deep stack prints the innermost levels, "...", then the outermost: match
  // the part before the gap from the top and the part after it from the bottom.
  size_t gap = expected.size();
  for (size_t i = 0; i < expected.size(); ++i) {
    if (expected[i].gap) gap = i;
  }
  if (gap == expected.size()) {
    ASSERT_EQ(ours.size(), expected.size()) << describe(frames);
  } else {
    ASSERT_GT(ours.size(), expected.size() - 1) << describe(frames);
  }
  for (size_t i = 0; i < expected.size(); ++i) {
    if (i == gap) continue;
    const ExpectedFrame& e = expected[i];
    const Json& f = i < gap ? ours[i] : ours[ours.size() - (expected.size() - i)];
    SCOPED_TRACE("frame " + std::to_string(i) + ": expected " + e.text + ", got " + f.dump());
    if (e.check_name) {
      EXPECT_EQ(f["name"], e.name ? Json(*e.name) : Json(nullptr));
      EXPECT_FALSE(f.contains("name_error"));
    }
    if (e.is_c) {
      EXPECT_EQ(f["kind"], "cfunc");
      if (e.c_entry) {
        EXPECT_EQ(hex(f["pc"]), *e.c_entry);
      }
      continue;
    }
    ASSERT_EQ(f["kind"], "lua");
    EXPECT_EQ(f["source"], e.source);
    ASSERT_FALSE(f["line"].is_null());
    EXPECT_EQ(f["line"], e.line);
    EXPECT_EQ(f["main_chunk"], e.main_chunk);
    if (e.firstline) {
      EXPECT_EQ(f["firstline"], *e.firstline);
    }
  }
}

std::vector<PrintedFiber> printed_fibers(const std::string& out, const std::string& tag) {
  std::vector<PrintedFiber> fibers;
  const std::regex re("^" + tag + " (\\d+) (.*)$");
  for (const std::string& line : lines_of(out)) {
    std::smatch m;
    if (std::regex_match(line, m, re)) fibers.push_back({std::stoull(m[1]), m[2]});
  }
  return fibers;
}

const Json* coroutine_of_fiber(const Json& j, uint64_t id) {
  for (const Json& co : j["coroutines"]) {
    if (co.contains("fiber") && co["fiber"]["id"] == id) return &co;
  }
  return nullptr;
}

// A C function name as fiber.info() and our frames both show it, without a C++ signature.
std::string bare_name(const std::string& name) {
  return name.substr(0, name.find('('));
}

// Per fiber id, the frames of its fiber.info() backtrace after frame #0, outermost last. Frame
// #0 is left out: for a switched-out fiber it is no call site (measured on Debian's 2.6: "0x1 in
// +63", or the entry address of the Lua C function it blocks in, named as the end of the
// function before it, e.g. lbox_fiber_sleep's entry as "lbox_fiber_testcancel+80").
std::map<uint64_t, std::vector<FiberInfoFrame>> fiber_info_frames(const std::string& out) {
  static const std::regex fid_re(R"(^(\d+):$)");
  static const std::regex c_re(R"re(^\s+- C: ['"]#(\d+)\s+(0x[0-9a-f]+) in (.*)\+\d+['"]$)re");
  std::map<uint64_t, std::vector<FiberInfoFrame>> by_fid;
  bool inside = false;
  uint64_t fid = 0;
  for (const std::string& line : test::lines_of(out)) {
    if (line == "ljprof-fiber-info-begin" || line == "ljprof-fiber-info-end") {
      inside = line == "ljprof-fiber-info-begin";
      continue;
    }
    std::smatch m;
    if (!inside) continue;
    if (std::regex_match(line, m, fid_re)) {
      fid = std::stoull(m[1]);
      by_fid[fid];
    } else if (fid != 0 && std::regex_match(line, m, c_re) && m[1] != "0") {
      by_fid[fid].push_back({std::stoull(m[2], nullptr, 16), bare_name(m[3])});
    }
  }
  return by_fid;
}

// The LuaJIT VM's own frames (lj_BC_*, lj_vm_*): the walker shows the VM's C frame as the Lua
// frames it runs.
bool vm_frame_name(const std::string& name) {
  return name.rfind("lj_BC_", 0) == 0 || name.rfind("lj_vm_", 0) == 0;
}

// Per fiber id, the C function names of its fiber.info() backtrace, outermost last; frames shown
// as "??" or without a name left out, and so are the VM's own.
std::map<uint64_t, std::vector<std::string>> fiber_info_backtraces(const std::string& out) {
  std::map<uint64_t, std::vector<std::string>> by_fid;
  for (const auto& [fid, frames] : fiber_info_frames(out)) {
    std::vector<std::string>& names = by_fid[fid];
    for (const FiberInfoFrame& f : frames) {
      if (!f.name.empty() && f.name != "??" && !vm_frame_name(f.name)) names.push_back(f.name);
    }
  }
  return by_fid;
}

std::map<uint32_t, GdbCord> gdb_cords(const std::vector<std::string>& target) {
  std::vector<std::string> argv = {"gdb", "-nx", "-batch", "-ex",
                                   "source " + source_dir() + "/tests/walker/cord_oracle.py"};
  argv.insert(argv.end(), target.begin(), target.end());
  const CommandResult r = run(argv);
  std::map<uint32_t, GdbCord> out;
  static const std::regex cord_re(R"(^cord (\d+) (\S+) (\d+)$)");
  static const std::regex fiber_re(R"(^fiber (\d+) (\d+) (0x[0-9a-f]+) (\S+) (.*)$)");
  for (const std::string& line : lines_of(r.out)) {
    std::smatch m;
    if (std::regex_match(line, m, cord_re)) {
      out[std::stoul(m[1])] = {m[2], std::stoull(m[3]), {}};
    } else if (std::regex_match(line, m, fiber_re)) {
      out[std::stoul(m[1])].fibers.push_back({std::stoull(m[2]), m[3], m[4], m[5]});
    }
  }
  EXPECT_FALSE(out.empty()) << r.out << r.err;
  return out;
}

void expect_native_names_in_order(const Json& frames, const std::vector<std::string>& want) {
  std::vector<std::string> ours;
  for (const Json& f : frames) {
    if (f["kind"] != "lua" && f["symbol"].is_string()) {
      ours.push_back(bare_name(f["symbol"].get<std::string>()));
    }
  }
  size_t at = 0;
  for (const std::string& name : want) {
    while (at < ours.size() && ours[at] != name) ++at;
    EXPECT_LT(at, ours.size()) << name << " (fiber.info) is missing or out of order in ours:\n"
                               << describe(frames);
    if (at < ours.size()) ++at;
  }
}

}  // namespace ljprof::test
