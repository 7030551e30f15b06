// extract_proc_info on the real binaries, against outside oracles read here at test time:
// gdb (DWARF struct layouts and LJ_VMST_* enumerators) for Debian's tarantool and the matrix
// builds, readelf (the interpreter FDE), objdump (the DISPATCH setup) and the Lua VM itself
// (ffi.abi("gc64")) for the stripped luajit/libluajit builds on both architectures.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <span>
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

// gdb evaluates each expression against the binary's DWARF (one gdb run).
std::vector<int64_t> gdb_ints(const std::string& binary, const std::vector<std::string>& exprs,
                              const std::string& gdb = "gdb") {
  std::vector<std::string> argv = {gdb, "-nx", "-batch"};
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

// Every extracted field's value from the binary's own DWARF, as gdb evaluates it (one gdb run;
// gdb-multiarch for arm64 builds). gdb resolves a struct across CUs; pahole 1.24 prints only
// the `typedef struct X X` of the first CU when that CU declares X without defining it (any
// build of one CU per source file, and every clang build here). The CFRAME_* fields are
// lj_frame.h macros, which DWARF does not carry.
std::map<std::string, int64_t> dwarf_oracle(const std::string& bin, const std::string& gdb) {
  // Tarantool's fork keeps the string table as global_State.strhash/strmask; upstream since
  // 2020 as global_State.str (StrInternState).
  const bool tarantool_fork = bin.find("tarantool") != std::string::npos;
  auto at = [](const char* type, const char* member) {
    return fmt::format("&(({}*)0)->{}", type, member);
  };
  const std::vector<std::pair<std::string_view, std::string>> rules = {
      {fld::kGc64, "sizeof(((global_State*)0)->cur_L) == 8"},
      {fld::kGVmstate, at("global_State", "vmstate")},
      {fld::kGCurL, at("global_State", "cur_L")},
      {fld::kGJitBase, at("global_State", "jit_base")},
      {fld::kGDispatch, "(char*)&((GG_State*)0)->dispatch - (char*)&((GG_State*)0)->g"},
      {fld::kGJitTrace, "(char*)&((GG_State*)0)->J.trace - (char*)&((GG_State*)0)->g"},
      {fld::kGJitSizetrace, "(char*)&((GG_State*)0)->J.sizetrace - (char*)&((GG_State*)0)->g"},
      {fld::kGGcRoot, at("global_State", "gc.root")},
      {fld::kVmstInterp, "~(int)LJ_VMST_INTERP"},
      {fld::kVmstC, "~(int)LJ_VMST_C"},
      {fld::kVmstGc, "~(int)LJ_VMST_GC"},
      {fld::kVmstExit, "~(int)LJ_VMST_EXIT"},
      {fld::kLGlref, at("lua_State", "glref")},
      {fld::kLBase, at("lua_State", "base")},
      {fld::kLTop, at("lua_State", "top")},
      {fld::kLMaxstack, at("lua_State", "maxstack")},
      {fld::kLStatus, at("lua_State", "status")},
      {fld::kLStack, at("lua_State", "stack")},
      {fld::kLCframe, at("lua_State", "cframe")},
      {fld::kStrLen, at("GCstr", "len")},
      {fld::kStrData, "sizeof(GCstr)"},
      {fld::kFnFfid, at("GCfuncL", "ffid")},
      {fld::kFnPc, at("GCfuncL", "pc")},
      {fld::kFnCfunc, at("GCfuncC", "f")},
      {fld::kPtSizebc, at("GCproto", "sizebc")},
      {fld::kPtChunkname, at("GCproto", "chunkname")},
      {fld::kPtFirstline, at("GCproto", "firstline")},
      {fld::kPtNumline, at("GCproto", "numline")},
      {fld::kPtLineinfo, at("GCproto", "lineinfo")},
      {fld::kPtSizept, at("GCproto", "sizept")},
      {fld::kPtSize, "sizeof(GCproto)"},
      {fld::kPtK, at("GCproto", "k")},
      {fld::kPtSizekgc, at("GCproto", "sizekgc")},
      {fld::kPtUvinfo, at("GCproto", "uvinfo")},
      {fld::kPtVarinfo, at("GCproto", "varinfo")},
      {fld::kTrGct, at("GCtrace", "gct")},
      {fld::kTrSpadjust, at("GCtrace", "spadjust")},
      {fld::kTrSzmcode, at("GCtrace", "szmcode")},
      {fld::kTrMcode, at("GCtrace", "mcode")},
      {fld::kTrTraceno, at("GCtrace", "traceno")},
      {fld::kTrStartpt, at("GCtrace", "startpt")},
      {fld::kTrNsnap, at("GCtrace", "nsnap")},
      {fld::kTrIr, at("GCtrace", "ir")},
      {fld::kTrNk, at("GCtrace", "nk")},
      {fld::kTrNsnapmap, at("GCtrace", "nsnapmap")},
      {fld::kTrSnap, at("GCtrace", "snap")},
      {fld::kTrSnapmap, at("GCtrace", "snapmap")},
      {fld::kTrNins, at("GCtrace", "nins")},
      {fld::kTrSize, "sizeof(GCtrace)"},
      {fld::kGGcTotal, at("global_State", "gc.total")},
      {fld::kGGcMmudata, at("global_State", "gc.mmudata")},
      {fld::kGStrTab, at("global_State", tarantool_fork ? "strhash" : "str.tab")},
      {fld::kGStrMask, at("global_State", tarantool_fork ? "strmask" : "str.mask")},
      {fld::kGCtypeState, at("global_State", "ctype_state")},
      {fld::kGcMarked, at("GChead", "marked")},
      {fld::kGcGct, at("GChead", "gct")},
      {fld::kLOpenupval, at("lua_State", "openupval")},
      {fld::kLEnv, at("lua_State", "env")},
      {fld::kLStacksize, at("lua_State", "stacksize")},
      {fld::kTabColo, at("GCtab", "colo")},
      {fld::kTabArray, at("GCtab", "array")},
      {fld::kTabMetatable, at("GCtab", "metatable")},
      {fld::kTabNode, at("GCtab", "node")},
      {fld::kTabAsize, at("GCtab", "asize")},
      {fld::kTabHmask, at("GCtab", "hmask")},
      {fld::kTabSize, "sizeof(GCtab)"},
      {fld::kNodeKey, at("Node", "key")},
      {fld::kNodeSize, "sizeof(Node)"},
      {fld::kUdEnv, at("GCudata", "env")},
      {fld::kUdLen, at("GCudata", "len")},
      {fld::kUdMetatable, at("GCudata", "metatable")},
      {fld::kUdSize, "sizeof(GCudata)"},
      {fld::kUvClosed, at("GCupval", "closed")},
      {fld::kUvV, at("GCupval", "v")},
      {fld::kUvSize, "sizeof(GCupval)"},
      {fld::kFnNupvalues, at("GCfuncL", "nupvalues")},
      {fld::kFnEnv, at("GCfuncL", "env")},
      {fld::kFnUvptr, at("GCfuncL", "uvptr")},
      {fld::kFnCupvalue, at("GCfuncC", "upvalue")},
      {fld::kCdCtypeid, at("GCcdata", "ctypeid")},
      {fld::kCdSize, "sizeof(GCcdata)"},
      {fld::kCtSize, "sizeof(CType)"},
  };
  std::vector<std::string> exprs;
  for (const auto& r : rules) exprs.push_back(r.second);
  const std::vector<int64_t> values = gdb_ints(bin, exprs, gdb);
  std::map<std::string, int64_t> out;
  for (size_t i = 0; i < rules.size(); ++i) out[std::string(rules[i].first)] = values[i];
  return out;
}

// Each extracted field (but CFRAME_*) equals the oracle's value, and the oracle has no field
// that extraction missed.
void expect_fields_equal(const LuaJITProcInfo& info, std::map<std::string, int64_t> want) {
  for (const luajit::Field& f : info.fields) {
    if (f.name.rfind("CFRAME_", 0) == 0) continue;  // lj_frame.h macros: checked below
    auto it = want.find(f.name);
    ASSERT_NE(it, want.end()) << "no DWARF oracle for " << f.name;
    EXPECT_EQ(f.value, it->second) << f.name << " (source " << f.source << ")";
    want.erase(it);
  }
  EXPECT_TRUE(want.empty()) << want.size() << " DWARF fields were not extracted, e.g. "
                            << (want.empty() ? "" : want.begin()->first);
}

TEST(ProcInfoTarantool, EveryFieldEqualsDwarfFromPaholeAndGdb) {
  const std::string bin = "/usr/bin/tarantool";
  LuaJITProcInfo info = extract(bin);
  ASSERT_FALSE(info.fields.empty());
  expect_fields_equal(info, dwarf_oracle(bin, "gdb"));
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

// The LuaJIT build matrix (tests/matrix/variants.txt): extraction on each build made here from
// Debian's sources equals that build's own DWARF as pahole and gdb read it, and ljprof's own
// DWARF reader (`inspect --verify-dwarf`, libdw: DWARF 4 and 5, one CU per source file) agrees.
class ProcInfoMatrix : public ::testing::TestWithParam<test::MatrixVariant> {};

TEST_P(ProcInfoMatrix, EveryFieldEqualsItsOwnDwarf) {
  const test::MatrixVariant& v = GetParam();
  ASSERT_TRUE(test::file_exists(v.exe)) << v.exe << " is missing: scripts/luajit-matrix builds it";
  LuaJITProcInfo info = extract(v.exe);
  ASSERT_FALSE(info.fields.empty());
  // GC64 as the build's own VM reports it (qemu-aarch64 runs the arm64 builds).
  std::vector<std::string> argv = {v.exe, "-e", "io.write(tostring(require('ffi').abi('gc64')))"};
  if (v.arm64) argv.insert(argv.begin(), {"qemu-aarch64-static", "-L", "/usr/aarch64-linux-gnu"});
  EXPECT_EQ(info.gc64 ? "true" : "false", lua_vm_output(argv));
  EXPECT_EQ(info.arch, v.arm64 ? elf::Arch::AArch64 : elf::Arch::X86_64);
  expect_fields_equal(info, dwarf_oracle(v.exe, v.arm64 ? "gdb-multiarch" : "gdb"));
  test::CommandResult r = test::run({test::ljprof_bin(), "inspect", "--verify-dwarf", v.exe});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("verify-dwarf: all PASS"), std::string::npos) << r.out;
}

INSTANTIATE_TEST_SUITE_P(Matrix, ProcInfoMatrix, ::testing::ValuesIn(test::matrix_variants()),
                         [](const ::testing::TestParamInfo<test::MatrixVariant>& info) {
                           return test::gtest_name(info.param.name);
                         });

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
  // The fiber layout its machine code gives, field by field against its DWARF.
  for (const char* field :
       {"cord.alive", "fiber.link", "fiber.storage.lua.stack", "fiber.ctx.sp", "tp - &cord_ptr"}) {
    EXPECT_TRUE(
        std::regex_search(r.out, std::regex(fmt::format(R"((^|\n)PASS  {} +extracted)", field))))
        << field << "\n"
        << r.out;
  }
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

// A copy of Debian's tarantool whose lj_cf_jit_util_traceinfo is patched at the instruction
// that loads J->trace (found by the unpatched extraction's evidence; its file offset by the
// segment it lies in). `patch` gets the instruction's bytes and edits them.
std::string patched_tarantool(const std::string& dir,
                              const std::function<void(std::span<uint8_t>)>& patch) {
  LuaJITProcInfo plain = extract("/usr/bin/tarantool");
  const luajit::Field* jt = plain.field(fld::kGJitTrace);
  EXPECT_NE(jt, nullptr);
  if (jt == nullptr) return {};
  const luajit::Evidence* load = nullptr;
  for (const luajit::Evidence& e : jt->evidence)
    if (e.function == "lj_cf_jit_util_traceinfo" && e.role == "J->trace") load = &e;
  EXPECT_NE(load, nullptr) << "tarantool's J->trace was cross-checked by traceinfo before";
  if (load == nullptr) return {};
  std::vector<uint8_t> bytes = test::read_file("/usr/bin/tarantool");
  auto file = elf::ElfFile::open("/usr/bin/tarantool");
  auto off = (*file)->file_offset(load->address);
  EXPECT_TRUE(off.ok()) << off.message();
  if (!off.ok()) return {};
  const size_t len = load->bytes.size() / 3 + 1;  // "48 8b 89 ..." -> bytes
  patch(std::span<uint8_t>(bytes.data() + *off, len));
  const std::string out = dir + "/tarantool";
  std::ofstream(out, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  return out;
}

// The any-build issue: an optional cross-check whose pattern is absent must not fail the whole
// layout; BC_JLOOP's value stands and the field says why it was not cross-checked.
TEST(ProcInfoCrossCheck, AbsentTraceinfoPatternDegradesToBcJloopAlone) {
  test::TempDir dir;
  const int64_t expected = extract("/usr/bin/tarantool").value(fld::kGJitTrace);
  const std::string path = patched_tarantool(dir.path(), [](std::span<uint8_t> insn) {
    std::fill(insn.begin(), insn.end(), 0x90);  // nop: no `T = [G + disp]` load any more
  });
  ASSERT_FALSE(path.empty());
  LuaJITProcInfo info = extract(path);
  const luajit::Field* jt = info.field(fld::kGJitTrace);
  ASSERT_NE(jt, nullptr);
  EXPECT_EQ(jt->value, expected);
  EXPECT_EQ(jt->source, "BC_JLOOP");
  EXPECT_NE(jt->not_cross_checked.find("jit_checktrace pattern not matched"), std::string::npos)
      << jt->not_cross_checked;
  // inspect prints the reason next to the field, in text and JSON.
  test::CommandResult r = test::run({test::ljprof_bin(), "inspect", "--json", path});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["luajit_proc_info"]["fields"]["G->J->trace"].contains("not_cross_checked"))
      << r.out;
  test::CommandResult text = test::run({test::ljprof_bin(), "inspect", path});
  EXPECT_NE(text.out.find("not cross-checked: "), std::string::npos) << text.out;
}

// A cross-check that matches but disagrees still fails closed.
TEST(ProcInfoCrossCheck, DisagreeingTraceinfoFailsClosed) {
  test::TempDir dir;
  const std::string path = patched_tarantool(dir.path(), [](std::span<uint8_t> insn) {
    ASSERT_EQ(insn.size(), 7u) << "mov r64, [r64 + disp32]";
    insn[3] = static_cast<uint8_t>(insn[3] + 8);  // the disp32's low byte: another slot
  });
  ASSERT_FALSE(path.empty());
  auto file = elf::ElfFile::open(path);
  ASSERT_TRUE(file.ok()) << file.message();
  auto info = luajit::extract_proc_info(**file);
  ASSERT_FALSE(info.ok());
  EXPECT_NE(info.message().find("jit_checktrace in lj_cf_jit_util_traceinfo reads"),
            std::string::npos)
      << info.message();
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
  auto walker = luajit::to_walker_info(info);
  ASSERT_TRUE(walker.ok()) << walker.message();
  const lj_luajit_info& w = *walker;
  EXPECT_EQ(w.version, static_cast<uint32_t>(LJ_LUAJIT_INFO_VERSION));
  EXPECT_EQ(w.arch, LJ_INFO_ARCH_X86_64);
  EXPECT_EQ(w.gc64, 0);
  EXPECT_EQ(w.dispatch_reg, 14);
  EXPECT_EQ(w.vm_begin, info.vm.begin);
  EXPECT_EQ(w.g_cur_L, info.value(fld::kGCurL));
  EXPECT_EQ(w.g_jit_base, info.value(fld::kGJitBase));
  EXPECT_EQ(w.g_to_dispatch, info.value(fld::kGDispatch));
  EXPECT_EQ(w.g_jit_sizetrace, info.value(fld::kGJitTrace) + 12);
  EXPECT_EQ(w.cframe_prev_offset, 32);
  EXPECT_EQ(w.vmst_exit, info.value(fld::kVmstExit));
  EXPECT_EQ(w.vmst_lfunc, 0);
  EXPECT_EQ(w.str_data, info.value(fld::kStrData));
  EXPECT_EQ(w.ref_size, 4);
  for (const luajit::Field& f : info.fields) {
    EXPECT_EQ(w.*luajit::field_spec(f.id).member, f.value) << f.name;
  }
}

// luajit_info.h: a field the build needs that extraction did not fill is an error naming it,
// never a 0 the walker would read as an offset; an OPTIONAL one may be absent.
TEST(ProcInfoWalker, AMissingRequiredFieldIsAnErrorNeverZero) {
  LuaJITProcInfo info = extract("/usr/bin/tarantool");
  ASSERT_FALSE(info.fields.empty());
  auto without = [](LuaJITProcInfo i, luajit::FieldId id) {
    std::erase_if(i.fields, [&](const luajit::Field& f) { return f.id == id; });
    return i;
  };
  auto missing = luajit::to_walker_info(without(info, luajit::FieldId::LStack));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("lua_State.stack"), std::string::npos) << missing.message();
  auto optional = luajit::to_walker_info(without(info, luajit::FieldId::GGcRoot));
  ASSERT_TRUE(optional.ok()) << optional.message();
  EXPECT_EQ(optional->g_gc_root, 0);
  // CFRAME_SIZE comes from x86-64's CFI only; an AArch64 build does without it.
  LuaJITProcInfo arm = extract(kArm64Luajit);
  EXPECT_EQ(arm.field(luajit::FieldId::CframeSize), nullptr);
  EXPECT_TRUE(luajit::to_walker_info(arm).ok());
  auto x86 = luajit::to_walker_info(without(info, luajit::FieldId::CframeSize));
  EXPECT_FALSE(x86.ok());
}

}  // namespace
}  // namespace ljprof
