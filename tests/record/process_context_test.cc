// The recorder's view of a live process: the kernel's vDSO is a code mapping with CFI too
// (clock_gettime and gettimeofday run there; a CPU-time clock makes its syscall there), read
// from the process's memory. Oracle: readelf on the same bytes, dumped to a file.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <optional>
#include <regex>
#include <tuple>

#include "record/process_context.h"
#include "record/process_identity.h"
#include "support/test_support.h"

namespace ljprof::record {
namespace {

TEST(ProcessContext, VdsoUnwindRowsMatchReadelf) {
  const uint32_t pid = static_cast<uint32_t>(getpid());
  ObjectCache cache;
  auto ctx = build_process_context(pid, cache);
  ASSERT_TRUE(ctx.ok()) << ctx.message();
  const ModuleView* vdso = nullptr;
  for (const ModuleView& m : (*ctx)->modules) {
    if (m.object->path == "[vdso]") vdso = &m;
  }
  ASSERT_NE(vdso, nullptr) << "no [vdso] module in the context of this process";
  ASSERT_TRUE(vdso->object->table.has_value()) << vdso->object->error;

  const std::string dump = testing::TempDir() + "/vdso-" + std::to_string(pid) + ".so";
  {
    std::ofstream out(dump, std::ios::binary);
    out.write(reinterpret_cast<const char*>(vdso->object->image.data()),
              static_cast<std::streamsize>(vdso->object->image.size()));
  }
  // Every function readelf lists gets an Ok row at its first byte with CFA = rsp + 8 (x86-64)
  // or sp + 0 (AArch64): the state at a call.
  auto syms = test::run({"readelf", "-W", "--dyn-syms", dump});
  ASSERT_EQ(syms.exit_code, 0) << syms.err;
  std::regex func(R"(\s*\d+: ([0-9a-f]+)\s+\d+\s+FUNC\s+\w+\s+\w+\s+\S+\s+(\S+))");
  int checked = 0;
  std::istringstream in(syms.out);
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (!std::regex_search(line, m, func)) continue;
    const uint64_t at = std::stoull(m[1], nullptr, 16);
    const lj_cfi_row* row = vdso->object->table->row_at(at);
    ASSERT_NE(row, nullptr) << m[2];
    EXPECT_EQ(row->hint, LJ_CFI_OK) << m[2];
    EXPECT_EQ(row->cfa_base, LJ_CFI_REG_SP) << m[2];
#if defined(__x86_64__)
    EXPECT_EQ(row->cfa_offset, 8) << m[2];
#endif
    ++checked;
    // The module covers the mapping at the load bias readelf's addresses imply.
    EXPECT_LT(at + vdso->bias, vdso->end) << m[2];
    EXPECT_GE(at + vdso->bias, vdso->start) << m[2];
  }
  EXPECT_GE(checked, 2) << syms.out;  // at least clock_gettime and gettimeofday
  auto frames = test::run({"readelf", "-W", "--debug-dump=frames", dump});
  ASSERT_EQ(frames.exit_code, 0) << frames.err;
  size_t fdes = 0;
  for (size_t p = frames.out.find(" FDE "); p != std::string::npos;
       p = frames.out.find(" FDE ", p + 1)) {
    ++fdes;
  }
  EXPECT_EQ(vdso->object->table->fde_count(), fdes);
  ::unlink(dump.c_str());
}

// The -a filters and the agent's labels, against this test's own process: /proc/self/cgroup
// (read here with plain file I/O) and the environment set below.
// A context is withheld when a mapping it was built from is gone (an exec, an munmap), not when
// code was only mapped in addition (ld.so loading libraries), and read again when its maps
// grew (an exec's, read before its vDSO): over this process's own maps.
TEST(ProcessContext, StillMappedIsAboutTheMappingsASignatureNames) {
  auto maps = proc::read_proc_maps(static_cast<uint32_t>(getpid()));
  ASSERT_TRUE(maps.ok()) << maps.message();
  std::vector<proc::MapEntry> code;
  for (const proc::MapEntry& m : *maps) {
    if (m.executable && m.file_backed()) code.push_back(m);
  }
  ASSERT_GE(code.size(), 2u) << "this test binary and libc";
  const std::string all = executable_signature(code);
  EXPECT_TRUE(still_mapped(all, *maps));
  // Fewer mappings then (the signature of all but the last): more code mapped since is fine.
  const std::vector<proc::MapEntry> fewer(code.begin(), code.end() - 1);
  EXPECT_TRUE(still_mapped(executable_signature(fewer), *maps));
  // One of them gone, or moved.
  EXPECT_FALSE(still_mapped(all, fewer));
  std::vector<proc::MapEntry> moved = code;
  moved.front().start += 0x1000;
  EXPECT_FALSE(still_mapped(all, moved));
  EXPECT_TRUE(still_mapped("", {}));
  // The vDSO, the last code an exec maps, is part of it: maps read before it differ.
  std::vector<proc::MapEntry> no_vdso;
  for (const proc::MapEntry& m : *maps) {
    if (m.path != "[vdso]") no_vdso.push_back(m);
  }
  ASSERT_LT(no_vdso.size(), maps->size()) << "this process has a [vdso] mapping";
  EXPECT_NE(executable_signature(no_vdso), executable_signature(*maps));
  EXPECT_FALSE(still_mapped(executable_signature(*maps), no_vdso));
}

TEST(ProcessIdentity, CgroupPrefixesMatchWholePathComponents) {
  const uint32_t self = static_cast<uint32_t>(::getpid());
  std::ifstream in("/proc/self/cgroup");
  std::string line, path;
  while (std::getline(in, line)) {
    const size_t colon = line.find(':', line.find(':') + 1);
    if (colon != std::string::npos && line.size() > colon + 1) path = line.substr(colon + 1);
  }
  ASSERT_FALSE(path.empty()) << "no cgroup path in /proc/self/cgroup";
  EXPECT_TRUE(proc::in_cgroup(self, ""));
  EXPECT_TRUE(proc::in_cgroup(self, path));
  EXPECT_FALSE(proc::in_cgroup(self, path + "-not-this-one"));
  EXPECT_FALSE(proc::in_cgroup(self, "/ljprof-no-such-cgroup"));
  if (path != "/") {
    const std::string parent = path.substr(0, path.rfind('/'));
    EXPECT_TRUE(proc::in_cgroup(self, parent.empty() ? "/" : parent)) << path;
    EXPECT_FALSE(proc::in_cgroup(self, path.substr(0, path.size() - 1))) << path;
  }
}

TEST(ProcessIdentity, NamesAndServiceFromProc) {
  // A child with a known environment: its service name comes from /proc/PID/environ.
  test::Background child(
      {"env", "PYROSCOPE_APPLICATION_NAME=billing", "OTEL_SERVICE_NAME=orders", "sleep", "5"});
  ASSERT_GT(child.pid(), 0);
  const uint32_t pid = static_cast<uint32_t>(child.pid());
  // /proc/PID/exe names the new image as soon as execve switched it, its environment a little
  // later (fs/exec.c begin_new_exec, then the ELF loader's stack set-up): wait for both.
  test::wait_until(
      [&] {
        return proc::executable_name(pid) == "sleep" &&
               !proc::environment_value(pid, {"OTEL_SERVICE_NAME"}).empty();
      },
      10);
  EXPECT_EQ(proc::executable_name(pid), "sleep");
  EXPECT_EQ(proc::read_comm(pid), "sleep");
  EXPECT_EQ(proc::environment_value(pid, {"OTEL_SERVICE_NAME", "PYROSCOPE_APPLICATION_NAME"}),
            "orders");
  EXPECT_EQ(proc::environment_value(pid, {"PYROSCOPE_APPLICATION_NAME"}), "billing");
  EXPECT_EQ(proc::environment_value(pid, {"LJPROF_NO_SUCH_VARIABLE"}), "");
}

// A file first met through a process that exited before its /proc/PID/map_files could be read
// (the exec storms of short-lived processes): the failure is not handed to every later process
// that maps the same file; the next one opens it, into the same object.
TEST(ObjectCache, AFileUnopenedThroughAnExitedProcessIsOpenedThroughTheNext) {
  auto libc_of = [](pid_t pid) -> std::optional<proc::MapEntry> {
    auto maps = proc::read_proc_maps(static_cast<uint32_t>(pid));
    if (!maps.ok()) return std::nullopt;
    for (const proc::MapEntry& m : *maps) {
      if (m.executable && m.file_backed() && m.path.find("/libc.so") != std::string::npos) return m;
    }
    return std::nullopt;
  };
  ObjectCache cache;
  std::optional<proc::MapEntry> first;
  {
    test::Background gone({"sleep", "5"});
    for (int i = 0; i < 200 && !first; ++i) {
      first = libc_of(gone.pid());
      if (!first) ::usleep(10000);
    }
    ASSERT_TRUE(first) << "no libc mapping in sleep's maps";
    ::kill(gone.pid(), SIGKILL);
    EXPECT_NE(gone.wait(5000), -1);
    MappedObject* unopened = cache.get(static_cast<uint32_t>(gone.pid()), *first);
    EXPECT_EQ(unopened->elf, nullptr);
    EXPECT_NE(unopened->error, "");
  }
  test::Background next({"sleep", "5"});
  std::optional<proc::MapEntry> second;
  for (int i = 0; i < 200 && !second; ++i) {
    second = libc_of(next.pid());
    if (!second) ::usleep(10000);
  }
  ASSERT_TRUE(second);
  ASSERT_EQ(std::make_tuple(second->dev, second->inode, second->path),
            std::make_tuple(first->dev, first->inode, first->path));
  MappedObject* obj = cache.get(static_cast<uint32_t>(next.pid()), *second);
  ASSERT_NE(obj->elf, nullptr) << obj->error;
  EXPECT_TRUE(obj->table.has_value()) << obj->error;
  EXPECT_EQ(cache.get(static_cast<uint32_t>(next.pid()), *second), obj);
  EXPECT_EQ(cache.size(), 1u);
}

// The loader may replace a mapping between the read of /proc/PID/maps and the open of its
// map_files entry (an AArch64 library whose tail it maps over): that open fails, and the same
// process's next read, with the mapping as it is now, opens it. Here the stale entry is this
// process's libc mapping one page longer than it is.
TEST(ObjectCache, AFileUnopenedThroughAReplacedMappingIsOpenedThroughTheNewOne) {
  const auto self = static_cast<uint32_t>(::getpid());
  auto maps = proc::read_proc_maps(self);
  ASSERT_TRUE(maps.ok()) << maps.message();
  std::optional<proc::MapEntry> libc;
  for (const proc::MapEntry& m : *maps) {
    if (m.executable && m.file_backed() && m.path.find("/libc.so") != std::string::npos) libc = m;
  }
  ASSERT_TRUE(libc) << "no libc mapping in this process";
  proc::MapEntry stale = *libc;
  stale.end += 0x1000;
  ObjectCache cache;
  MappedObject* unopened = cache.get(self, stale);
  EXPECT_EQ(unopened->elf, nullptr);
  EXPECT_NE(unopened->error, "");
  // The same range again is not tried again (a file that cannot be opened stays so).
  EXPECT_EQ(cache.get(self, stale)->elf, nullptr);
  MappedObject* obj = cache.get(self, *libc);
  EXPECT_EQ(obj, unopened);
  ASSERT_NE(obj->elf, nullptr) << obj->error;
  EXPECT_TRUE(obj->table.has_value()) << obj->error;
}

}  // namespace
}  // namespace ljprof::record
