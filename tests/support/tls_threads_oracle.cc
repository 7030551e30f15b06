#include "support/tls_threads_oracle.h"

#include <gtest/gtest.h>

#include <map>
#include <regex>

#include "luajit/fiber_layout.h"

#include "support/test_support.h"

namespace ljprof::test {

TlsThreadsOutput parse_tls_threads(const std::string& out) {
  TlsThreadsOutput o;
  static const std::regex thread(R"(thread (\d+) tp (0x[0-9a-f]+) cord_ptr (0x[0-9a-f]+))");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), thread); it != std::sregex_iterator();
       ++it) {
    o.threads.push_back({static_cast<uint32_t>(std::stoul((*it)[1])),
                         std::stoull((*it)[2], nullptr, 16), std::stoull((*it)[3], nullptr, 16)});
  }
  std::smatch m;
  if (std::regex_search(out, m, std::regex(R"(exited (\d+) (\d+))"))) {
    o.exited = {static_cast<uint32_t>(std::stoul(m[1])), static_cast<uint32_t>(std::stoul(m[2]))};
  }
  EXPECT_EQ(o.threads.size(), 3u) << out;
  EXPECT_EQ(o.exited.size(), 2u) << out;
  return o;
}

TlsSymbol cord_ptr_tls(const std::string& binary, bool arm64) {
  const std::string prefix = arm64 ? "aarch64-linux-gnu-" : "";
  TlsSymbol s;
  const CommandResult nm = run({prefix + "nm", binary});
  std::smatch m;
  EXPECT_TRUE(std::regex_search(nm.out, m, std::regex(R"(([0-9a-f]+) [bBdD] cord_ptr\n)")))
      << nm.out << nm.err;
  if (!m.empty()) s.value = std::stoull(m[1], nullptr, 16);
  const CommandResult re = run({prefix + "readelf", "-lW", binary});
  EXPECT_TRUE(std::regex_search(
      re.out, m,
      std::regex(
          R"(TLS\s+0x[0-9a-f]+ 0x[0-9a-f]+ 0x[0-9a-f]+ 0x[0-9a-f]+ (0x[0-9a-f]+) \S+\s+(0x[0-9a-f]+))")))
      << re.out << re.err;
  if (!m.empty()) {
    s.tls_size = std::stoull(m[1], nullptr, 16);
    s.tls_align = std::stoull(m[2], nullptr, 16);
  }
  return s;
}

void expect_threads_as_printed(const core::CoreFile& core,
                               const std::vector<core::ListedThread>& listed,
                               const TlsThreadsOutput& printed, const TlsSymbol& tls) {
  luajit::FiberLayout layout;
  layout.has_cord_ptr = true;
  layout.cord_ptr = tls.value;
  layout.tls_size = tls.tls_size;
  layout.tls_align = tls.tls_align;
  const std::optional<int64_t> from_tp = luajit::cord_ptr_from_tp(layout, core.arch());
  ASSERT_TRUE(from_tp.has_value());
  std::map<uint32_t, core::ListedThread> by_tid;
  for (const core::ListedThread& t : listed) by_tid[t.tid] = t;
  EXPECT_EQ(by_tid.size(), listed.size()) << "a thread listed twice";
  for (uint32_t tid : printed.exited) EXPECT_FALSE(by_tid.count(tid)) << tid << " has exited";
  for (const PrintedThread& p : printed.threads) {
    auto it = by_tid.find(p.tid);
    ASSERT_NE(it, by_tid.end()) << "thread " << p.tid << " not listed";
    EXPECT_EQ(it->second.thread_pointer, p.thread_pointer) << "thread " << p.tid;
    auto cord = core.read_u64(it->second.thread_pointer + static_cast<uint64_t>(*from_tp));
    ASSERT_TRUE(cord.ok()) << cord.message();
    EXPECT_EQ(*cord, p.cord_ptr) << "thread " << p.tid;
  }
  EXPECT_EQ(listed.size(), printed.threads.size());
}

}  // namespace ljprof::test
