// What the recorder gives back (record/unwind_rows.h, ObjectCache::prune): a file's place in the
// kernel's row map while a process context maps it, freed once none does, taken again when one
// does; a file that does not fit is left waiting; idle files leave the object cache least
// recently used first. The target is a `sleep` (its executable, libc, ld.so, vDSO); the row map
// is a real BPF array map like the recorder's (root); expected values come from the objects the
// test built and the rows it read back from the map.
#include <bpf/bpf.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <optional>
#include <set>

#include "luajit/vm_cfi.h"
#include "record/process_context.h"
#include "record/unwind_rows.h"
#include "support/test_support.h"

namespace ljprof::record {
namespace {

// A sleeping process, once ld.so has mapped its libc (its maps before that are ld.so's alone).
class Sleeper {
 public:
  Sleeper() : process_({"sleep", "30"}) {
    for (int i = 0; i < 500 && !ready(); ++i) ::usleep(10000);
  }
  uint32_t pid() const { return static_cast<uint32_t>(process_.pid()); }
  bool ready() const {
    auto maps = proc::read_proc_maps(pid());
    if (!maps.ok()) return false;
    for (const proc::MapEntry& m : *maps) {
      if (m.executable && m.path.find("/libc.so") != std::string::npos) return true;
    }
    return false;
  }

 private:
  test::Background process_;
};

std::unique_ptr<ProcessContext> context_of(uint32_t pid, ObjectCache& cache) {
  auto ctx = build_process_context(pid, cache);
  EXPECT_TRUE(ctx.ok()) << ctx.message();
  return ctx.ok() ? std::move(*ctx) : nullptr;
}

// As the recorder publishes a context: every module's rows uploaded (those of files analysed
// just now went at once, ObjectCache::on_table; the vDSO's and those of files met before here).
std::unique_ptr<ProcessContext> published(uint32_t pid, ObjectCache& cache, UnwindRows& rows) {
  auto ctx = context_of(pid, cache);
  if (ctx) {
    for (const ModuleView& m : ctx->modules) rows.upload(*m.object);
  }
  return ctx;
}

std::set<MappedObject*> objects_of(const ProcessContext& ctx) {
  std::set<MappedObject*> out;
  for (const ModuleView& m : ctx.modules) out.insert(m.object);
  return out;
}

TEST(ObjectCache, ContextsCountTheirFilesAndIdleFilesArePrunedLeastRecentlyUsedFirst) {
  Sleeper sleeper;
  ASSERT_TRUE(sleeper.ready());
  ObjectCache cache;
  auto a = context_of(sleeper.pid(), cache);
  ASSERT_NE(a, nullptr);
  const std::set<MappedObject*> files = objects_of(*a);
  ASSERT_GE(files.size(), 3u) << "sleep, libc, ld.so at least";
  for (MappedObject* obj : files) EXPECT_EQ(obj->contexts, 1u) << obj->path;
  auto b = context_of(sleeper.pid(), cache);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(objects_of(*b), files);  // the same files, shared
  for (MappedObject* obj : files) EXPECT_EQ(obj->contexts, 2u) << obj->path;
  const size_t held = cache.size();

  // A file some context maps is never pruned.
  EXPECT_EQ(cache.prune(0, 0), held - files.size());
  a.reset();
  for (MappedObject* obj : files) EXPECT_EQ(obj->contexts, 1u) << obj->path;
  EXPECT_EQ(cache.prune(0, 0), 0u);
  EXPECT_EQ(cache.size(), files.size());

  // Idle once b is gone too: libc, taken again last, outlives the others.
  MappedObject* libc = nullptr;
  for (MappedObject* obj : files) {
    if (obj->path.find("/libc.so") != std::string::npos) libc = obj;
  }
  ASSERT_NE(libc, nullptr);
  auto maps = proc::read_proc_maps(sleeper.pid());
  ASSERT_TRUE(maps.ok());
  b.reset();
  for (const proc::MapEntry& m : *maps) {
    if (m.executable && m.path == libc->path) {
      ASSERT_EQ(cache.get(sleeper.pid(), m), libc);
    }
  }
  EXPECT_EQ(cache.prune(1, UINT64_MAX), files.size() - 1);
  EXPECT_EQ(cache.size(), 1u);
  cache.for_each([&](MappedObject& obj) { EXPECT_EQ(&obj, libc); });
  // The byte bound alone: libc's bytes are more than nothing.
  EXPECT_GT(cache.held_bytes(), 0u);
  EXPECT_EQ(cache.prune(SIZE_MAX, cache.held_bytes() - 1), 1u);
  EXPECT_EQ(cache.size(), 0u);
}

// The row map of the recorder (record.bpf.c `rows`), made here.
class RowMap {
 public:
  explicit RowMap(uint32_t capacity) : capacity_(capacity) {
    fd_ = bpf_map_create(BPF_MAP_TYPE_ARRAY, "ljprof_rows", sizeof(uint32_t), sizeof(lj_cfi_row),
                         capacity, nullptr);
  }
  ~RowMap() {
    if (fd_ >= 0) ::close(fd_);
  }
  int fd() const { return fd_; }
  uint32_t capacity() const { return capacity_; }
  lj_cfi_row at(uint32_t row) const {
    lj_cfi_row r{};
    EXPECT_EQ(bpf_map_lookup_elem(fd_, &row, &r), 0) << row;
    return r;
  }

 private:
  uint32_t capacity_;
  int fd_ = -1;
};

bool same_row(const lj_cfi_row& a, const lj_cfi_row& b) {
  return std::memcmp(&a, &b, sizeof(a)) == 0;
}

// Every uploaded file's rows in the map are its table's rows (built again from its ELF), and no
// two files' ranges overlap.
void expect_rows_in_map(const std::set<MappedObject*>& files, const RowMap& map) {
  std::map<uint32_t, uint32_t> ranges;
  for (MappedObject* obj : files) {
    if (!obj->uploaded) continue;
    ranges[obj->row_first] = obj->row_count;
    auto table = obj->image.empty() ? luajit::walker_table(*obj->elf, nullptr)
                                    : cfi::build_vdso_unwind_table(*obj->elf);
    ASSERT_TRUE(table.ok()) << table.message();
    ASSERT_EQ(table->rows().size(), obj->row_count) << obj->path;
    for (uint32_t i : {0u, obj->row_count / 2, obj->row_count - 1}) {
      EXPECT_TRUE(same_row(map.at(obj->row_first + i), table->rows()[i])) << obj->path << " " << i;
    }
  }
  uint32_t end = 0;
  for (const auto& [first, count] : ranges) {
    EXPECT_GE(first, end) << "overlapping ranges";
    end = first + count;
  }
  EXPECT_LE(end, map.capacity());
}

uint64_t rows_of(const std::set<MappedObject*>& files) {
  uint64_t n = 0;
  for (MappedObject* obj : files) n += obj->uploaded ? obj->row_count : 0;
  return n;
}

// The recorder's wiring: rows uploaded as soon as a file's table is built.
struct Recorderish {
  explicit Recorderish(const RowMap& map, UnwindRows::Warn warn = nullptr)
      : rows(cache, counts, std::move(warn)) {
    cache.on_table([this](MappedObject& obj) { rows.upload(obj); });
    rows.attach(map.fd(), map.capacity());
  }
  ObjectCache cache;
  AgentCounts counts{};
  UnwindRows rows;
};

TEST(UnwindRows, AFilesRowsAreFreedOnceUnmappedAndTakenAgainWhenMapped) {
  Sleeper sleeper;
  ASSERT_TRUE(sleeper.ready());
  RowMap map(1 << 18);
  if (map.fd() < 0 && (errno == EPERM || geteuid() != 0)) GTEST_SKIP() << "BPF maps need root";
  ASSERT_GE(map.fd(), 0) << std::strerror(errno);
  Recorderish r(map);
  auto ctx = published(sleeper.pid(), r.cache, r.rows);
  ASSERT_NE(ctx, nullptr);
  const std::set<MappedObject*> files = objects_of(*ctx);
  for (MappedObject* obj : files) EXPECT_TRUE(obj->uploaded) << obj->path << ": " << obj->error;
  const uint64_t uploaded = rows_of(files);
  EXPECT_EQ(r.rows.in_use(), uploaded);
  expect_rows_in_map(files, map);

  // Unmapped: kept for kUnmappedNs, then freed.
  ctx.reset();
  const uint64_t t0 = 1000 * UnwindRows::kUnmappedNs;
  EXPECT_FALSE(r.rows.sweep(t0));
  EXPECT_EQ(r.rows.in_use(), uploaded);
  EXPECT_TRUE(r.rows.sweep(t0 + UnwindRows::kUnmappedNs));
  EXPECT_EQ(r.rows.in_use(), 0u);
  EXPECT_EQ(r.counts[LJ_REC_CTR_ROWS_FREED], files.size());
  for (MappedObject* obj : files) EXPECT_FALSE(obj->uploaded) << obj->path;

  // Mapped again: the same files (still cached), their rows read again and put back.
  ctx = published(sleeper.pid(), r.cache, r.rows);
  ASSERT_NE(ctx, nullptr);
  ASSERT_EQ(objects_of(*ctx), files);
  EXPECT_EQ(rows_of(files), uploaded);
  EXPECT_EQ(r.rows.in_use(), uploaded);
  expect_rows_in_map(files, map);
}

// A map one row short of the process's files: the last file uploaded does not fit and waits,
// counted and warned about once; when a file no context maps any more is given back, it fits at
// the next upload (in the freed file's range: the largest file is given back).
TEST(UnwindRows, AFileThatDoesNotFitWaitsUntilRowsAreFreed) {
  Sleeper sleeper;
  ASSERT_TRUE(sleeper.ready());
  uint64_t needed = 0;
  {
    RowMap probe(1 << 18);
    if (probe.fd() < 0 && (errno == EPERM || geteuid() != 0)) GTEST_SKIP() << "BPF maps need root";
    Recorderish r(probe);
    auto ctx = published(sleeper.pid(), r.cache, r.rows);
    ASSERT_NE(ctx, nullptr);
    needed = rows_of(objects_of(*ctx));
  }
  RowMap map(static_cast<uint32_t>(needed - 1));
  ASSERT_GE(map.fd(), 0) << std::strerror(errno);
  std::vector<std::string> warnings;
  Recorderish r(map, [&](const std::string& m) { warnings.push_back(m); });
  auto ctx = published(sleeper.pid(), r.cache, r.rows);
  ASSERT_NE(ctx, nullptr);
  const std::set<MappedObject*> files = objects_of(*ctx);
  MappedObject *waiting = nullptr, *largest = nullptr;
  for (MappedObject* obj : files) {
    if (obj->no_room) {
      EXPECT_EQ(waiting, nullptr) << "two files waiting";
      waiting = obj;
    } else if (largest == nullptr || obj->row_count > largest->row_count) {
      largest = obj;
    }
  }
  ASSERT_NE(waiting, nullptr);
  ASSERT_NE(largest, nullptr);
  EXPECT_FALSE(waiting->uploaded);
  EXPECT_EQ(rows_of(files), needed - waiting->table->rows().size());
  EXPECT_TRUE(waiting_for_rows(*ctx));
  EXPECT_EQ(r.counts[LJ_REC_CTR_ROWS_FULL], 1u);
  EXPECT_EQ(r.counts[LJ_REC_CTR_ROWS_FRAGMENTED], 0u);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find(waiting->path), std::string::npos) << warnings[0];
  r.rows.upload(*waiting);  // tried again at each publish: still no room, counted once
  EXPECT_EQ(r.counts[LJ_REC_CTR_ROWS_FULL], 1u);
  EXPECT_EQ(warnings.size(), 1u);
  expect_rows_in_map(files, map);

  // The largest file leaves the context, as an munmap would: its rows go to the waiting file.
  ASSERT_GE(largest->row_count, waiting->table->rows().size());
  const uint32_t freed_first = largest->row_first;
  std::erase_if(ctx->modules, [&](const ModuleView& m) { return m.object == largest; });
  --largest->contexts;
  r.rows.upload(*waiting);
  EXPECT_TRUE(waiting->uploaded);
  EXPECT_EQ(waiting->row_first, freed_first);
  EXPECT_FALSE(waiting_for_rows(*ctx));
  EXPECT_FALSE(largest->uploaded);
  EXPECT_EQ(r.counts[LJ_REC_CTR_ROWS_FREED], 1u);
  expect_rows_in_map(objects_of(*ctx), map);
}

}  // namespace
}  // namespace ljprof::record
