// Malformed cores made from a real one (a kernel core of a luajit that aborts itself): every
// corruption gives a named error or, for lost memory, reads that fail with one — never a crash
// or a wrong byte (this suite also runs under ASan+UBSan).
#include <elf.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string_view>

#include "core/core_file.h"
#include "core/core_fixtures.h"
#include "support/test_support.h"

namespace ljprof::core {
namespace {

// The test's own walk of the core's layout (from <elf.h>), to find what to corrupt.
struct NoteAt {
  uint64_t header = 0;  // file offset of the Elf64_Nhdr
  uint32_t type = 0;
  uint32_t descsz = 0;
  uint64_t desc = 0;  // file offset of the descriptor
};

struct Layout {
  Elf64_Ehdr eh{};
  std::vector<Elf64_Phdr> phdrs;
  uint64_t note_offset = 0, note_size = 0;
  std::vector<NoteAt> notes;

  const NoteAt& note(uint32_t type) const {
    for (const NoteAt& n : notes) {
      if (n.type == type) return n;
    }
    throw std::runtime_error("no such note");
  }
};

Layout layout_of(const std::vector<uint8_t>& bytes) {
  Layout l;
  std::memcpy(&l.eh, bytes.data(), sizeof(l.eh));
  for (uint32_t i = 0; i < l.eh.e_phnum; ++i) {
    Elf64_Phdr ph;
    std::memcpy(&ph, bytes.data() + l.eh.e_phoff + i * sizeof(ph), sizeof(ph));
    l.phdrs.push_back(ph);
    if (ph.p_type == PT_NOTE) {
      l.note_offset = ph.p_offset;
      l.note_size = ph.p_filesz;
    }
  }
  for (uint64_t pos = l.note_offset; pos < l.note_offset + l.note_size;) {
    Elf64_Nhdr nh;
    std::memcpy(&nh, bytes.data() + pos, sizeof(nh));
    NoteAt n{pos, nh.n_type, nh.n_descsz, pos + 12 + ((nh.n_namesz + 3) & ~3u)};
    l.notes.push_back(n);
    pos = n.desc + ((nh.n_descsz + 3) & ~3u);
  }
  return l;
}

template <typename T>
void put(std::vector<uint8_t>& bytes, uint64_t offset, T value) {
  std::memcpy(bytes.data() + offset, &value, sizeof(value));
}
template <typename T>
T get(const std::vector<uint8_t>& bytes, uint64_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof(value));
  return value;
}

class MalformedCore : public ::testing::Test {
 protected:
  void SetUp() override {
    test::MadeCore made = test::kernel_core(
        dir_.path(), {"/usr/bin/luajit", "-e",
                      "local ffi=require'ffi' ffi.cdef'void abort(void);' ffi.C.abort()"});
    ASSERT_FALSE(made.core.empty()) << made.error;
    core_path_ = made.core;
    bytes_ = test::read_file(made.core);
    layout_ = layout_of(bytes_);
    ASSERT_GT(layout_.notes.size(), 4u);
  }

  Result<CoreFile> open(const std::vector<uint8_t>& bytes, bool files = true) {
    CoreOptions options;
    options.open_mapped_files = files;
    return CoreFile::from_memory(bytes, "corrupt-core", options);
  }

  void expect_error(const std::vector<uint8_t>& bytes, const std::string& needle) {
    auto r = open(bytes);
    ASSERT_FALSE(r.ok()) << "accepted; expected an error with '" << needle << "'";
    EXPECT_NE(r.message().find(needle), std::string::npos) << r.message();
    EXPECT_EQ(r.message().rfind("corrupt-core: ", 0), 0u) << r.message();
  }

  test::TempDir dir_;
  std::string core_path_;
  std::vector<uint8_t> bytes_;
  Layout layout_;
};

TEST_F(MalformedCore, TheUncorruptedCoreOpens) {
  auto r = open(bytes_);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_TRUE(r->diagnostics().empty()) << r->diagnostics()[0];
}

TEST_F(MalformedCore, TruncatedInsideTheNotes) {
  bytes_.resize(layout_.note_offset + layout_.note_size / 2);
  expect_error(bytes_, "truncated core: PT_NOTE at offset");
}

TEST_F(MalformedCore, TruncatedInsideTheProgramHeaders) {
  bytes_.resize(sizeof(Elf64_Ehdr) + 10);
  expect_error(bytes_, "program header table");
}

TEST_F(MalformedCore, TruncatedMemoryIsUnreadableNotTakenFromTheFile) {
  // The last PT_LOAD with file bytes: cut the core one page into it.
  const Elf64_Phdr* cut = nullptr;
  for (const Elf64_Phdr& ph : layout_.phdrs) {
    if (ph.p_type == PT_LOAD && ph.p_filesz >= 0x2000) cut = &ph;
  }
  ASSERT_NE(cut, nullptr);
  const Elf64_Phdr seg = *cut;
  bytes_.resize(seg.p_offset + 0x1000);
  auto r = open(bytes_);
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_FALSE(r->diagnostics().empty());
  EXPECT_NE(r->diagnostics()[0].find("core file truncated"), std::string::npos)
      << r->diagnostics()[0];
  uint8_t buf[16];
  EXPECT_TRUE(r->read(seg.p_vaddr + 0x800, buf, sizeof(buf)).ok());
  for (uint64_t addr : {seg.p_vaddr + 0xff8, seg.p_vaddr + 0x1800}) {
    auto lost = r->read(addr, buf, sizeof(buf));
    ASSERT_FALSE(lost.ok()) << std::hex << addr;
    EXPECT_NE(lost.message().find("the core file is truncated"), std::string::npos)
        << lost.message();
  }
}

TEST_F(MalformedCore, NoteSizeBeyondTheCap) {
  put<uint32_t>(bytes_, layout_.notes[0].header + 4, 0xfffffff0u);
  expect_error(bytes_, "exceeds the cap");
}

TEST_F(MalformedCore, NoteRunningPastItsSegment) {
  const NoteAt& last = layout_.notes.back();
  put<uint32_t>(bytes_, last.header + 4, last.descsz + 64);
  expect_error(bytes_, "runs past the end of its PT_NOTE");
}

TEST_F(MalformedCore, PrstatusOfTheWrongSize) {
  // NT_PRPSINFO (136 bytes) relabelled as NT_PRSTATUS (336 bytes on x86-64).
  put<uint32_t>(bytes_, layout_.note(NT_PRPSINFO).header + 8, NT_PRSTATUS);
  expect_error(bytes_, "NT_PRSTATUS at offset");
  expect_error(bytes_, "136 bytes, expected 336");
}

TEST_F(MalformedCore, NoThreads) {
  for (const NoteAt& n : layout_.notes) {
    if (n.type == NT_PRSTATUS) put<uint32_t>(bytes_, n.header + 8, 0x7777);
  }
  expect_error(bytes_, "no NT_PRSTATUS");
}

TEST_F(MalformedCore, SecondAuxv) {
  // NT_SIGINFO (128 bytes, a valid auxv size) relabelled as a second NT_AUXV.
  put<uint32_t>(bytes_, layout_.note(NT_SIGINFO).header + 8, NT_AUXV);
  expect_error(bytes_, "second NT_AUXV");
}

TEST_F(MalformedCore, NtFileCounts) {
  const NoteAt nt = layout_.note(NT_FILE);
  const uint64_t count = get<uint64_t>(bytes_, nt.desc);
  ASSERT_GT(count, 2u);
  {
    auto b = bytes_;
    put<uint64_t>(b, nt.desc, uint64_t{1} << 40);
    expect_error(b, "mappings exceeds the cap");
  }
  {
    auto b = bytes_;
    put<uint64_t>(b, nt.desc, (nt.descsz - 16) / 24 + 1);  // the table alone overflows the note
    expect_error(b, "(truncated)");
  }
  {
    auto b = bytes_;
    put<uint64_t>(b, nt.desc + 8, 3);
    expect_error(b, "is not a power of two");
  }
}

TEST_F(MalformedCore, NtFileRanges) {
  const NoteAt nt = layout_.note(NT_FILE);
  const uint64_t entry0 = nt.desc + 16, entry1 = nt.desc + 16 + 24;
  {
    auto b = bytes_;
    put<uint64_t>(b, entry0 + 8, get<uint64_t>(b, entry0));  // end = start
    expect_error(b, ">= end");
  }
  {
    auto b = bytes_;
    put<uint64_t>(b, entry1, get<uint64_t>(b, entry0));  // second starts inside the first
    expect_error(b, "overlaps or precedes mapping 0");
  }
  {
    auto b = bytes_;
    const uint64_t count = get<uint64_t>(b, nt.desc);
    const uint64_t names = nt.desc + 16 + count * 24;
    std::memset(b.data() + names, 'A', nt.desc + nt.descsz - names);
    expect_error(b, "is not NUL-terminated");
  }
}

TEST_F(MalformedCore, OverlappingLoadSegments) {
  std::vector<uint32_t> loads;
  for (uint32_t i = 0; i < layout_.phdrs.size(); ++i) {
    if (layout_.phdrs[i].p_type == PT_LOAD) loads.push_back(i);
  }
  ASSERT_GE(loads.size(), 2u);
  const uint64_t vaddr_field = offsetof(Elf64_Phdr, p_vaddr);
  put<uint64_t>(bytes_, layout_.eh.e_phoff + loads[1] * sizeof(Elf64_Phdr) + vaddr_field,
                layout_.phdrs[loads[0]].p_vaddr);
  expect_error(bytes_, "overlaps PT_LOAD");
}

TEST_F(MalformedCore, BuildIdChangedInTheCoreRefusesTheFile) {
  // Flip one byte of libc's build-id in the core's copy of libc's first page: the on-disk libc no
  // longer matches and must not be used for its text.
  auto original = open(bytes_);
  ASSERT_TRUE(original.ok()) << original.message();
  const MappedFile* libc = nullptr;
  for (const MappedFile& f : original->files()) {
    if (f.path.find("/libc.so") != std::string::npos) libc = &f;
  }
  ASSERT_NE(libc, nullptr);
  const std::string hex = test::readelf_build_id(libc->resolved);
  ASSERT_FALSE(hex.empty());
  std::vector<uint8_t> id;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    id.push_back(std::stoul(hex.substr(i, 2), nullptr, 16));
  auto at = std::search(bytes_.begin(), bytes_.end(), id.begin(), id.end());
  ASSERT_NE(at, bytes_.end());
  *at ^= 0xff;

  auto r = open(bytes_);
  ASSERT_TRUE(r.ok()) << r.message();
  for (const MappedFile& f : r->files()) {
    if (f.path != libc->path) continue;
    EXPECT_EQ(f.check, FileCheck::Mismatch);
    EXPECT_FALSE(f.usable());
    EXPECT_NE(f.error.find("build-id mismatch"), std::string::npos) << f.error;
    EXPECT_NE(f.error.find(hex), std::string::npos) << f.error;
  }
  // $pc is in libc's text, which only the file holds.
  uint8_t buf[8];
  auto pc = r->read(r->threads()[0].pc, buf, sizeof(buf));
  ASSERT_FALSE(pc.ok());
  EXPECT_NE(pc.message().find("build-id mismatch"), std::string::npos) << pc.message();
}

// The NT_FILE path `name` is in (a NUL-terminated string of the note's names) with its byte at
// `name`'s position `at` replaced by `byte`, in `bytes`; returns the path as it was.
std::string corrupt_nt_file_path(std::vector<uint8_t>& bytes, const NoteAt& nt,
                                 std::string_view name, size_t at, char byte) {
  const std::string_view names(reinterpret_cast<const char*>(bytes.data()) + nt.desc, nt.descsz);
  const size_t hit = names.find(name);
  if (hit == std::string_view::npos) return "";
  const size_t start = names.rfind('\0', hit) + 1;
  const std::string path(names.substr(start, names.find('\0', hit) - start));
  bytes[nt.desc + hit + at] = static_cast<uint8_t>(byte);
  return path;
}

// A mapped file's path with bytes no real path has (`ljprof core --json` aborted with nlohmann's
// type_error 316 on such a core from a fuzzer): libc's gets 0xff for the "c" of "libc", libm's an
// ESC for its "m". Neither file is found then; the report names both with the byte as \xNN
// (common/printable.h), in JSON that parses and in text with no raw control byte, and exits 0.
TEST_F(MalformedCore, NtFilePathWithBadBytesIsReportedAsPrintableText) {
  const NoteAt nt = layout_.note(NT_FILE);
  const std::string libc = corrupt_nt_file_path(bytes_, nt, "/libc.so", 4, '\xff');
  const std::string libm = corrupt_nt_file_path(bytes_, nt, "/libm.so", 4, '\x1b');
  ASSERT_FALSE(libc.empty());
  ASSERT_FALSE(libm.empty());
  // By the rule: the replaced byte as four characters, the rest of the path as it was.
  const size_t c = libc.find("/libc.so") + 4, m = libm.find("/libm.so") + 4;
  const std::string libc_shown = libc.substr(0, c) + "\\xff" + libc.substr(c + 1);
  const std::string libm_shown = libm.substr(0, m) + "\\x1b" + libm.substr(m + 1);
  const std::string path = dir_.file("bad-paths.core");
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes_.data()), static_cast<long>(bytes_.size()));
  }
  auto no_control_bytes = [](const std::string& out) {
    return std::none_of(out.begin(), out.end(), [](char ch) {
      return (static_cast<unsigned char>(ch) < 0x20 && ch != '\n') || ch == 0x7f;
    });
  };

  const test::CommandResult json = test::run({test::ljprof_bin(), "core", "--json", path});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  EXPECT_TRUE(no_control_bytes(json.out));
  nlohmann::json doc;
  ASSERT_NO_THROW(doc = nlohmann::json::parse(json.out)) << json.out.substr(0, 2000);
  EXPECT_FALSE(doc["luajit"].is_null()) << doc["luajit_error"];
  EXPECT_FALSE(doc["threads"].empty());
  std::vector<std::string> unusable;
  for (const auto& f : doc["unusable_files"]) {
    unusable.push_back(f["path"]);
    EXPECT_FALSE(f["error"].get<std::string>().empty());
    ASSERT_FALSE(f["tried"].empty());
    EXPECT_EQ(f["tried"].back(), f["path"]);  // the recorded path is tried last
  }
  std::sort(unusable.begin(), unusable.end());
  std::vector<std::string> expected = {libc_shown, libm_shown};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(unusable, expected) << json.out.substr(0, 4000);

  const test::CommandResult text = test::run({test::ljprof_bin(), "core", path});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_TRUE(no_control_bytes(text.out));
  EXPECT_EQ(text.out.find('\xff'), std::string::npos);
  for (const std::string& shown : {libc_shown, libm_shown}) {
    EXPECT_NE(text.out.find("warning: mapped file " + shown + " not used: "), std::string::npos)
        << text.out.substr(0, 2000);
  }
}

// Bounded random corruption of the headers and notes: any outcome but a crash, UB or an
// out-of-bounds read (checked by the ASan+UBSan build) is acceptable.
TEST_F(MalformedCore, RandomCorruptionOfHeadersAndNotes) {
  std::mt19937_64 rng(20261202);
  const uint64_t span = layout_.note_offset + layout_.note_size;
  uint32_t accepted = 0;
  std::vector<uint8_t> b = bytes_;
  for (int round = 0; round < 1500; ++round) {
    std::memcpy(b.data(), bytes_.data(), span);  // only headers and notes are ever edited
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const uint64_t pos = rng() % (span - 4);
      switch (rng() % 3) {
        case 0:
          b[pos] = static_cast<uint8_t>(rng());
          break;
        case 1:
          put<uint32_t>(b, pos, static_cast<uint32_t>(rng()));
          break;
        default:
          put<uint32_t>(b, pos, get<uint32_t>(b, pos) + static_cast<uint32_t>(rng() % 64));
      }
    }
    std::vector<uint8_t> cut;
    if (rng() % 8 == 0) cut.assign(b.begin(), b.begin() + static_cast<long>(rng() % span));
    auto r = open(cut.empty() ? b : cut, /*files=*/false);
    if (!r.ok()) {
      EXPECT_FALSE(r.message().empty());
      continue;
    }
    ++accepted;
    uint8_t buf[64];
    for (const Thread& t : r->threads()) {
      (void)r->read(t.pc, buf, sizeof(buf));
      (void)r->read(t.sp - 8, buf, sizeof(buf));
    }
    for (const Mapping& m : r->mappings()) (void)r->read(m.end - 8, buf, sizeof(buf));
  }
  EXPECT_GT(accepted, 0u);  // some corruptions (e.g. in register values) are not detectable
}

}  // namespace
}  // namespace ljprof::core
