// CoreFile against real cores made here and now (kernel core of a luajit that aborts itself
// through FFI, gcore of looping luajit and tarantool, qemu-aarch64 guest core of the arm64
// luajit), checked against outside oracles: gdb / gdb-multiarch on the same core, the
// workload's own /proc/self/maps, readelf on the mapped files.
#include <elf.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include "core/core_file.h"
#include "core/core_fixtures.h"
#include "support/test_support.h"

namespace ljprof::core {
namespace {

using test::gdb_batch;
using test::MadeCore;
using test::TempDir;

constexpr const char* kLuajit = "/usr/bin/luajit";
constexpr const char* kTarantool = "/usr/bin/tarantool";
constexpr const char* kArm64Sysroot = "/usr/aarch64-linux-gnu";

// Prints its pid, then aborts itself through FFI (SIGABRT in libc's pthread_kill).
const char* kAbortLua =
    "local ffi=require'ffi' ffi.cdef'int getpid(void); void abort(void);' "
    "io.write('pid ', ffi.C.getpid(), '\\n') io.stdout:flush() ffi.C.abort()";
// Prints "ready PID" and spins (the loop is JIT-compiled).
const char* kLoopLua =
    "local ffi=require'ffi' ffi.cdef'int getpid(void);' "
    "io.write('ready ', ffi.C.getpid(), '\\n') io.stdout:flush() "
    "local x=0 while true do x=x+1 end";
// Tarantool: fio.stat runs on a coio worker thread, so the process has two threads.
const char* kTarantoolLoopLua =
    "require('fio').stat('/') local ffi=require'ffi' ffi.cdef'int getpid(void);' "
    "io.write('ready ', ffi.C.getpid(), '\\n') io.stdout:flush() "
    "local x=0 while true do x=x+1 end";
// arm64 under qemu: prints the guest's own memory map and pid, then raises SIGABRT.
const char* kArm64Lua =
    "local ffi=require'ffi' ffi.cdef'int getpid(void); int raise(int);' "
    "io.write(io.open('/proc/self/maps'):read('*a')) io.write('pid ', ffi.C.getpid(), '\\n') "
    "io.stdout:flush() ffi.C.raise(6)";

// A path with its symbolic links resolved: qemu's emulated /proc/self/maps shows the file it
// opened by its real path (/usr/lib/... on a merged-/usr system), the loader's link_map by the
// name it looked up (/lib/...).
std::string canonical(const std::string& path) {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::weakly_canonical(path, ec);
  return ec ? path : p.string();
}
bool same_file(const std::string& a, const std::string& b) {
  return canonical(a) == canonical(b);
}

CoreOptions options(const std::string& sysroot, const std::string& exe) {
  CoreOptions o;
  if (!sysroot.empty()) o.sysroots = {sysroot};
  o.exe = exe;
  return o;
}

// gdb's name of one of our registers.
std::string gdb_reg_name(elf::Arch arch, const std::string& ours) {
  if (arch == elf::Arch::AArch64 && ours == "pstate") return "cpsr";
  return ours;
}

// Every register gdb shows for every thread equals ours; every thread gdb knows is ours.
void expect_registers_match_gdb(const CoreFile& core, const std::string& gdb_out) {
  auto gdb = test::parse_gdb_thread_registers(gdb_out);
  ASSERT_EQ(gdb.size(), core.threads().size()) << gdb_out;
  for (const Thread& t : core.threads()) {
    SCOPED_TRACE("thread " + std::to_string(t.tid));
    auto it = gdb.find(t.tid);
    ASSERT_NE(it, gdb.end()) << "gdb has no LWP " << t.tid << "\n" << gdb_out;
    uint32_t compared = 0;
    for (uint32_t i = 0; i < t.gpr_count; ++i) {
      const std::string name = gdb_reg_name(t.arch, gpr_name(t.arch, i));
      auto g = it->second.find(name);
      if (g == it->second.end()) continue;
      EXPECT_EQ(t.gprs[i], g->second) << name;
      ++compared;
    }
    // gdb shows every GPR except x86-64 orig_rax, fs_base and gs_base.
    EXPECT_GE(compared, t.gpr_count - (t.arch == elf::Arch::X86_64 ? 3 : 0));
    const bool x86 = t.arch == elf::Arch::X86_64;
    EXPECT_EQ(t.pc, it->second.at(x86 ? "rip" : "pc"));
    EXPECT_EQ(t.sp, it->second.at(x86 ? "rsp" : "sp"));
    EXPECT_EQ(t.fp, it->second.at(x86 ? "rbp" : "x29"));
    if (!x86) {
      EXPECT_EQ(t.lr, it->second.at("x30"));
    }
  }
}

// For each thread, the 16 bytes at `expr` ($pc, $sp) are readable by us iff gdb reads them, and
// equal.
void expect_thread_bytes_match_gdb(const CoreFile& core, const std::string& gdb_out,
                                   const char* what) {
  auto gdb = test::parse_gdb_thread_bytes(gdb_out);
  for (const Thread& t : core.threads()) {
    SCOPED_TRACE(std::string(what) + " of thread " + std::to_string(t.tid));
    const uint64_t addr = std::string(what) == "pc" ? t.pc : t.sp;
    uint8_t ours[16];
    auto r = core.read(addr, ours, sizeof(ours));
    auto it = gdb.find(t.tid);
    if (it == gdb.end() || !it->second.has_value()) {
      EXPECT_FALSE(r.ok()) << "gdb cannot read " << std::hex << addr << " but we can";
      continue;
    }
    ASSERT_TRUE(r.ok()) << r.message();
    ASSERT_EQ(it->second->size(), 16u) << gdb_out;
    EXPECT_EQ(std::vector<uint8_t>(ours, ours + 16), *it->second);
  }
}

// Our mappings are exactly gdb's `info proc mappings` (which gdb takes from the core).
void expect_mappings_match_gdb(const CoreFile& core, const std::string& gdb_out) {
  auto rows = test::parse_gdb_mappings(gdb_out);
  ASSERT_FALSE(rows.empty()) << gdb_out;
  ASSERT_EQ(rows.size(), core.mappings().size()) << gdb_out;
  for (size_t i = 0; i < rows.size(); ++i) {
    const Mapping& m = core.mappings()[i];
    EXPECT_EQ(m.start, rows[i].start) << i;
    EXPECT_EQ(m.end, rows[i].end) << i;
    EXPECT_EQ(m.file_offset, rows[i].offset) << i;
    EXPECT_EQ(core.file_of(m).path, rows[i].path) << i;
  }
}

// Addresses in file mappings that the core holds no bytes for (one per mapping, at most 12).
std::vector<uint64_t> file_only_addresses(const CoreFile& core) {
  std::vector<uint64_t> addrs;
  for (const Mapping& m : core.mappings()) {
    const uint64_t a = m.start + std::min<uint64_t>(0x100, (m.end - m.start) / 2);
    if (!core.core_has(a) && core.file_of(m).usable() && addrs.size() < 12) addrs.push_back(a);
  }
  return addrs;
}

// What gdb says about one core, from a single gdb run (one run per test keeps the tests fast:
// loading tarantool's DWARF dominates). Sections are split by `echo` markers.
struct GdbView {
  std::string regs, pc, sp, maps, file, extra;
  std::vector<uint64_t> file_addrs;
};

GdbView query_gdb(const CoreFile& core, const std::string& exe, bool multiarch = false,
                  const std::string& sysroot = "", const std::vector<std::string>& extra = {}) {
  GdbView view;
  view.file_addrs = file_only_addresses(core);
  std::vector<std::string> cmds = {"echo @@regs\\n", "thread apply all info registers",
                                   "echo @@pc\\n",   "thread apply all -s x/16xb $pc",
                                   "echo @@sp\\n",   "thread apply all -s x/16xb $sp",
                                   "echo @@maps\\n", "info proc mappings",
                                   "echo @@file\\n"};
  if (!multiarch) {
    for (uint64_t a : view.file_addrs) cmds.push_back(fmt::format("x/16xb {:#x}", a));
  }
  cmds.push_back("echo @@extra\\n");
  cmds.insert(cmds.end(), extra.begin(), extra.end());
  cmds.push_back("echo @@end\\n");
  const std::string out = gdb_batch(exe, core.path(), cmds, multiarch, sysroot);
  auto part = [&](const std::string& name, const std::string& next) {
    size_t a = out.find("@@" + name + "\n");
    size_t b = out.find("@@" + next + "\n");
    if (a == std::string::npos || b == std::string::npos || b < a) return std::string();
    a += name.size() + 3;
    return out.substr(a, b - a);
  };
  view.regs = part("regs", "pc");
  view.pc = part("pc", "sp");
  view.sp = part("sp", "maps");
  view.maps = part("maps", "file");
  view.file = part("file", "extra");
  view.extra = part("extra", "end");
  return view;
}

// Bytes gdb reads at addresses the core holds no bytes for (gdb reads them from the files it
// loads: the executable and the shared libraries).
void expect_file_backed_bytes_match_gdb(const CoreFile& core, const GdbView& gdb) {
  ASSERT_FALSE(gdb.file_addrs.empty()) << "the core holds every page: nothing is read from a file";
  const auto lines = test::parse_gdb_x_lines(gdb.file);
  for (uint64_t a : gdb.file_addrs) {
    SCOPED_TRACE(fmt::format("address {:#x}", a));
    // gdb prints 16 bytes as two lines of 8.
    std::vector<uint8_t> expected;
    for (uint64_t line : {a, a + 8}) {
      auto it = lines.find(line);
      ASSERT_NE(it, lines.end()) << "gdb printed no line at " << std::hex << line << "\n"
                                 << gdb.file;
      ASSERT_EQ(it->second.size(), 8u);
      expected.insert(expected.end(), it->second.begin(), it->second.end());
    }
    uint8_t ours[16];
    auto r = core.read(a, ours, sizeof(ours));
    ASSERT_TRUE(r.ok()) << r.message();
    EXPECT_EQ(std::vector<uint8_t>(ours, ours + 16), expected);
  }
}

// Every ELF file whose build-id we checked agrees with readelf; the ELF files of the process are
// all verified (kernel and gdb cores keep the first page of each mapped ELF file).
void expect_build_ids_verified(const CoreFile& core) {
  uint32_t verified = 0;
  for (const MappedFile& f : core.files()) {
    SCOPED_TRACE(f.path);
    if (f.check == FileCheck::OpenFailed) {
      // Only non-ELF files (locale archives) may fail to open.
      EXPECT_NE(f.error.find("not an ELF file"), std::string::npos) << f.error;
      continue;
    }
    EXPECT_EQ(f.check, FileCheck::Verified) << f.error;
    ASSERT_TRUE(f.core_build_id.has_value());
    EXPECT_EQ(*f.core_build_id, test::readelf_build_id(f.resolved));
    ++verified;
  }
  EXPECT_GE(verified, 3u);
}

TEST(CoreFileAmd64, KernelCoreOfLuajitAbortMatchesGdb) {
  TempDir dir;
  MadeCore made = test::kernel_core(dir.path(), {kLuajit, "-e", kAbortLua});
  ASSERT_FALSE(made.core.empty()) << made.error;
  auto core = CoreFile::open(made.core);
  ASSERT_TRUE(core.ok()) << core.message();
  EXPECT_EQ(core->arch(), elf::Arch::X86_64);
  EXPECT_EQ(core->mapping_source(), MappingSource::NtFile);

  const GdbView gdb = query_gdb(*core, kLuajit, false, "", {"info address abort"});
  expect_registers_match_gdb(*core, gdb.regs);
  expect_mappings_match_gdb(*core, gdb.maps);

  // The process and the signal: the workload's own pid, SIGABRT sent by itself (raise).
  ASSERT_GT(made.pid, 0) << made.output;
  ASSERT_TRUE(core->process().has_value());
  EXPECT_EQ(core->process()->pid, made.pid);
  EXPECT_EQ(core->process()->fname, "luajit");
  EXPECT_EQ(core->threads()[0].tid, static_cast<uint32_t>(made.pid));
  EXPECT_EQ(core->threads()[0].signal, SIGABRT);
  ASSERT_TRUE(core->signal().has_value());
  EXPECT_EQ(core->signal()->signo, SIGABRT);
  EXPECT_EQ(core->signal()->sender_pid, made.pid);

  // The executable is found through AT_ENTRY and verified by build-id.
  ASSERT_NE(core->executable(), nullptr);
  EXPECT_EQ(core->executable()->path, kLuajit);
  expect_build_ids_verified(*core);

  // $pc is in libc's text, which a kernel core does not dump: read from libc.so.6.
  const Mapping* pc_map = core->mapping_at(core->threads()[0].pc);
  ASSERT_NE(pc_map, nullptr);
  EXPECT_FALSE(core->core_has(core->threads()[0].pc));
  EXPECT_NE(core->file_of(*pc_map).path.find("libc.so"), std::string::npos);
  expect_thread_bytes_match_gdb(*core, gdb.pc, "pc");
  expect_thread_bytes_match_gdb(*core, gdb.sp, "sp");
  expect_file_backed_bytes_match_gdb(*core, gdb);

  // Process address -> file address: gdb's runtime address of abort() is libc's .dynsym value
  // of abort (readelf) in libc's own address space.
  std::smatch m;
  const std::string extra = gdb.extra;
  ASSERT_TRUE(std::regex_search(extra, m, std::regex(R"(is at 0x([0-9a-f]+))"))) << extra;
  const uint64_t abort_addr = std::stoull(m[1], nullptr, 16);
  auto fa = core->file_address(abort_addr);
  ASSERT_TRUE(fa.ok()) << fa.message();
  EXPECT_NE(fa->file->path.find("libc.so"), std::string::npos);
  const std::string syms = test::run({"readelf", "-sW", "--dyn-syms", fa->file->resolved}).out;
  std::smatch s;
  ASSERT_TRUE(std::regex_search(
      syms, s, std::regex(R"(: ([0-9a-f]+) +\d+ FUNC +GLOBAL +DEFAULT +\d+ abort@@)")));
  EXPECT_EQ(fa->vaddr, std::stoull(s[1], nullptr, 16));
  const uint32_t libc_index = static_cast<uint32_t>(fa->file - core->files().data());
  auto bias = core->load_bias(libc_index);
  ASSERT_TRUE(bias.ok()) << bias.message();
  EXPECT_EQ(*bias + fa->vaddr, abort_addr);
  EXPECT_FALSE(core->file_address(core->threads()[0].sp).ok());  // the stack is no file
}

// SIGSEGV through an FFI store to address 0x10: NT_SIGINFO carries the fault address.
TEST(CoreFileAmd64, KernelCoreOfLuajitSegfaultHasTheFaultAddress) {
  TempDir dir;
  MadeCore made = test::kernel_core(
      dir.path(), {kLuajit, "-e", "local ffi=require'ffi' ffi.cast('int*', 0x10)[0] = 1"});
  ASSERT_FALSE(made.core.empty()) << made.error;
  auto core = CoreFile::open(made.core);
  ASSERT_TRUE(core.ok()) << core.message();
  const GdbView gdb = query_gdb(
      *core, kLuajit, false, "",
      {"p $_siginfo.si_signo", "p $_siginfo.si_code", "p $_siginfo._sifields._sigfault.si_addr"});
  expect_registers_match_gdb(*core, gdb.regs);
  expect_thread_bytes_match_gdb(*core, gdb.pc, "pc");
  ASSERT_TRUE(core->signal().has_value());
  std::smatch m;
  const std::string extra = gdb.extra;
  ASSERT_TRUE(std::regex_search(
      extra, m, std::regex(R"(\$\d+ = (\d+)\n\$\d+ = (\d+)\n\$\d+ = \(void \*\) 0x([0-9a-f]+))")))
      << extra;
  EXPECT_EQ(core->signal()->signo, std::stoi(m[1]));
  EXPECT_EQ(core->signal()->code, std::stoi(m[2]));
  EXPECT_EQ(core->signal()->fault_addr, std::stoull(m[3], nullptr, 16));
  EXPECT_EQ(core->signal()->signo, SIGSEGV);
  EXPECT_EQ(core->threads()[0].signal, SIGSEGV);
}

// Tarantool turns the SIGSEGV into abort(); the kernel core has its main and coio threads.
TEST(CoreFileAmd64, KernelCoreOfTarantoolWithTwoThreadsMatchesGdb) {
  TempDir dir;
  MadeCore made = test::kernel_core(
      dir.path(), {kTarantool, "-e",
                   "require('fio').stat('/') local ffi=require'ffi' ffi.cdef'int getpid(void);' "
                   "io.write('pid ', ffi.C.getpid(), '\\n') io.stdout:flush() "
                   "ffi.cast('int*', 0x10)[0] = 1"});
  ASSERT_FALSE(made.core.empty()) << made.error;
  auto core = CoreFile::open(made.core);
  ASSERT_TRUE(core.ok()) << core.message();
  ASSERT_EQ(core->threads().size(), 2u);
  EXPECT_EQ(core->threads()[0].tid, static_cast<uint32_t>(made.pid));
  EXPECT_EQ(core->threads()[0].signal, SIGABRT);
  const GdbView gdb = query_gdb(*core, kTarantool);
  expect_registers_match_gdb(*core, gdb.regs);
  expect_mappings_match_gdb(*core, gdb.maps);
  expect_thread_bytes_match_gdb(*core, gdb.pc, "pc");
  expect_thread_bytes_match_gdb(*core, gdb.sp, "sp");
  expect_file_backed_bytes_match_gdb(*core, gdb);
  expect_build_ids_verified(*core);
}

TEST(CoreFileAmd64, GcoreOfLuajitLoopMatchesGdb) {
  TempDir dir;
  MadeCore made = test::gcore_of(dir.path(), {kLuajit, "-e", kLoopLua});
  ASSERT_FALSE(made.core.empty()) << made.error;
  auto core = CoreFile::open(made.core);
  ASSERT_TRUE(core.ok()) << core.message();
  EXPECT_EQ(core->mapping_source(), MappingSource::NtFile);
  ASSERT_TRUE(core->process().has_value());
  EXPECT_EQ(core->process()->pid, made.pid);

  const GdbView gdb = query_gdb(*core, kLuajit);
  expect_registers_match_gdb(*core, gdb.regs);
  expect_mappings_match_gdb(*core, gdb.maps);
  expect_thread_bytes_match_gdb(*core, gdb.pc, "pc");
  expect_thread_bytes_match_gdb(*core, gdb.sp, "sp");
  expect_build_ids_verified(*core);
  // gdb omits the read-only file pages entirely (no PT_LOAD at all): they come from the files.
  expect_file_backed_bytes_match_gdb(*core, gdb);
}

TEST(CoreFileAmd64, GcoreOfTarantoolWithTwoThreadsMatchesGdb) {
  TempDir dir;
  MadeCore made = test::gcore_of(dir.path(), {kTarantool, "-e", kTarantoolLoopLua});
  ASSERT_FALSE(made.core.empty()) << made.error;
  auto core = CoreFile::open(made.core);
  ASSERT_TRUE(core.ok()) << core.message();
  EXPECT_GE(core->threads().size(), 2u);

  const GdbView gdb = query_gdb(*core, kTarantool);
  expect_registers_match_gdb(*core, gdb.regs);
  expect_mappings_match_gdb(*core, gdb.maps);
  expect_thread_bytes_match_gdb(*core, gdb.pc, "pc");
  expect_thread_bytes_match_gdb(*core, gdb.sp, "sp");
  expect_build_ids_verified(*core);
  // Non-PIE: the executable is mapped at its link address, and its .text comes from the file.
  ASSERT_NE(core->executable(), nullptr);
  EXPECT_EQ(core->executable()->path, kTarantool);
  const elf::Symbol* main_sym = core->executable()->elf->find_symbol("main");
  ASSERT_NE(main_sym, nullptr);
  EXPECT_FALSE(core->core_has(main_sym->value));
  for (uint32_t i = 0; i < core->files().size(); ++i) {
    if (!core->files()[i].is_executable) continue;
    auto bias = core->load_bias(i);
    ASSERT_TRUE(bias.ok()) << bias.message();
    EXPECT_EQ(*bias, 0u);
    auto fa = core->file_address(main_sym->value);
    ASSERT_TRUE(fa.ok()) << fa.message();
    EXPECT_EQ(fa->vaddr, main_sym->value);
  }
  expect_file_backed_bytes_match_gdb(*core, gdb);
}

// An nginx-lua worker (master_process off) with OpenResty's luajit2 from the fixture tree,
// listening on a unix socket in the scratch directory (no port to collide with).
TEST(CoreFileAmd64, GcoreOfNginxLuaWorkerMatchesGdb) {
  TempDir dir;
  const std::string tree = test::fixture("nginx-lua");
  const std::string conf = dir.path() + "/nginx.conf";
  {
    std::ofstream out(conf);
    out << "daemon off;\nmaster_process off;\nerror_log " << dir.path() << "/error.log;\n"
        << "pid " << dir.path() << "/nginx.pid;\n"
        << "load_module " << tree << "/usr/lib/nginx/modules/ndk_http_module.so;\n"
        << "load_module " << tree << "/usr/lib/nginx/modules/ngx_http_lua_module.so;\n"
        << "events {}\nhttp {\n  access_log off;\n"
        << "  lua_package_path \"" << tree << "/usr/share/lua/5.1/?.lua;;\";\n";
    for (const char* temp : {"client_body", "proxy", "fastcgi", "uwsgi", "scgi"}) {
      out << "  " << temp << "_temp_path " << dir.path() << ";\n";
    }
    out << "  init_worker_by_lua_block { io.stdout:write('ready ', ngx.worker.pid(), '\\n') "
           "io.stdout:flush() }\n"
        << "  server { listen unix:" << dir.path() << "/ngx.sock; location / { return 200; } }\n"
        << "}\n";
  }
  MadeCore made =
      test::gcore_of(dir.path(), {"env", "LD_LIBRARY_PATH=" + tree + "/usr/lib/x86_64-linux-gnu",
                                  "/usr/sbin/nginx", "-p", dir.path(), "-c", conf});
  ASSERT_FALSE(made.core.empty()) << made.error;
  auto core = CoreFile::open(made.core);
  ASSERT_TRUE(core.ok()) << core.message();
  const GdbView gdb = query_gdb(*core, "/usr/sbin/nginx");
  expect_registers_match_gdb(*core, gdb.regs);
  expect_mappings_match_gdb(*core, gdb.maps);
  expect_thread_bytes_match_gdb(*core, gdb.pc, "pc");
  expect_thread_bytes_match_gdb(*core, gdb.sp, "sp");
  expect_file_backed_bytes_match_gdb(*core, gdb);
  expect_build_ids_verified(*core);
  // OpenResty's libluajit is the one from the fixture tree, verified by its build-id.
  bool luajit2 = false;
  for (const MappedFile& f : core->files()) {
    if (f.path.rfind(tree + "/usr/lib/x86_64-linux-gnu/libluajit-5.1.so", 0) == 0) {
      luajit2 = true;
      EXPECT_EQ(f.check, FileCheck::Verified) << f.error;
    }
  }
  EXPECT_TRUE(luajit2);
}

TEST(CoreFileAmd64, ExecutableOverrideIsCheckedByBuildId) {
  TempDir dir;
  MadeCore made = test::kernel_core(dir.path(), {kLuajit, "-e", kAbortLua});
  ASSERT_FALSE(made.core.empty()) << made.error;

  // The same binary under another name is accepted and verified.
  const std::string copy = dir.path() + "/luajit-copy";
  std::filesystem::copy_file(kLuajit, copy);
  auto good = CoreFile::open(made.core, options("", copy));
  ASSERT_TRUE(good.ok()) << good.message();
  ASSERT_NE(good->executable(), nullptr);
  EXPECT_EQ(good->executable()->resolved, copy);
  EXPECT_EQ(good->executable()->check, FileCheck::Verified);

  // Another binary is refused with a named error, and its pages are unreadable.
  auto bad = CoreFile::open(made.core, options("", kTarantool));
  ASSERT_TRUE(bad.ok()) << bad.message();
  ASSERT_NE(bad->executable(), nullptr);
  EXPECT_EQ(bad->executable()->check, FileCheck::Mismatch);
  EXPECT_NE(bad->executable()->error.find("build-id mismatch"), std::string::npos)
      << bad->executable()->error;
  EXPECT_NE(bad->executable()->error.find(test::readelf_build_id(kTarantool)), std::string::npos);
  for (const Mapping& m : bad->mappings()) {
    if (!bad->file_of(m).is_executable || bad->core_has(m.start)) continue;
    uint8_t b[8];
    auto r = bad->read(m.start, b, sizeof(b));
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.message().find("build-id mismatch"), std::string::npos) << r.message();
  }
}

// A sysroot that lacks the files: like a loader, each is then looked for at its recorded path,
// where this host has it (same build-id: verified). An override executable whose file is
// missing leaves only the core's own bytes for its mappings.
TEST(CoreFileAmd64, SysrootWithoutTheFilesFallsBackToTheRecordedPaths) {
  TempDir dir;
  MadeCore made = test::kernel_core(dir.path(), {kLuajit, "-e", kAbortLua});
  ASSERT_FALSE(made.core.empty()) << made.error;
  const std::string root = dir.path() + "/empty-root";
  auto core = CoreFile::open(made.core, options(root, ""));
  ASSERT_TRUE(core.ok()) << core.message();
  for (const MappedFile& f : core->files()) {
    SCOPED_TRACE(f.path);
    EXPECT_EQ(f.tried, (std::vector<std::string>{root + f.path, f.path}));
    EXPECT_EQ(f.resolved, f.path);
    EXPECT_EQ(f.check, FileCheck::Verified);
  }
  auto missing = CoreFile::open(made.core, options("", dir.path() + "/no-such-luajit"));
  ASSERT_TRUE(missing.ok()) << missing.message();
  ASSERT_NE(missing->executable(), nullptr);
  EXPECT_EQ(missing->executable()->check, FileCheck::OpenFailed);
  EXPECT_NE(missing->executable()->error.find("not found"), std::string::npos);
  EXPECT_FALSE(missing->diagnostics().empty());
  uint8_t b[16];
  for (const Mapping& m : missing->mappings()) {
    if (!missing->file_of(m).is_executable || missing->core_has(m.start)) continue;
    auto r = missing->read(m.start, b, sizeof(b));  // text: only in the (missing) file
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.message().find("cannot open"), std::string::npos) << r.message();
    EXPECT_NE(r.message().find(fmt::format("{:#x}", m.start)), std::string::npos) << r.message();
  }
  EXPECT_TRUE(missing->read(missing->threads()[0].sp, b, sizeof(b)).ok());  // stack: in the core
}

TEST(CoreFileAmd64, CReaderInterfaceMatchesRead) {
  TempDir dir;
  MadeCore made = test::kernel_core(dir.path(), {kLuajit, "-e", kAbortLua});
  ASSERT_FALSE(made.core.empty()) << made.error;
  auto core = CoreFile::open(made.core);
  ASSERT_TRUE(core.ok()) << core.message();
  // The reader survives moving the CoreFile (its context is the core's heap state).
  ljprof_mem_reader reader = core->mem_reader();
  CoreFile moved = std::move(core).value();
  const Thread& t = moved.threads()[0];
  for (uint64_t addr : {t.pc, t.sp}) {
    uint8_t via_c[24], via_cc[24];
    ASSERT_EQ(reader.read_mem(reader.ctx, addr, via_c, sizeof(via_c)), 0);
    ASSERT_TRUE(moved.read(addr, via_cc, sizeof(via_cc)).ok());
    EXPECT_EQ(std::memcmp(via_c, via_cc, sizeof(via_c)), 0);
    auto word = moved.read_u64(addr);
    ASSERT_TRUE(word.ok());
    uint64_t expected;
    std::memcpy(&expected, via_c, 8);
    EXPECT_EQ(*word, expected);
  }
  // The exported function takes the CoreFile itself as its context.
  uint64_t at_sp = 0;
  ASSERT_EQ(ljprof_core_read_mem(&moved, t.sp, &at_sp, sizeof(at_sp)), 0);
  EXPECT_EQ(at_sp, *moved.read_u64(t.sp));
  // An unmapped address fails with -EFAULT and a zeroed buffer, like bpf_probe_read_user.
  uint8_t buf[8];
  std::memset(buf, 0xaa, sizeof(buf));
  EXPECT_EQ(reader.read_mem(reader.ctx, 8, buf, sizeof(buf)), -14);
  for (uint8_t b : buf) EXPECT_EQ(b, 0);
  auto err = moved.read(8, buf, sizeof(buf));
  ASSERT_FALSE(err.ok());
  EXPECT_NE(err.message().find("0x8: not in the core"), std::string::npos) << err.message();
  // A read that runs off the end of the address space is refused, not wrapped.
  EXPECT_FALSE(moved.read(UINT64_MAX - 3, buf, sizeof(buf)).ok());
}

// The arm64 core: qemu-user writes no NT_FILE, so the mappings come from the executable (auxv)
// and the dynamic linker's link_map, and the libraries are found under the sysroot.
TEST(CoreFileArm64, QemuGuestCoreMatchesGdbMultiarchAndGuestMaps) {
  TempDir dir;
  MadeCore made = test::qemu_arm64_core(dir.path(), kArm64Lua);
  ASSERT_FALSE(made.core.empty()) << made.error;
  const std::string exe = test::fixture("arm64/usr/bin/luajit");
  auto core = CoreFile::open(made.core, options(kArm64Sysroot, exe));
  ASSERT_TRUE(core.ok()) << core.message();
  EXPECT_EQ(core->arch(), elf::Arch::AArch64);
  EXPECT_EQ(core->mapping_source(), MappingSource::LinkMap);
  ASSERT_EQ(core->threads().size(), 1u);
  EXPECT_EQ(core->threads()[0].signal, SIGABRT);
  ASSERT_TRUE(core->process().has_value());
  EXPECT_EQ(core->process()->pid, made.pid);

  const GdbView gdb = query_gdb(*core, exe, /*multiarch=*/true, kArm64Sysroot);
  expect_registers_match_gdb(*core, gdb.regs);
  // gdb-multiarch does not load the libraries of a qemu core (it reads their text as zeros), so
  // only the stack is compared with it; $pc is checked against the file below.
  expect_thread_bytes_match_gdb(*core, gdb.sp, "sp");

  // Every mapping we rebuilt lies inside a line of the guest's own /proc/self/maps with the same
  // file and the same file offset; every r-x file line starts one of ours.
  auto guest = test::parse_proc_maps(made.output);
  ASSERT_GT(guest.size(), 5u) << made.output;
  for (const Mapping& m : core->mappings()) {
    const MappedFile& f = core->file_of(m);
    SCOPED_TRACE(fmt::format("{:#x}..{:#x} {}", m.start, m.end, f.resolved));
    // A mapping may span several lines of one file (RELRO mprotect splits a segment).
    for (uint64_t a = m.start; a < m.end; a = std::min(m.end, (a | 0xfff) + 1)) {
      bool found = false;
      for (const auto& g : guest) {
        if (a >= g.start && a < g.end && same_file(g.path, f.resolved) &&
            g.offset + (a - g.start) == m.file_offset + (a - m.start)) {
          found = true;
        }
      }
      EXPECT_TRUE(found) << std::hex << a;
    }
  }
  uint32_t code_lines = 0;
  for (const auto& g : guest) {
    if (g.perms[2] != 'x' || g.path.empty() || g.path[0] != '/') continue;
    ++code_lines;
    const Mapping* m = core->mapping_at(g.start);
    ASSERT_NE(m, nullptr) << g.path;
    EXPECT_EQ(m->start, g.start) << g.path;
    EXPECT_TRUE(same_file(core->file_of(*m).resolved, g.path)) << core->file_of(*m).resolved;
  }
  EXPECT_GE(code_lines, 4u);  // luajit, ld.so, libm, libgcc_s, libc

  // $pc is in libc's text, which qemu does not dump: the bytes come from the libc file at the
  // offset the guest's map gives.
  const uint64_t pc = core->threads()[0].pc;
  EXPECT_FALSE(core->core_has(pc));
  const test::ProcMapping* line = nullptr;
  for (const auto& g : guest) {
    if (pc >= g.start && pc < g.end) line = &g;
  }
  ASSERT_NE(line, nullptr);
  // The libc qemu opened: the sysroot's, or the host's multiarch one when libc6:arm64 is
  // installed (qemu prefers the host path the loader asked for when the prefix lacks it).
  const Mapping* pc_mapping = core->mapping_at(pc);
  ASSERT_NE(pc_mapping, nullptr);
  EXPECT_TRUE(same_file(core->file_of(*pc_mapping).resolved, line->path)) << line->path;
  std::vector<uint8_t> file = test::read_file(line->path);
  const uint64_t off = line->offset + (pc - line->start);
  ASSERT_LE(off + 16, file.size());
  uint8_t ours[16];
  auto r = core->read(pc, ours, sizeof(ours));
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(std::vector<uint8_t>(ours, ours + 16),
            std::vector<uint8_t>(file.begin() + off, file.begin() + off + 16));
}

// Without a sysroot, every library is looked for at its recorded (guest) path on this host.
// The guest's own /proc/self/maps says which host file qemu opened for each: one qemu took from
// the -L prefix (/usr/aarch64-linux-gnu/...) is not at its recorded path — or a different build
// is (Debian's multiarch libc6:arm64) — so it is refused and named; one qemu took from the
// host's own tree (qemu falls back to the host path when the prefix lacks the file) is used.
TEST(CoreFileArm64, WithoutSysrootLibrariesAreLookedForAtTheirRecordedPaths) {
  TempDir dir;
  MadeCore made = test::qemu_arm64_core(dir.path(), kArm64Lua);
  ASSERT_FALSE(made.core.empty()) << made.error;
  auto core = CoreFile::open(made.core);
  ASSERT_TRUE(core.ok()) << core.message();
  EXPECT_EQ(core->mapping_source(), MappingSource::LinkMap);
  ASSERT_NE(core->executable(), nullptr);
  // AT_EXECFN names the host path qemu ran.
  EXPECT_EQ(core->executable()->path, test::fixture("arm64/usr/bin/luajit"));
  EXPECT_TRUE(core->executable()->usable());
  const std::string prefix = kArm64Sysroot;
  std::set<std::string> opened;  // host files qemu opened, per the guest's maps (canonical)
  for (const auto& g : test::parse_proc_maps(made.output)) {
    if (!g.path.empty() && g.path[0] == '/') opened.insert(canonical(g.path));
  }
  uint32_t from_prefix = 0;
  for (const MappedFile& f : core->files()) {
    if (f.is_executable) continue;
    SCOPED_TRACE(f.path);
    EXPECT_EQ(f.tried, std::vector<std::string>{f.path});
    if (opened.count(canonical(prefix + f.path))) {
      ++from_prefix;
      EXPECT_FALSE(f.usable());
      bool named = false;
      for (const std::string& d : core->diagnostics()) {
        named = named || d.find("mapped file " + f.path + " refused") != std::string::npos;
      }
      EXPECT_TRUE(named);
    } else {
      ASSERT_TRUE(opened.count(canonical(f.path)))
          << "qemu opened neither " << prefix + f.path << " nor it";
      EXPECT_TRUE(f.usable()) << f.error;
    }
  }
  EXPECT_GE(from_prefix, 1u) << "the dynamic linker always comes from the -L prefix";
  // The executable's text comes from the file, at the offset the guest's own map gives.
  uint8_t b[16];
  const std::string exe = test::fixture("arm64/usr/bin/luajit");
  std::vector<uint8_t> file = test::read_file(exe);
  uint32_t compared = 0;
  for (const auto& g : test::parse_proc_maps(made.output)) {
    if (g.path != exe || g.perms[2] != 'x') continue;
    const uint64_t addr = g.start + 0x1000;
    ASSERT_TRUE(core->read(addr, b, sizeof(b)).ok());
    EXPECT_EQ(
        std::vector<uint8_t>(b, b + 16),
        std::vector<uint8_t>(file.begin() + g.offset + 0x1000, file.begin() + g.offset + 0x1010));
    ++compared;
  }
  EXPECT_EQ(compared, 1u) << made.output;
}

// A library the guest loaded from a directory of its own (LD_LIBRARY_PATH) that is in none of
// the roots is named with every path tried; a second --sysroot that holds it finds it; another
// file in its place is refused, never used.
TEST(CoreFileArm64, SysrootsAreSearchedInOrderAndCheckedByBuildId) {
  TempDir dir;
  const std::string lib_dir = dir.path() + "/private";
  std::filesystem::create_directories(lib_dir);
  std::filesystem::copy_file(kArm64Sysroot + std::string("/lib/libm.so.6"), lib_dir + "/libm.so.6");
  MadeCore made = test::qemu_arm64_core(dir.path(), kArm64Lua, {"LD_LIBRARY_PATH=" + lib_dir});
  ASSERT_FALSE(made.core.empty()) << made.error;
  ASSERT_NE(made.output.find(lib_dir + "/libm.so.6"), std::string::npos)
      << "the guest did not load libm from " << lib_dir << ":\n"
      << made.output;
  // Move the library into a root of its own: at its recorded path it is gone.
  const std::string root = dir.path() + "/root";
  std::filesystem::create_directories(root + lib_dir);
  std::filesystem::rename(lib_dir + "/libm.so.6", root + lib_dir + "/libm.so.6");
  const std::string exe = test::fixture("arm64/usr/bin/luajit");
  auto libm = [&](const CoreFile& core) -> const MappedFile* {
    for (const MappedFile& f : core.files())
      if (f.path == lib_dir + "/libm.so.6") return &f;
    return nullptr;
  };

  CoreOptions one = options(kArm64Sysroot, exe);
  auto missing = CoreFile::open(made.core, one);
  ASSERT_TRUE(missing.ok()) << missing.message();
  const MappedFile* m = libm(*missing);
  ASSERT_NE(m, nullptr);
  EXPECT_FALSE(m->usable());
  EXPECT_EQ(m->check, FileCheck::OpenFailed);
  EXPECT_EQ(m->tried, (std::vector<std::string>{kArm64Sysroot + lib_dir + "/libm.so.6",
                                                lib_dir + "/libm.so.6"}));
  EXPECT_NE(m->error.find("not found"), std::string::npos) << m->error;

  CoreOptions two = one;
  two.sysroots.push_back(root);
  auto found = CoreFile::open(made.core, two);
  ASSERT_TRUE(found.ok()) << found.message();
  m = libm(*found);
  ASSERT_NE(m, nullptr);
  EXPECT_TRUE(m->usable()) << m->error;
  EXPECT_EQ(m->resolved, root + lib_dir + "/libm.so.6");

  // Another arm64 library in its place: not the file the loader mapped (qemu dumps no
  // file-backed text, so no build-id is in the core; the loader's l_ld tells them apart).
  std::filesystem::copy_file(kArm64Sysroot + std::string("/lib/libgcc_s.so.1"),
                             root + lib_dir + "/libm.so.6",
                             std::filesystem::copy_options::overwrite_existing);
  auto other = CoreFile::open(made.core, two);
  ASSERT_TRUE(other.ok()) << other.message();
  m = libm(*other);
  ASSERT_NE(m, nullptr);
  EXPECT_FALSE(m->usable());
  EXPECT_EQ(m->check, FileCheck::Mismatch);
  EXPECT_NE(m->error.find("not the file the loader mapped"), std::string::npos) << m->error;

  // The command names the file in its text and JSON output.
  test::CommandResult text =
      test::run({test::ljprof_bin(), "core", "--sysroot", kArm64Sysroot, "--exe", exe, made.core});
  EXPECT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("warning: mapped file " + lib_dir + "/libm.so.6 not used"),
            std::string::npos)
      << text.out;
  test::CommandResult json = test::run(
      {test::ljprof_bin(), "core", "--json", "--sysroot", kArm64Sysroot, "--exe", exe, made.core});
  EXPECT_NE(json.out.find("\"unusable_files\""), std::string::npos) << json.out;
}

TEST(CoreFileArm64, WrongExecutableIsRefused) {
  TempDir dir;
  MadeCore made = test::qemu_arm64_core(dir.path(), kArm64Lua);
  ASSERT_FALSE(made.core.empty()) << made.error;
  // An x86-64 binary for an AArch64 core.
  auto other_arch = CoreFile::open(made.core, options(kArm64Sysroot, kLuajit));
  ASSERT_TRUE(other_arch.ok()) << other_arch.message();
  ASSERT_NE(other_arch->executable(), nullptr);
  EXPECT_EQ(other_arch->executable()->check, FileCheck::OpenFailed);
  EXPECT_NE(other_arch->executable()->error.find("is x86-64 but the core is aarch64"),
            std::string::npos)
      << other_arch->executable()->error;
  // An AArch64 file that is not the executable: AT_ENTRY does not match its e_entry.
  auto wrong = CoreFile::open(
      made.core,
      options(kArm64Sysroot, test::fixture("arm64/usr/lib/aarch64-linux-gnu/libluajit-5.1.so.2")));
  ASSERT_TRUE(wrong.ok()) << wrong.message();
  ASSERT_NE(wrong->executable(), nullptr);
  EXPECT_EQ(wrong->executable()->check, FileCheck::Mismatch);
  EXPECT_NE(wrong->executable()->error.find("AT_ENTRY"), std::string::npos)
      << wrong->executable()->error;
  uint8_t b[4];
  EXPECT_FALSE(wrong->read(wrong->threads()[0].pc, b, sizeof(b)).ok());
}

// 6000 mappings (two per iteration: read-only and read-write pages do not merge) give a core
// with more program headers than an executable may have; the values the workload wrote into its
// pages are read back.
TEST(CoreFileAmd64, CoreWithThousandsOfMappings) {
  TempDir dir;
  const char* lua =
      "local ffi=require'ffi' ffi.cdef'void* mmap(void*, size_t, int, int, int, long); void "
      "abort(void);' for i=1,3000 do ffi.C.mmap(nil,4096,1,0x22,-1,0) "
      "local p=ffi.cast('uint64_t*', ffi.C.mmap(nil,4096,3,0x22,-1,0)) p[0]=0x5eed0000+i "
      "if i%500==0 then io.write(string.format('page %d %.0f\\n', i, "
      "tonumber(ffi.cast('uintptr_t', p)))) end end io.stdout:flush() ffi.C.abort()";
  MadeCore made = test::kernel_core(dir.path(), {kLuajit, "-e", lua});
  ASSERT_FALSE(made.core.empty()) << made.error;
  const std::string phdrs = test::run({"readelf", "-hW", made.core}).out;
  std::smatch count;
  ASSERT_TRUE(std::regex_search(phdrs, count, std::regex(R"(Number of program headers:\s+(\d+))")));
  EXPECT_GT(std::stoul(count[1]), 6000u);
  auto core = CoreFile::open(made.core);
  ASSERT_TRUE(core.ok()) << core.message();
  std::regex page(R"(page (\d+) (\d+))");
  int checked = 0;
  for (auto it = std::sregex_iterator(made.output.begin(), made.output.end(), page);
       it != std::sregex_iterator(); ++it) {
    const uint64_t addr = std::stoull((*it)[2]);
    auto v = core->read_u64(addr);
    ASSERT_TRUE(v.ok()) << v.message();
    EXPECT_EQ(*v, 0x5eed0000u + std::stoull((*it)[1]));
    ++checked;
  }
  EXPECT_EQ(checked, 6) << made.output;
}

TEST(CoreFileErrors, NotACoreFile) {
  auto r = CoreFile::open(kLuajit);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("not a core file"), std::string::npos) << r.message();
  auto missing = CoreFile::open("/nonexistent/core");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("cannot open"), std::string::npos) << missing.message();
}

}  // namespace
}  // namespace ljprof::core
