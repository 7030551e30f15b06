// Malformed-input corpus generated from real binaries: truncations, corrupted header fields,
// links out of range, inflated sizes. Every case must give a named error or a file that is safe
// to use (exercise_all_accessors under ASan/UBSan proves "no read outside the mapping").
#include <elf.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "elf/elf_file.h"
#include "elf_exercise.h"
#include "support/test_support.h"

namespace ljprof::elf {
namespace {

// Opens `bytes`; on success touches everything. Returns the error message or "" on success.
std::string try_open(std::span<const uint8_t> bytes) {
  auto file = ElfFile::from_memory(bytes, "corpus-input");
  if (!file.ok()) {
    EXPECT_NE(file.message().find("corpus-input"), std::string::npos)
        << "error does not name the file: " << file.message();
    return file.message();
  }
  exercise_all_accessors(**file);
  return "";
}

template <typename T>
T load(const std::vector<uint8_t>& bytes, uint64_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof(T));
  return value;
}

template <typename T>
void store(std::vector<uint8_t>& bytes, uint64_t offset, T value) {
  std::memcpy(bytes.data() + offset, &value, sizeof(T));
}

struct Image {
  std::vector<uint8_t> bytes;
  Elf64_Ehdr eh;

  explicit Image(const std::string& path) : bytes(test::read_file(path)) {
    std::memcpy(&eh, bytes.data(), sizeof(eh));
  }
  uint64_t shdr_at(uint32_t index) const {
    return eh.e_shoff + uint64_t{index} * sizeof(Elf64_Shdr);
  }
  Elf64_Shdr shdr(uint32_t index) const { return load<Elf64_Shdr>(bytes, shdr_at(index)); }
  // Index of the first section of `type`.
  uint32_t find(uint32_t type) const {
    for (uint32_t i = 0; i < eh.e_shnum; ++i) {
      if (shdr(i).sh_type == type) return i;
    }
    ADD_FAILURE() << "no section of type " << type;
    return 0;
  }
};

// Applies `mutate` to a copy, opens it, and returns the error ("" if it opened).
template <typename F>
std::string with_mutation(const Image& image, F mutate) {
  std::vector<uint8_t> copy = image.bytes;
  mutate(copy);
  return try_open(copy);
}

void expect_error(const std::string& message, const std::string& rule) {
  ASSERT_FALSE(message.empty()) << "expected an error naming '" << rule << "', but the file opened";
  EXPECT_NE(message.find(rule), std::string::npos) << message;
}

class MalformedTest : public ::testing::TestWithParam<std::string> {};

TEST_P(MalformedTest, Truncations) {
  Image image(GetParam());
  std::vector<uint64_t> cuts = {0, 1, 4, 5, 16, 63, 64, 65, 120};
  for (uint64_t i = 1; i <= 200; ++i) cuts.push_back(image.bytes.size() * i / 201);
  for (uint32_t i = 0; i < image.eh.e_shnum; ++i) {
    Elf64_Shdr sh = image.shdr(i);
    cuts.push_back(sh.sh_offset + sh.sh_size / 2);
    cuts.push_back(image.shdr_at(i) + 7);
  }
  cuts.push_back(image.eh.e_phoff + 3);
  cuts.push_back(image.bytes.size() - 1);
  size_t errors = 0;
  for (uint64_t cut : cuts) {
    if (cut >= image.bytes.size()) continue;
    std::string err = try_open(std::span<const uint8_t>(image.bytes.data(), cut));
    if (!err.empty()) ++errors;
  }
  // The section header table sits at the end of these files, so every strict prefix fails.
  EXPECT_EQ(errors, cuts.size());
}

TEST_P(MalformedTest, HeaderFields) {
  Image image(GetParam());
  expect_error(with_mutation(image, [](auto& b) { b[EI_CLASS] = ELFCLASS32; }), "ELF64");
  expect_error(with_mutation(image, [](auto& b) { b[EI_DATA] = ELFDATA2MSB; }), "little-endian");
  expect_error(with_mutation(image, [](auto& b) { b[1] = 'X'; }), "bad magic");
  expect_error(
      with_mutation(image,
                    [](auto& b) { store<uint16_t>(b, offsetof(Elf64_Ehdr, e_machine), EM_386); }),
      "unsupported machine");
  expect_error(
      with_mutation(image,
                    [](auto& b) { store<uint16_t>(b, offsetof(Elf64_Ehdr, e_shentsize), 63); }),
      "e_shentsize");
  expect_error(
      with_mutation(image,
                    [](auto& b) { store<uint16_t>(b, offsetof(Elf64_Ehdr, e_phentsize), 55); }),
      "e_phentsize");
  expect_error(with_mutation(image,
                             [&](auto& b) {
                               store<uint64_t>(b, offsetof(Elf64_Ehdr, e_shoff), b.size() - 10);
                             }),
               "outside the file");
  expect_error(with_mutation(image,
                             [](auto& b) {
                               store<uint64_t>(b, offsetof(Elf64_Ehdr, e_shoff), ~uint64_t{0} - 8);
                             }),
               "outside the file");
  expect_error(
      with_mutation(image,
                    [](auto& b) { store<uint16_t>(b, offsetof(Elf64_Ehdr, e_shnum), 0xfeff); }),
      "outside the file");
  expect_error(
      with_mutation(image,
                    [](auto& b) { store<uint64_t>(b, offsetof(Elf64_Ehdr, e_phoff), b.size()); }),
      "program header table");
  expect_error(with_mutation(image,
                             [&](auto& b) {
                               store<uint16_t>(b, offsetof(Elf64_Ehdr, e_shstrndx),
                                               static_cast<uint16_t>(image.eh.e_shnum + 3));
                             }),
               "e_shstrndx");
  // e_shnum == 0 takes the count from section 0's sh_size: an absurd count must hit the cap,
  // and one that overflows the table size must be refused, not wrapped.
  for (uint64_t count : {uint64_t{1} << 40, ~uint64_t{0} / 8}) {
    expect_error(with_mutation(image,
                               [&](auto& b) {
                                 store<uint16_t>(b, offsetof(Elf64_Ehdr, e_shnum), 0);
                                 store<uint64_t>(
                                     b, image.shdr_at(0) + offsetof(Elf64_Shdr, sh_size), count);
                               }),
                 "exceeds the cap");
  }
  // Every byte of the ELF header set to 0x00 / 0xff / +1: an error or a usable file.
  for (uint64_t off = 0; off < sizeof(Elf64_Ehdr); ++off) {
    for (int mode = 0; mode < 3; ++mode) {
      with_mutation(image, [&](auto& b) {
        b[off] = mode == 0 ? 0 : mode == 1 ? 0xff : static_cast<uint8_t>(b[off] + 1);
      });
    }
  }
}

TEST_P(MalformedTest, SectionHeaderFields) {
  Image image(GetParam());
  const uint32_t dynsym = image.find(SHT_DYNSYM);
  const uint64_t at = image.shdr_at(dynsym);
  auto field = [&](size_t offset) { return at + offset; };
  expect_error(with_mutation(image,
                             [&](auto& b) {
                               store<uint32_t>(b, field(offsetof(Elf64_Shdr, sh_link)),
                                               image.eh.e_shnum);
                             }),
               "sh_link");
  // sh_link pointing at a section that is not a string table (the symbol table itself).
  expect_error(with_mutation(image,
                             [&](auto& b) {
                               store<uint32_t>(b, field(offsetof(Elf64_Shdr, sh_link)), dynsym);
                             }),
               "not SHT_STRTAB");
  expect_error(
      with_mutation(
          image, [&](auto& b) { store<uint64_t>(b, field(offsetof(Elf64_Shdr, sh_entsize)), 23); }),
      "sh_entsize");
  expect_error(with_mutation(image,
                             [&](auto& b) {
                               Elf64_Shdr sh = image.shdr(dynsym);
                               store<uint64_t>(b, field(offsetof(Elf64_Shdr, sh_size)),
                                               sh.sh_size + 5);
                             }),
               "multiple of the entry size");
  expect_error(with_mutation(image,
                             [&](auto& b) {
                               store<uint64_t>(b, field(offsetof(Elf64_Shdr, sh_size)),
                                               ~uint64_t{0} - 0x1000);
                             }),
               "outside the file");
  expect_error(with_mutation(image,
                             [&](auto& b) {
                               store<uint64_t>(b, field(offsetof(Elf64_Shdr, sh_offset)),
                                               b.size() - 8);
                             }),
               "outside the file");
  expect_error(with_mutation(image,
                             [&](auto& b) {
                               store<uint32_t>(b, field(offsetof(Elf64_Shdr, sh_name)), 0x7fffffff);
                             }),
               "section name");
  // A symbol whose name lies outside the string table, and one whose range overflows.
  Elf64_Shdr sh = image.shdr(dynsym);
  const uint64_t sym1 = sh.sh_offset + sizeof(Elf64_Sym);
  expect_error(with_mutation(image,
                             [&](auto& b) {
                               store<uint32_t>(b, sym1 + offsetof(Elf64_Sym, st_name), 0x7fffffff);
                             }),
               "outside its string table");
  expect_error(with_mutation(image,
                             [&](auto& b) {
                               store<uint64_t>(b, sym1 + offsetof(Elf64_Sym, st_value), 0x1000);
                               store<uint64_t>(b, sym1 + offsetof(Elf64_Sym, st_size),
                                               ~uint64_t{0});
                             }),
               "overflows");
  // A string table with no terminating NUL at its end.
  expect_error(with_mutation(image,
                             [&](auto& b) {
                               Elf64_Shdr str = image.shdr(sh.sh_link);
                               b[str.sh_offset + str.sh_size - 1] = 'x';
                               store<uint32_t>(b, sym1 + offsetof(Elf64_Sym, st_name),
                                               static_cast<uint32_t>(str.sh_size - 1));
                             }),
               "NUL-terminated");
  // Every field of every section header: zeroed, all-ones, or off by one.
  for (uint32_t i = 0; i < image.eh.e_shnum; ++i) {
    for (size_t off = 0; off < sizeof(Elf64_Shdr); off += 4) {
      for (int mode = 0; mode < 3; ++mode) {
        with_mutation(image, [&](auto& b) {
          uint64_t pos = image.shdr_at(i) + off;
          uint32_t v = load<uint32_t>(b, pos);
          store<uint32_t>(b, pos, mode == 0 ? 0 : mode == 1 ? 0xffffffffu : v + 1);
        });
      }
    }
  }
}

TEST_P(MalformedTest, RandomByteFlips) {
  Image image(GetParam());
  std::mt19937_64 rng(0x1f2e3d4c);
  // Mutate the bytes that matter most: headers and the symbol/string/note/dynamic tables.
  std::vector<std::pair<uint64_t, uint64_t>> ranges = {
      {0, sizeof(Elf64_Ehdr)},
      {image.eh.e_phoff, uint64_t{image.eh.e_phnum} * sizeof(Elf64_Phdr)},
      {image.eh.e_shoff, uint64_t{image.eh.e_shnum} * sizeof(Elf64_Shdr)}};
  for (uint32_t i = 0; i < image.eh.e_shnum; ++i) {
    Elf64_Shdr sh = image.shdr(i);
    if (sh.sh_type == SHT_NOTE || sh.sh_type == SHT_DYNAMIC || sh.sh_type == SHT_DYNSYM) {
      ranges.push_back({sh.sh_offset, sh.sh_size});
    }
  }
  std::vector<uint8_t> copy = image.bytes;
  for (int round = 0; round < 300; ++round) {
    std::vector<std::pair<uint64_t, uint8_t>> undo;
    for (int flips = 0; flips < 4; ++flips) {
      const auto& [start, len] = ranges[rng() % ranges.size()];
      if (len == 0) continue;
      uint64_t pos = start + rng() % len;
      undo.push_back({pos, copy[pos]});
      copy[pos] = static_cast<uint8_t>(rng());
    }
    try_open(copy);
    for (auto it = undo.rbegin(); it != undo.rend(); ++it) copy[it->first] = it->second;
  }
}

INSTANTIATE_TEST_SUITE_P(Real, MalformedTest,
                         ::testing::Values("/usr/bin/luajit",
                                           test::fixture("arm64/usr/lib/aarch64-linux-gnu/"
                                                         "libluajit-5.1.so.2")),
                         [](const auto& info) {
                           return info.index == 0 ? std::string("luajit_amd64")
                                                  : std::string("libluajit_arm64");
                         });

// A string table over the 16 MiB cap, made inside a real 20 MB binary (tarantool) so the table
// itself lies inside the file and only the cap can reject it.
TEST(MalformedLarge, StringTableOverCap) {
  Image image("/usr/bin/tarantool");
  ASSERT_GT(image.bytes.size(), (17u << 20));
  const uint32_t symtab = image.find(SHT_SYMTAB);
  const uint32_t strtab = image.shdr(symtab).sh_link;
  expect_error(with_mutation(image,
                             [&](auto& b) {
                               uint64_t at = image.shdr_at(strtab);
                               store<uint64_t>(b, at + offsetof(Elf64_Shdr, sh_offset), 0);
                               store<uint64_t>(b, at + offsetof(Elf64_Shdr, sh_size), 17u << 20);
                             }),
               "16 MiB cap");
}

}  // namespace
}  // namespace ljprof::elf
