// arm64: ptrace of a qemu-user process shows host registers, so the arm64 extraction is checked
// on a guest core written by qemu-aarch64. The Lua program prints its coroutine's address
// (tostring(coroutine.running()), the lua_State) and aborts itself through the FFI; the test
// reads the core's PT_LOAD memory and NT_AUXV minimally here (the full core reader lives in
// src/core) and runs the same checks as --verify-live, with G = L->glref.
#include <elf.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <dirent.h>
#include <cstring>
#include <fstream>
#include <regex>

#include "luajit/live_verify.h"
#include "support/test_support.h"

namespace ljprof {
namespace {

class CoreMemory {
 public:
  explicit CoreMemory(std::vector<uint8_t> bytes) : bytes_(std::move(bytes)) {
    if (bytes_.size() < sizeof(Elf64_Ehdr)) return;
    Elf64_Ehdr eh;
    std::memcpy(&eh, bytes_.data(), sizeof(eh));
    if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_type != ET_CORE ||
        eh.e_machine != EM_AARCH64 || eh.e_phentsize != sizeof(Elf64_Phdr)) {
      return;
    }
    for (uint16_t i = 0; i < eh.e_phnum; ++i) {
      uint64_t off = eh.e_phoff + uint64_t{i} * sizeof(Elf64_Phdr);
      if (off + sizeof(Elf64_Phdr) > bytes_.size()) return;
      Elf64_Phdr ph;
      std::memcpy(&ph, bytes_.data() + off, sizeof(ph));
      if (ph.p_offset + ph.p_filesz > bytes_.size()) continue;
      if (ph.p_type == PT_LOAD && ph.p_filesz > 0) loads_.push_back(ph);
      if (ph.p_type == PT_NOTE) read_notes(ph);
    }
    valid_ = !loads_.empty();
  }
  bool valid() const { return valid_; }
  uint64_t auxv(uint64_t type) const {
    for (size_t i = 0; i + 16 <= auxv_.size(); i += 16) {
      uint64_t t, v;
      std::memcpy(&t, auxv_.data() + i, 8);
      std::memcpy(&v, auxv_.data() + i + 8, 8);
      if (t == type) return v;
    }
    return 0;
  }
  // NT_PRSTATUS pr_reg (struct elf_prstatus: 112 bytes of header, then x0..x30, sp, pc).
  uint64_t reg(int n) const {
    uint64_t v = 0;
    if (prstatus_.size() >= size_t{112} + 8 * static_cast<size_t>(n + 1))
      std::memcpy(&v, prstatus_.data() + 112 + 8 * n, 8);
    return v;
  }
  // abi/read_mem.h's reader over this core's PT_LOAD segments.
  ljprof_mem_reader reader() const {
    return {[](void* ctx, uint64_t addr, void* dst, uint32_t len) {
              if (static_cast<const CoreMemory*>(ctx)->read(addr, dst, len)) return 0;
              std::memset(dst, 0, len);
              return -14;  // EFAULT
            },
            const_cast<CoreMemory*>(this)};
  }
  bool read(uint64_t addr, void* out, size_t len) const {
    for (const Elf64_Phdr& ph : loads_) {
      if (addr >= ph.p_vaddr && addr + len <= ph.p_vaddr + ph.p_filesz && addr + len >= addr) {
        std::memcpy(out, bytes_.data() + ph.p_offset + (addr - ph.p_vaddr), len);
        return true;
      }
    }
    return false;
  }

 private:
  void read_notes(const Elf64_Phdr& ph) {
    uint64_t p = ph.p_offset, end = ph.p_offset + ph.p_filesz;
    while (p + 12 <= end) {
      uint32_t namesz, descsz, type;
      std::memcpy(&namesz, bytes_.data() + p, 4);
      std::memcpy(&descsz, bytes_.data() + p + 4, 4);
      std::memcpy(&type, bytes_.data() + p + 8, 4);
      uint64_t desc = p + 12 + ((namesz + 3) & ~3u);
      if (desc + descsz > end) return;
      std::vector<uint8_t> d(bytes_.begin() + desc, bytes_.begin() + desc + descsz);
      if (type == NT_PRSTATUS && prstatus_.empty()) prstatus_ = d;
      if (type == NT_AUXV) auxv_ = d;
      p = desc + ((descsz + 3) & ~3u);
    }
  }
  std::vector<uint8_t> bytes_;
  std::vector<Elf64_Phdr> loads_;
  std::vector<uint8_t> prstatus_, auxv_;
  bool valid_ = false;
};

TEST(Arm64Core, InvariantsOnAQemuGuestCore) {
  const std::string luajit = test::fixture("arm64/usr/bin/luajit");
  const std::string dir = testing::TempDir() + "/ljprof-a64core-" + std::to_string(getpid());
  mkdir(dir.c_str(), 0700);
  const std::string script = dir + "/abort.lua";
  std::ofstream(script) << "local ffi = require('ffi')\n"
                           "ffi.cdef[[int raise(int sig);]]\n"
                           "jit.off()\n"
                           "local co = coroutine.create(function()\n"
                           "  io.write(tostring(coroutine.running()), '\\n') io.flush()\n"
                           "  ffi.C.raise(6)\n"
                           "end)\n"
                           "coroutine.resume(co)\n";
  // A 32 MiB core limit fits qemu's guest core and bounds the host core of qemu itself.
  test::CommandResult r = test::run(
      {"sh", "-c",
       "cd '" + dir +
           "' && ulimit -c 32768 && exec qemu-aarch64-static -L /usr/aarch64-linux-gnu '" + luajit +
           "' '" + script + "'"});
  EXPECT_NE(r.exit_code, 0) << "the program must abort";
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(thread: 0x([0-9a-f]+))")))
      << r.out << r.err;
  const uint64_t L = std::stoull(m[1], nullptr, 16);
  std::string core;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n.rfind("qemu_", 0) == 0 && n.size() > 5 && n.substr(n.size() - 5) == ".core") {
        core = dir + "/" + n;
      }
    }
    closedir(d);
  }
  ASSERT_FALSE(core.empty()) << "qemu wrote no guest core in " << dir;
  CoreMemory mem(test::read_file(core));
  test::run({"rm", "-rf", dir});
  ASSERT_TRUE(mem.valid());

  auto file = elf::ElfFile::open(luajit);
  ASSERT_TRUE(file.ok()) << file.message();
  auto info = luajit::extract_proc_info(**file);
  ASSERT_TRUE(info.ok()) << info.message();
  // Load bias of the PIE from the guest's AT_ENTRY.
  const uint64_t at_entry = mem.auxv(AT_ENTRY);
  ASSERT_NE(at_entry, 0u);
  const uint64_t bias = at_entry - (*file)->entry();

  uint64_t g = 0;
  ASSERT_TRUE(mem.read(L + info->value(luajit::field::kLGlref), &g, 8));
  luajit::VmSnapshot snap;
  snap.pc = mem.reg(32);
  snap.g = g;
  auto checks = luajit::check_vm_state(*info, bias, snap, mem.reader());
  ASSERT_EQ(checks.size(), 6u);
  for (const luajit::VmCheck& c : checks) EXPECT_TRUE(c.pass) << c.name << ": " << c.detail;
  // G->cur_L is the coroutine that called raise(); the running function is the script's.
  EXPECT_NE(checks[0].detail.find(fmt::format("cur_L={:#x}", L)), std::string::npos)
      << checks[0].detail;
  EXPECT_NE(checks.back().detail.find("chunkname=\"@" + script + "\""), std::string::npos)
      << checks.back().detail;
}

}  // namespace
}  // namespace ljprof
