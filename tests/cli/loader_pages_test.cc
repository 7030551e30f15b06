// cli/loader_pages.h in this process: libstdc++'s relocation table (.rela.dyn, where `readelf -S`
// places it in the file, found in memory through /proc/self/maps) is resident after start-up and
// no longer resident after release_relocation_pages (the kernel's /proc/self/pagemap, bit 63
// "page present"); the library still works afterwards.
#include "cli/loader_pages.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>
#include <string>

#include "support/test_support.h"

namespace ljprof {
namespace {

struct Mapping {
  uint64_t start = 0;
  uint64_t end = 0;
  uint64_t offset = 0;
  std::string path;
};

std::vector<Mapping> mappings_of(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  std::vector<Mapping> out;
  std::string line;
  while (std::getline(maps, line)) {
    std::istringstream in(line);
    std::string range, perms, offset, dev, inode, path;
    in >> range >> perms >> offset >> dev >> inode >> path;
    if (path.find(name) == std::string::npos) continue;
    Mapping m;
    m.start = std::stoull(range.substr(0, range.find('-')), nullptr, 16);
    m.end = std::stoull(range.substr(range.find('-') + 1), nullptr, 16);
    m.offset = std::stoull(offset, nullptr, 16);
    m.path = path;
    out.push_back(m);
  }
  return out;
}

// .rela.dyn's file offset and size, by readelf.
std::optional<std::pair<uint64_t, uint64_t>> rela_dyn(const std::string& path) {
  const test::CommandResult r = test::run({"readelf", "-S", "-W", path});
  std::smatch m;
  const std::regex re(R"(\.rela\.dyn\s+RELA\s+[0-9a-f]+\s+([0-9a-f]+)\s+([0-9a-f]+))");
  if (r.exit_code != 0 || !std::regex_search(r.out, m, re)) return std::nullopt;
  return std::make_pair(std::stoull(m[1], nullptr, 16), std::stoull(m[2], nullptr, 16));
}

// How many of the whole pages of [begin, end) are present in this process.
int present_pages(uint64_t begin, uint64_t end) {
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const int fd = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  int present = 0;
  for (uint64_t at = (begin + page - 1) / page * page; at + page <= end; at += page) {
    uint64_t entry = 0;
    if (::pread(fd, &entry, sizeof entry, static_cast<off_t>(at / page * 8)) != 8) {
      present = -1;
      break;
    }
    present += static_cast<int>(entry >> 63);
  }
  ::close(fd);
  return present;
}

TEST(LoaderPages, RelocationTablesLeaveMemoryAndTheLibraryStillWorks) {
  const std::vector<Mapping> maps = mappings_of("libstdc++.so.6");
  ASSERT_FALSE(maps.empty()) << "libstdc++ is not mapped";
  const auto table = rela_dyn(maps.front().path);
  ASSERT_TRUE(table) << maps.front().path << ": no .rela.dyn by readelf";
  const auto [offset, size] = *table;
  std::optional<std::pair<uint64_t, uint64_t>> in_memory;
  for (const Mapping& m : maps) {
    if (offset >= m.offset && offset + size <= m.offset + (m.end - m.start)) {
      in_memory =
          std::make_pair(m.start + (offset - m.offset), m.start + (offset - m.offset) + size);
    }
  }
  ASSERT_TRUE(in_memory) << "no mapping of " << maps.front().path << " holds .rela.dyn";
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  ASSERT_GE(size, 2 * page) << "too small a table to hold a whole page";

  EXPECT_GT(present_pages(in_memory->first, in_memory->second), 0)
      << "the loader's read of the table left no page resident";
  const cli::LoaderPages done = cli::release_relocation_pages();
  EXPECT_GE(done.objects, 1u);
  EXPECT_GE(done.bytes, size - 2 * page);
  EXPECT_EQ(present_pages(in_memory->first, in_memory->second), 0);

  std::ostringstream still;  // libstdc++ runs as before (its relocated data is untouched)
  still << std::hex << 255 << " " << std::string("ok");
  EXPECT_EQ(still.str(), "ff ok");
}

}  // namespace
}  // namespace ljprof
