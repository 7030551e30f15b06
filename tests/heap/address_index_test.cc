// heap::AddressIndex against the plain answer (a binary search over the sorted objects) on
// random object sets shaped like real heaps and like hostile ones: dense runs of small objects,
// addresses spread over the whole 47-bit space, objects one byte apart, none at all; and that
// dense runs take the index's page directory and spread addresses its hash.
#include "heap/address_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <random>
#include <set>

namespace ljprof::heap {
namespace {

int64_t brute_force(const std::vector<Object>& objects, uint64_t addr) {
  auto it = std::lower_bound(objects.begin(), objects.end(), addr,
                             [](const Object& o, uint64_t a) { return o.addr() < a; });
  return it != objects.end() && it->addr() == addr ? it - objects.begin() : -1;
}

std::vector<Object> sorted_objects(const std::set<uint64_t>& addrs) {
  std::vector<Object> objects;
  for (uint64_t a : addrs) objects.push_back({a, 16, 4});
  return objects;
}

// Every object's own address, its neighbours and random addresses around the set answer as the
// binary search does.
// `by_directory`: which of the index's two ways the objects' layout should take (nullopt: either).
void expect_same_answers(const std::vector<Object>& objects, std::mt19937_64& rng,
                         std::optional<bool> by_directory) {
  const AddressIndex index(objects);
  if (by_directory) {
    EXPECT_EQ(index.by_directory(), *by_directory);
  }
  for (const Object& o : objects) {
    for (uint64_t a : {o.addr(), o.addr() - 1, o.addr() + 1, o.addr() + 4096, o.addr() - 4096}) {
      ASSERT_EQ(index.find(objects, a), brute_force(objects, a)) << std::hex << a;
    }
  }
  const uint64_t low = objects.empty() ? 0 : objects.front().addr();
  const uint64_t span = objects.empty() ? 1 << 20 : objects.back().addr() - low + 8192;
  for (int i = 0; i < 5000; ++i) {
    const uint64_t a = low + rng() % span - 4096;
    ASSERT_EQ(index.find(objects, a), brute_force(objects, a)) << std::hex << a;
  }
}

TEST(AddressIndex, DenseRunsOfSmallObjectsAsAnAllocatorLaysThemOut) {
  std::mt19937_64 rng(1);
  for (int round = 0; round < 6; ++round) {
    std::set<uint64_t> addrs;
    for (int run = 0; run < 8; ++run) {
      uint64_t a = 0x7f0000000000 + (rng() % (uint64_t{1} << 36)) * 16;
      for (int i = 0, n = static_cast<int>(rng() % 5000); i < n; ++i) {
        addrs.insert(a);
        a += 16 + 8 * (rng() % 12);
      }
    }
    expect_same_answers(sorted_objects(addrs), rng, true);
  }
}

TEST(AddressIndex, AddressesSpreadOverTheWholeAddressSpace) {
  std::mt19937_64 rng(2);
  for (int round = 0; round < 6; ++round) {
    std::set<uint64_t> addrs;
    for (int i = 0, n = static_cast<int>(rng() % 20000); i < n; ++i) {
      addrs.insert(rng() & ((uint64_t{1} << 47) - 1));
    }
    // A few dozen objects can still be a directory of as many runs.
    expect_same_answers(sorted_objects(addrs), rng,
                        addrs.size() > 100 ? std::optional<bool>(false) : std::nullopt);
  }
}

TEST(AddressIndex, ObjectsOneByteApartAndAtThePageEdges) {
  std::mt19937_64 rng(3);
  std::set<uint64_t> addrs;
  for (uint64_t a = 0x10000 - 300; a < 0x10000 + 300; ++a) addrs.insert(a);
  for (uint64_t page = 1; page < 64; ++page) {
    addrs.insert(page << 12);
    addrs.insert((page << 12) - 1);
  }
  addrs.insert(0);
  addrs.insert(Object::kMaxAddress);
  expect_same_answers(sorted_objects(addrs), rng, true);
}

TEST(AddressIndex, NoObjectsFindNothing) {
  const std::vector<Object> none;
  const AddressIndex index(none);
  EXPECT_TRUE(index.empty());
  EXPECT_EQ(index.find(none, 0x1000), -1);
}

}  // namespace
}  // namespace ljprof::heap
