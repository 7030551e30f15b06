// extract_proc_info on the real binaries, against outside oracles read here at test time:
// pahole (DWARF struct layouts) and gdb (LJ_VMST_* enumerators) for Debian's tarantool,
// readelf (the interpreter FDE), objdump (the DISPATCH setup) and the Lua VM itself
// (ffi.abi("gc64")) for the stripped luajit/libluajit builds on both architectures.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "luajit/proc_info.h"
#include "support/test_support.h"

namespace ljprof {
namespace {

using luajit::LuaJITProcInfo;
namespace fld = luajit::field;

const std::string kArm64Luajit = test::fixture("arm64/usr/bin/luajit");
const std::string kArm64Lib = test::fixture("arm64/usr/lib/aarch64-linux-gnu/libluajit-5.1.so.2");
const std::string kOpenRestyLib =
    test::fixture("nginx-lua/usr/lib/x86_64-linux-gnu/libluajit-5.1.so.2");

LuaJITProcInfo extract(const std::string& path) {
  auto file = elf::ElfFile::open(path);
  EXPECT_TRUE(file.ok()) << file.message();
  if (!file.ok()) return {};
  auto info = luajit::extract_proc_info(**file);
  EXPECT_TRUE(info.ok()) << info.message();
  return info.ok() ? *info : LuaJITProcInfo{};
}

// pahole -C A,B,...: struct -> (member -> offset, plus "sizeof" -> struct size). One pahole
// run for all structs: reading a large binary's DWARF is the slow part.
std::map<std::string, std::map<std::string, int64_t>> pahole(const std::string& binary,
                                                             const std::string& names) {
  test::CommandResult r = test::run({"pahole", "-C", names, binary});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::map<std::string, std::map<std::string, int64_t>> out;
  static const std::regex head(R"(^struct (\w+) \{)");
  static const std::regex member(
      R"((\w+)(\[\d+\])?\s*(__attribute__\S*)?\s*;\s*/\*\s*(\d+)\s+\d+\s*\*/)");
  static const std::regex size(R"(/\* size: (\d+),)");
  std::istringstream in(r.out);
  std::string line, current;
  int depth = 0;
  while (std::getline(in, line)) {
    std::smatch m;
    if (depth == 0 && std::regex_search(line, m, head)) current = m[1];
    // Only the struct's own members (depth 1), not those of nested anonymous structs.
    if (depth == 1 && std::regex_search(line, m, member)) out[current][m[1]] = std::stoll(m[4]);
    if (depth == 1 && std::regex_search(line, m, size)) out[current]["sizeof"] = std::stoll(m[1]);
    for (char c : line) depth += c == '{' ? 1 : c == '}' ? -1 : 0;
  }
  EXPECT_FALSE(out.empty()) << "pahole -C " << names << " printed nothing usable:\n" << r.out;
  return out;
}

// gdb evaluates each expression against the binary's DWARF (one gdb run).
std::vector<int64_t> gdb_ints(const std::string& binary, const std::vector<std::string>& exprs) {
  std::vector<std::string> argv = {"gdb", "-nx", "-batch"};
  for (const std::string& e : exprs) {
    argv.push_back("-ex");
    argv.push_back("p (long)(" + e + ")");
  }
  argv.push_back(binary);
  test::CommandResult r = test::run(argv);
  std::vector<int64_t> out;
  for (size_t i = 0; i < exprs.size(); ++i) {
    std::smatch m;
    std::regex value("\\$" + std::to_string(i + 1) + R"( = (-?\d+))");
    EXPECT_TRUE(std::regex_search(r.out, m, value)) << exprs[i] << ": " << r.out << r.err;
    out.push_back(m.empty() ? INT64_MIN : std::stoll(m[1]));
  }
  return out;
}

// The largest FDE of the CIE with augmentation "zPR" (LuaJIT's personality CIE), from readelf.
std::pair<uint64_t, uint64_t> personality_fde(const std::string& readelf, const std::string& path) {
  test::CommandResult r = test::run({readelf, "--debug-dump=frames", path});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::set<std::string> zpr_cies;
  std::istringstream in(r.out);
  std::string line, last_cie;
  static const std::regex cie(R"(^([0-9a-f]+) [0-9a-f]+ 0+ CIE)");
  static const std::regex fde(R"(FDE cie=([0-9a-f]+) pc=([0-9a-f]+)\.\.([0-9a-f]+))");
  std::pair<uint64_t, uint64_t> best{0, 0};
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_search(line, m, cie)) last_cie = m[1];
    if (line.find("Augmentation:") != std::string::npos &&
        line.find("\"zPR\"") != std::string::npos) {
      zpr_cies.insert(last_cie);
    }
    if (std::regex_search(line, m, fde) && zpr_cies.count(m[1])) {
      uint64_t b = std::stoull(m[2], nullptr, 16), e = std::stoull(m[3], nullptr, 16);
      if (e - b > best.second - best.first) best = {b, e};
    }
  }
  EXPECT_NE(best.second, 0u) << "no zPR FDE in " << path;
  return best;
}

// Every `add $imm, %r14` in the VM interval, from objdump (AT&T syntax).
std::set<int64_t> objdump_r14_adds(const std::string& path, uint64_t begin, uint64_t end) {
  test::CommandResult r = test::run({"objdump", "-d", "--start-address=" + std::to_string(begin),
                                     "--stop-address=" + std::to_string(end), path});
  std::set<int64_t> out;
  static const std::regex add(R"(add\s+\$0x([0-9a-f]+),%r14d?\b)");
  for (std::sregex_iterator it(r.out.begin(), r.out.end(), add), e; it != e; ++it) {
    out.insert(std::stoll((*it)[1], nullptr, 16));
  }
  return out;
}

std::string lua_vm_output(const std::vector<std::string>& argv) {
  test::CommandResult r = test::run(argv);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.out;
}

TEST(ProcInfoTarantool, EveryFieldEqualsDwarfFromPaholeAndGdb) {
  const std::string bin = "/usr/bin/tarantool";
  LuaJITProcInfo info = extract(bin);
  ASSERT_FALSE(info.fields.empty());
  auto dw = pahole(
      bin,
      "global_State,lua_State,GG_State,jit_State,GCproto,GCtrace,GCstr,GCfuncL,GCfuncC,GCState");
  auto &g = dw["global_State"], &L = dw["lua_State"], &gg = dw["GG_State"], &J = dw["jit_State"];
  auto &pt = dw["GCproto"], &tr = dw["GCtrace"], &str = dw["GCstr"];
  auto &fnl = dw["GCfuncL"], &fnc = dw["GCfuncC"];
  const std::vector<int64_t> gdb =
      gdb_ints(bin, {"sizeof(((global_State*)0)->cur_L)", "LJ_VMST_INTERP", "LJ_VMST_C",
                     "LJ_VMST_GC", "LJ_VMST_EXIT"});
  ASSERT_EQ(gdb.size(), 5u);
  std::map<std::string, int64_t> want = {
      {std::string(fld::kGc64), gdb[0] == 8},
      {std::string(fld::kGVmstate), g["vmstate"]},
      {std::string(fld::kGCurL), g["cur_L"]},
      {std::string(fld::kGJitBase), g["jit_base"]},
      {std::string(fld::kGDispatch), gg["dispatch"] - gg["g"]},
      {std::string(fld::kGJitTrace), gg["J"] - gg["g"] + J["trace"]},
      {std::string(fld::kGGcRoot), g["gc"] + dw["GCState"]["root"]},
      {std::string(fld::kVmstInterp), ~gdb[1]},
      {std::string(fld::kVmstC), ~gdb[2]},
      {std::string(fld::kVmstGc), ~gdb[3]},
      {std::string(fld::kVmstExit), ~gdb[4]},
      {std::string(fld::kLGlref), L["glref"]},
      {std::string(fld::kLBase), L["base"]},
      {std::string(fld::kLTop), L["top"]},
      {std::string(fld::kLMaxstack), L["maxstack"]},
      {std::string(fld::kLStatus), L["status"]},
      {std::string(fld::kLStack), L["stack"]},
      {std::string(fld::kLCframe), L["cframe"]},
      {std::string(fld::kStrLen), str["len"]},
      {std::string(fld::kStrData), str["sizeof"]},
      {std::string(fld::kFnFfid), fnl["ffid"]},
      {std::string(fld::kFnPc), fnl["pc"]},
      {std::string(fld::kFnCfunc), fnc["f"]},
      {std::string(fld::kPtSizebc), pt["sizebc"]},
      {std::string(fld::kPtChunkname), pt["chunkname"]},
      {std::string(fld::kPtFirstline), pt["firstline"]},
      {std::string(fld::kPtNumline), pt["numline"]},
      {std::string(fld::kPtLineinfo), pt["lineinfo"]},
      {std::string(fld::kPtSize), pt["sizeof"]},
      {std::string(fld::kPtK), pt["k"]},
      {std::string(fld::kPtSizekgc), pt["sizekgc"]},
      {std::string(fld::kPtUvinfo), pt["uvinfo"]},
      {std::string(fld::kPtVarinfo), pt["varinfo"]},
      {std::string(fld::kTrSzmcode), tr["szmcode"]},
      {std::string(fld::kTrMcode), tr["mcode"]},
      {std::string(fld::kTrTraceno), tr["traceno"]},
      {std::string(fld::kTrStartpt), tr["startpt"]},
  };
  for (const luajit::Field& f : info.fields) {
    if (f.name.rfind("CFRAME_", 0) == 0) continue;  // lj_frame.h macros: checked below
    auto it = want.find(f.name);
    ASSERT_NE(it, want.end()) << "no DWARF oracle for " << f.name;
    EXPECT_EQ(f.value, it->second) << f.name << " (source " << f.source << ")";
    want.erase(it);
  }
  EXPECT_TRUE(want.empty()) << want.size() << " DWARF fields were not extracted, e.g. "
                            << (want.empty() ? "" : want.begin()->first);
  // Debian's 2.6.0 predates mem_L: jit_base follows cur_L, but it still comes from the code.
  EXPECT_EQ(info.field(fld::kGJitBase)->source, "exit-handler");
  EXPECT_FALSE(info.gc64);
  EXPECT_EQ(info.numbering, luajit::VmstateNumbering::Upstream);
  // The VM interval: lj_vm_asm_begin .. end of lj_vm_ffi_call, per `nm`.
  test::CommandResult nm = test::run({"nm", "-S", bin});
  std::smatch m;
  ASSERT_TRUE(std::regex_search(nm.out, m, std::regex(R"(([0-9a-f]+) [tT] lj_vm_asm_begin)")));
  EXPECT_EQ(info.vm.begin, std::stoull(m[1], nullptr, 16));
  ASSERT_TRUE(
      std::regex_search(nm.out, m, std::regex(R"(([0-9a-f]+) ([0-9a-f]+) [tT] lj_vm_ffi_call)")));
  EXPECT_EQ(info.vm.end, std::stoull(m[1], nullptr, 16) + std::stoull(m[2], nullptr, 16));
  // C-frame: CFRAME_SIZE is the CFA offset readelf shows for the interpreter FDE; the link is
  // the standard 32 of a Tarantool without the SAVE_VMSTATE slot.
  auto fde = personality_fde("readelf", bin);
  EXPECT_EQ(fde.first, info.vm.begin);
  test::CommandResult frames = test::run({"readelf", "--debug-dump=frames-interp", bin});
  std::regex row(fmt::format(R"(0+{:x}\s+rsp\+(\d+))", fde.first));
  ASSERT_TRUE(std::regex_search(frames.out, m, row));
  EXPECT_EQ(info.value(fld::kCframeSize), std::stoll(m[1]));
  EXPECT_EQ(info.value(fld::kCframePrev), 32);
}

TEST(ProcInfoTarantool, VerifyDwarfCommandPrintsAllPass) {
  test::CommandResult r =
      test::run({test::ljprof_bin(), "inspect", "--verify-dwarf", "/usr/bin/tarantool"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("verify-dwarf: all PASS"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("FAIL"), std::string::npos) << r.out;
  size_t passes = 0;
  for (size_t at = r.out.find("PASS  "); at != std::string::npos;
       at = r.out.find("PASS  ", at + 1)) {
    ++passes;
  }
  EXPECT_GE(passes, 30u) << r.out;
  // A stripped binary has no DWARF: a clear error, exit 2.
  test::CommandResult stripped =
      test::run({test::ljprof_bin(), "inspect", "--verify-dwarf", "/usr/bin/luajit"});
  EXPECT_EQ(stripped.exit_code, 2);
  EXPECT_NE(stripped.err.find("DWARF"), std::string::npos) << stripped.err;
}

void expect_stripped_gc64_x86(const LuaJITProcInfo& info, const std::string& path) {
  auto fde = personality_fde("readelf", path);
  EXPECT_EQ(info.vm.begin, fde.first) << path;
  EXPECT_EQ(info.vm.end, fde.second) << path;
  EXPECT_TRUE(info.gc64);
  EXPECT_EQ(info.field(fld::kGJitBase)->source, "exit-handler");
  std::set<int64_t> adds = objdump_r14_adds(path, info.vm.begin, info.vm.end);
  ASSERT_EQ(adds.size(), 1u) << path;
  EXPECT_EQ(info.value(fld::kGDispatch), *adds.begin()) << path;
  EXPECT_EQ(info.value(fld::kCframePrev), 32);
  EXPECT_EQ(info.value(fld::kCframeSize), 80);
  // jit_base follows cur_L; vmstate precedes it (lj_obj.h order), everything before dispatch.
  EXPECT_EQ(info.value(fld::kGJitBase), info.value(fld::kGCurL) + 8);
  EXPECT_LT(info.value(fld::kGVmstate), info.value(fld::kGCurL));
  for (const luajit::Field& f : info.fields) {
    if (f.source.rfind("layout rule", 0) == 0) continue;
    EXPECT_FALSE(f.evidence.empty() && f.source != "cfi") << f.name << " has no evidence";
    for (const luajit::Evidence& e : f.evidence) {
      EXPECT_FALSE(e.bytes.empty()) << f.name;
      EXPECT_NE(e.address, 0u) << f.name;
    }
  }
}

TEST(ProcInfoStripped, DebianLuajitAndLibluajitAmd64) {
  const std::string gc64 =
      lua_vm_output({"/usr/bin/luajit", "-e", "io.write(tostring(require('ffi').abi('gc64')))"});
  ASSERT_EQ(gc64, "true");
  LuaJITProcInfo exe = extract("/usr/bin/luajit");
  LuaJITProcInfo lib = extract("/usr/lib/x86_64-linux-gnu/libluajit-5.1.so.2");
  ASSERT_FALSE(exe.fields.empty());
  ASSERT_FALSE(lib.fields.empty());
  expect_stripped_gc64_x86(exe, "/usr/bin/luajit");
  expect_stripped_gc64_x86(lib, "/usr/lib/x86_64-linux-gnu/libluajit-5.1.so.2");
  // Same Debian source package: every offset agrees between the two.
  for (const luajit::Field& f : exe.fields) {
    EXPECT_EQ(f.value, lib.value(f.name)) << f.name;
  }
}

TEST(ProcInfoStripped, OpenRestyLuajit2) {
  LuaJITProcInfo info = extract(kOpenRestyLib);
  ASSERT_FALSE(info.fields.empty());
  expect_stripped_gc64_x86(info, kOpenRestyLib);
  EXPECT_EQ(info.runtime, luajit::Runtime::LibLuaJIT);
}

TEST(ProcInfoStripped, Arm64LuajitAndLibluajit) {
  const std::string gc64 =
      lua_vm_output({"qemu-aarch64-static", "-L", "/usr/aarch64-linux-gnu", kArm64Luajit, "-e",
                     "io.write(tostring(require('ffi').abi('gc64')))"});
  ASSERT_EQ(gc64, "true");
  for (const std::string& path : {kArm64Luajit, kArm64Lib}) {
    LuaJITProcInfo info = extract(path);
    ASSERT_FALSE(info.fields.empty()) << path;
    auto fde = personality_fde("aarch64-linux-gnu-readelf", path);
    EXPECT_EQ(info.vm.begin, fde.first) << path;
    EXPECT_EQ(info.vm.end, fde.second) << path;
    EXPECT_TRUE(info.gc64);
    EXPECT_TRUE(info.dispatch_is_g);
    EXPECT_EQ(luajit::register_name(info.arch, info.dispatch_reg), "x22");
    EXPECT_EQ(info.value(fld::kCframePrev), 0);
    EXPECT_EQ(info.field(fld::kGJitBase)->source, "exit-handler");
    // The most frequent dispatch displacement in objdump's own decoding of the VM.
    test::CommandResult r = test::run({"aarch64-linux-gnu-objdump", "-d",
                                       "--start-address=" + std::to_string(info.vm.begin),
                                       "--stop-address=" + std::to_string(info.vm.end), path});
    std::map<int64_t, int> counts;
    static const std::regex load(R"(ldr\s+x\d+, \[x\d+, #(\d+)\]\n[^\n]*\n?)");
    static const std::regex add_gl(
        R"(add\s+(x\d+), x22, w\d+, uxtb #3\n[^\n]*ldr\s+x\d+, \[\1, #(\d+)\])");
    for (std::sregex_iterator it(r.out.begin(), r.out.end(), add_gl), e; it != e; ++it) {
      counts[std::stoll((*it)[2])]++;
    }
    ASSERT_FALSE(counts.empty());
    auto best = std::max_element(counts.begin(), counts.end(),
                                 [](auto& a, auto& b) { return a.second < b.second; });
    EXPECT_EQ(info.value(fld::kGDispatch), best->first) << path;
  }
}

TEST(ProcInfoInspect, JsonCarriesProcInfoAndVmCframe) {
  test::CommandResult r = test::run({test::ljprof_bin(), "inspect", "--json", "/usr/bin/luajit"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  const auto& pi = j["luajit_proc_info"];
  ASSERT_TRUE(pi.is_object());
  EXPECT_EQ(pi["gc64"], true);
  EXPECT_EQ(pi["dispatch_register"], "r14");
  EXPECT_EQ(pi["fields"]["global_State.jit_base"]["source"], "exit-handler");
  EXPECT_FALSE(pi["fields"]["global_State.cur_L"]["evidence"].empty());
  EXPECT_TRUE(j["vm_cframe"].is_object());
  // nginx itself links no LuaJIT: no proc info (the module's libluajit is inspected instead).
  test::CommandResult n = test::run({test::ljprof_bin(), "inspect", "--json", "/usr/sbin/nginx"});
  ASSERT_EQ(n.exit_code, 0) << n.err;
  EXPECT_TRUE(nlohmann::json::parse(n.out)["luajit_proc_info"].is_null());
  test::CommandResult t = test::run({test::ljprof_bin(), "inspect", "/usr/bin/tarantool"});
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_NE(t.out.find("global_State.jit_base"), std::string::npos);
  EXPECT_NE(t.out.find("exit-handler"), std::string::npos);
}

TEST(ProcInfoWalker, RecordMirrorsTheFields) {
  LuaJITProcInfo info = extract("/usr/bin/tarantool");
  ASSERT_FALSE(info.fields.empty());
  lj_luajit_info w = luajit::to_walker_info(info);
  EXPECT_EQ(w.version, static_cast<uint32_t>(LJ_LUAJIT_INFO_VERSION));
  EXPECT_EQ(w.arch, LJ_INFO_ARCH_X86_64);
  EXPECT_EQ(w.gc64, 0);
  EXPECT_EQ(w.dispatch_reg, 14);
  EXPECT_EQ(w.vm_begin, info.vm.begin);
  EXPECT_EQ(w.g_cur_L, static_cast<uint32_t>(info.value(fld::kGCurL)));
  EXPECT_EQ(w.g_jit_base, static_cast<uint32_t>(info.value(fld::kGJitBase)));
  EXPECT_EQ(w.g_to_dispatch, info.value(fld::kGDispatch));
  EXPECT_EQ(w.cframe_prev_offset, 32u);
  EXPECT_EQ(w.vmst_exit, info.value(fld::kVmstExit));
  EXPECT_EQ(w.vmst_lfunc, 0);
  EXPECT_EQ(w.str_data, info.value(fld::kStrData));
  EXPECT_EQ(w.ref_size, 4);
}

}  // namespace
}  // namespace ljprof
