// record/exec_template: the template the kernel builds an exec'd process's context from, made
// from this test's own process. Oracles: the C library's getauxval (the same auxv the kernel
// gave this process), readelf's ELF header of the executable (e_entry) and its program
// interpreter, and /proc/self/maps for the device numbers.
#include "record/exec_template.h"

#include <gtest/gtest.h>
#include <sys/auxv.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <sstream>

#include "proc/proc_maps.h"
#include "support/test_support.h"

namespace ljprof::record {
namespace {

// A field of `readelf ARGS FILE`'s output, matched by `pattern`'s first group.
std::string readelf_field(const std::vector<std::string>& args, const std::string& pattern) {
  std::vector<std::string> argv = {"readelf"};
  argv.insert(argv.end(), args.begin(), args.end());
  test::CommandResult r = test::run(argv);
  std::smatch m;
  if (r.exit_code != 0 || !std::regex_search(r.out, m, std::regex(pattern))) return {};
  return m[1];
}

class ExecTemplate : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ctx = build_process_context(static_cast<uint32_t>(getpid()), cache_);
    ASSERT_TRUE(ctx.ok()) << ctx.message();
    ctx_ = std::move(*ctx);
    // As if the recorder had put every file's rows in the kernel.
    for (const ModuleView& m : ctx_->modules) m.object->uploaded = true;
  }
  ObjectCache cache_;
  std::unique_ptr<ProcessContext> ctx_;
};

TEST_F(ExecTemplate, AuxvIsTheOneTheKernelGaveThisProcess) {
  auto auxv = read_auxv(static_cast<uint32_t>(getpid()));
  ASSERT_TRUE(auxv.ok()) << auxv.message();
  for (uint64_t type : {AT_ENTRY, AT_BASE, AT_SYSINFO_EHDR, AT_PHDR, AT_PAGESZ}) {
    EXPECT_EQ(auxv_value(*auxv, type), getauxval(type)) << "AT_" << type;
  }
}

TEST_F(ExecTemplate, ModulesArePlacedByTheAuxvAsTheKernelWillPlaceThem) {
  auto auxv = read_auxv(static_cast<uint32_t>(getpid()));
  ASSERT_TRUE(auxv.ok()) << auxv.message();
  auto t = exec_template(*ctx_, *auxv);
  ASSERT_TRUE(t.ok()) << t.message();
  const std::string exe = std::filesystem::read_symlink("/proc/self/exe");
  const uint64_t e_entry = std::stoull(
      readelf_field({"-h", exe}, R"(Entry point address:\s+(0x[0-9a-f]+))"), nullptr, 16);
  const std::string interp = std::filesystem::canonical(
      readelf_field({"-l", exe}, R"(Requesting program interpreter: ([^\]]+)\])"));
  int entry = 0, base = 0, vdso = 0;
  for (uint32_t i = 0; i < t->nmodules; ++i) {
    const lj_rec_exec_module& m = t->modules[i];
    // record.bpf.c build_exec_context: bias = auxv value of the anchor + delta.
    const uint64_t bias = getauxval(m.anchor) + static_cast<uint64_t>(m.delta);
    const ModuleView* view = ctx_->module_at(m.link_start + bias);
    ASSERT_NE(view, nullptr) << "module " << i << " placed at no mapping";
    EXPECT_EQ(view->bias, bias);
    EXPECT_EQ(view->start, m.link_start + bias);
    EXPECT_EQ(view->end, m.link_end + bias);
    EXPECT_EQ(m.row_first, view->object->row_first);
    if (m.anchor == AT_ENTRY) {
      ++entry;
      EXPECT_EQ(m.delta, -static_cast<int64_t>(e_entry)) << "bias = AT_ENTRY - e_entry";
      EXPECT_EQ(std::filesystem::canonical(view->object->path), std::filesystem::canonical(exe));
    } else if (m.anchor == AT_BASE) {
      ++base;
      EXPECT_EQ(std::filesystem::canonical(view->object->path), interp);
    } else {
      ASSERT_EQ(m.anchor, AT_SYSINFO_EHDR);
      ++vdso;
      EXPECT_EQ(view->start, getauxval(AT_SYSINFO_EHDR));
    }
  }
  EXPECT_GE(entry, 1);
  EXPECT_GE(base, 1);
  EXPECT_EQ(vdso, 1);
}

TEST_F(ExecTemplate, WithoutTheExecutablesRowsThereIsNoTemplate) {
  auto auxv = read_auxv(static_cast<uint32_t>(getpid()));
  ASSERT_TRUE(auxv.ok()) << auxv.message();
  for (const ModuleView& m : ctx_->modules) {
    if (getauxval(AT_ENTRY) >= m.start && getauxval(AT_ENTRY) < m.end) m.object->uploaded = false;
  }
  EXPECT_FALSE(exec_template(*ctx_, *auxv).ok());
}

TEST(ExecKey, NamesTheExecutableAsTheKernelsDevT) {
  auto key = exec_key(static_cast<uint32_t>(getpid()));
  ASSERT_TRUE(key.ok()) << key.message();
  auto maps = proc::read_proc_maps(static_cast<uint32_t>(getpid()));
  ASSERT_TRUE(maps.ok()) << maps.message();
  const std::string exe = std::filesystem::read_symlink("/proc/self/exe");
  bool found = false;
  for (const proc::MapEntry& m : *maps) {
    if (m.path != exe) continue;
    // /proc/PID/maps prints the device as hex major:minor.
    const unsigned major = std::stoul(m.dev.substr(0, m.dev.find(':')), nullptr, 16);
    const unsigned minor = std::stoul(m.dev.substr(m.dev.find(':') + 1), nullptr, 16);
    EXPECT_EQ(key->dev, (major << 20) | minor);
    EXPECT_EQ(key->ino, m.inode);
    found = true;
  }
  EXPECT_TRUE(found) << exe;
}

// What a library template is keyed by (kernel_contexts.h publish_lib_templates): each module's
// file as the kernel names it — the inode and the device in the kernel's dev_t encoding, as
// exec_key (stat of /proc/PID/exe) gives it for the executable, and the mapping's file offset
// as /proc/PID/maps prints it.
TEST_F(ExecTemplate, ModulesCarryTheirFileAsTheKernelNamesIt) {
  auto key = exec_key(static_cast<uint32_t>(getpid()));
  ASSERT_TRUE(key.ok()) << key.message();
  auto maps = proc::read_proc_maps(static_cast<uint32_t>(getpid()));
  ASSERT_TRUE(maps.ok()) << maps.message();
  size_t files = 0, exe = 0;
  for (const ModuleView& m : ctx_->modules) {
    if (!m.object->image.empty()) {
      EXPECT_EQ(m.inode, 0u) << "the vDSO has no file";
      continue;
    }
    ++files;
    for (const proc::MapEntry& e : *maps) {
      if (e.start != m.start) continue;
      EXPECT_EQ(m.inode, e.inode) << e.path;
      EXPECT_EQ(m.offset, e.offset) << e.path;
      EXPECT_NE(m.dev, 0u) << e.path;
    }
    if (m.inode == key->ino && m.dev == key->dev) ++exe;
  }
  EXPECT_GT(files, 2u);  // the executable, libc, ld.so at least
  EXPECT_GT(exe, 0u) << "no module is the executable by exec_key's inode and device";
}

}  // namespace
}  // namespace ljprof::record
