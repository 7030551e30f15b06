// Malformed CFI built from the real .eh_frame of Debian's libluajit-5.1.so.2: each corruption
// must give a named error (section, offset, rule) and no crash, and never a row from the
// corrupted entry. The layout facts used to place a corruption (first CIE "zR" with data 0x1b,
// first FDE's instructions) are asserted against readelf before patching.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <regex>

#include "cfi/cfi.h"
#include "elf/elf_file.h"
#include "support/test_support.h"

namespace ljprof::cfi {
namespace {

const char* const kLib = "/usr/lib/x86_64-linux-gnu/libluajit-5.1.so.2";

class Malformed : public ::testing::Test {
 protected:
  void SetUp() override {
    original_ = test::read_file(kLib);
    auto file = elf::ElfFile::from_memory(original_, "libluajit");
    ASSERT_TRUE(file.ok()) << file.message();
    const elf::Section* eh = (*file)->section(".eh_frame");
    const elf::Section* hdr = (*file)->section(".eh_frame_hdr");
    ASSERT_NE(eh, nullptr);
    ASSERT_NE(hdr, nullptr);
    eh_ = eh->offset;
    hdr_ = hdr->offset;
    // readelf: the first entry is a CIE "zR" with augmentation data 1b; the second is an FDE
    // that uses it.
    auto r = test::run({"readelf", "-wN", "--debug-dump=frames", kLib});
    ASSERT_EQ(r.exit_code, 0);
    ASSERT_TRUE(std::regex_search(r.out, std::regex("00000000 [0-9a-f]+ 00000000 CIE\n"
                                                    "  Version:               1\n"
                                                    "  Augmentation:          \"zR\"")));
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.out, m,
                                  std::regex("\n00000018 [0-9a-f]+ 0000001c FDE cie=00000000 "
                                             "pc=([0-9a-f]+)\\.\\.([0-9a-f]+)")));
    fde_pc_ = std::stoull(m[1], nullptr, 16);
    ASSERT_EQ(original_[eh_ + 9], 'z');
    ASSERT_EQ(original_[eh_ + 10], 'R');
    ASSERT_EQ(original_[eh_ + 16], 0x1b);
  }

  // Applies `patch` to a copy and builds the table.
  Result<UnwindTable> build(const std::function<void(std::vector<uint8_t>&)>& patch) {
    bytes_ = original_;
    patch(bytes_);
    auto file = elf::ElfFile::from_memory(bytes_, "libluajit-patched");
    if (!file.ok()) return file.error();
    file_ = std::move(*file);
    // The other entry points must fail closed the same way, never crash.
    (void)list_fdes(*file_);
    (void)fde_row_at(*file_, fde_pc_);
    return build_unwind_table(*file_);
  }

  static void put32(std::vector<uint8_t>& b, uint64_t at, uint32_t v) {
    std::memcpy(&b[at], &v, 4);
  }

  // No row (before the first FDE) means no rule, like an Invalid row.
  static int hint_at(const UnwindTable& t, uint64_t pc) {
    const lj_cfi_row* r = t.row_at(pc);
    return r == nullptr ? LJ_CFI_INVALID : r->hint;
  }

  std::string fde_error_text(const UnwindTable& t) {
    std::string all;
    for (const FdeError& e : t.fde_errors()) all += e.message + "\n";
    return all;
  }

  std::vector<uint8_t> original_, bytes_;
  std::unique_ptr<elf::ElfFile> file_;
  uint64_t eh_ = 0, hdr_ = 0, fde_pc_ = 0;
};

TEST_F(Malformed, LengthOverflowFailsTheSection) {
  auto t = build([&](auto& b) { put32(b, eh_, 0x7ffffff0); });
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.message().find(".eh_frame+0x0"), std::string::npos) << t.message();
}

TEST_F(Malformed, TruncatedCieFailsTheSection) {
  auto t = build([&](auto& b) { put32(b, eh_, 4); });  // only the CIE id fits
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.message().find(".eh_frame+0x"), std::string::npos) << t.message();
}

TEST_F(Malformed, BadAugmentationFailsItsFdes) {
  auto t = build([&](auto& b) { b[eh_ + 10] = 'Q'; });
  ASSERT_TRUE(t.ok()) << t.message();
  std::string errors = fde_error_text(*t);
  EXPECT_NE(errors.find("CIE at .eh_frame+0x0: unknown augmentation character 'Q'"),
            std::string::npos)
      << errors;
  EXPECT_NE(errors.find("FDE at .eh_frame+0x18"), std::string::npos) << errors;
  EXPECT_EQ(hint_at(*t, fde_pc_), LJ_CFI_INVALID);
}

TEST_F(Malformed, BadPointerEncodingFailsItsFdes) {
  auto t = build([&](auto& b) { b[eh_ + 16] = 0x0f; });
  ASSERT_TRUE(t.ok()) << t.message();
  std::string errors = fde_error_text(*t);
  EXPECT_NE(errors.find("pointer encoding 0x0f: unknown value format"), std::string::npos)
      << errors;
  EXPECT_EQ(hint_at(*t, fde_pc_), LJ_CFI_INVALID);
}

TEST_F(Malformed, RunawayAdvanceLocFailsThatFde) {
  // FDE 0x18 (zR, sdata4 pointers, empty augmentation): instructions at +17. Replace the
  // first 5 bytes by DW_CFA_advance_loc4 0x7fffffff.
  auto t = build([&](auto& b) {
    uint64_t insn = eh_ + 0x18 + 17;
    ASSERT_EQ(b[insn - 1], 0);  // augmentation length 0
    b[insn] = 0x04;
    put32(b, insn + 1, 0x7fffffff);
  });
  ASSERT_TRUE(t.ok()) << t.message();
  std::string errors = fde_error_text(*t);
  EXPECT_NE(errors.find("FDE at .eh_frame+0x18"), std::string::npos) << errors;
  EXPECT_NE(errors.find("past the FDE end"), std::string::npos) << errors;
  EXPECT_EQ(hint_at(*t, fde_pc_), LJ_CFI_INVALID);
}

TEST_F(Malformed, DanglingCiePointerFailsThatFde) {
  auto t = build([&](auto& b) { put32(b, eh_ + 0x1c, 0x10); });  // points at .eh_frame+0xc
  ASSERT_TRUE(t.ok()) << t.message();
  std::string errors = fde_error_text(*t);
  EXPECT_NE(errors.find("FDE at .eh_frame+0x18: CIE pointer 0xc does not name a CIE"),
            std::string::npos)
      << errors;
}

TEST_F(Malformed, EhFrameHdrDisagreeingWithTheSectionFailsTheTable) {
  auto t = build([&](auto& b) {
    uint32_t fde;
    std::memcpy(&fde, &b[hdr_ + 16], 4);
    put32(b, hdr_ + 16, fde + 8);  // first table entry names the middle of an entry
  });
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.message().find(".eh_frame_hdr+0xc"), std::string::npos) << t.message();
}

TEST_F(Malformed, EveryTruncationOfTheFirstEntriesIsHandled) {
  // Shrink the first CIE's length byte by byte: each either fails with a named error or
  // builds; nothing crashes (run under ASan/UBSan too).
  for (uint32_t len = 0; len < 0x14; ++len) {
    auto t = build([&](auto& b) { put32(b, eh_, len); });
    if (!t.ok()) {
      EXPECT_NE(t.message().find(".eh_frame"), std::string::npos) << t.message();
    }
  }
}

}  // namespace
}  // namespace ljprof::cfi
