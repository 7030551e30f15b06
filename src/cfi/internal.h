// Internals shared by the cfi sources: libelf/libdw handles over an ElfFile's bytes and
// encoded-pointer decoding.
#pragma once

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <libelf.h>

#include <cstdint>
#include <memory>
#include <string>

#include "cfi/cfi.h"

namespace ljprof::cfi::internal {

// An Elf* over the ElfFile's mapping (libelf never writes to a read-only image it did not
// open for writing, so the const_cast in the implementation is safe).
class ElfHandle {
 public:
  static Result<ElfHandle> open(const elf::ElfFile& file);
  ElfHandle(ElfHandle&& other) noexcept : elf_(other.elf_) { other.elf_ = nullptr; }
  ElfHandle& operator=(ElfHandle&&) = delete;
  ElfHandle(const ElfHandle&) = delete;
  ~ElfHandle();
  Elf* get() const { return elf_; }
  // The raw data of section `index` (as validated by ElfFile), or an error.
  Result<Elf_Data*> section_data(const elf::ElfFile& file, uint32_t index) const;

 private:
  explicit ElfHandle(Elf* elf) : elf_(elf) {}
  Elf* elf_ = nullptr;
};

// Where an encoded pointer sits, for DW_EH_PE_pcrel / datarel.
struct PointerContext {
  uint64_t field_vaddr = 0;           // link-time address of the encoded field (pcrel base)
  std::optional<uint64_t> data_base;  // DW_EH_PE_datarel base, when the section defines one
  const char* section = "";
  uint64_t section_offset = 0;  // of the field, for messages
};

// Decodes one DW_EH_PE_* encoded pointer at [*p, end) and advances *p. Hand-written because
// libdw exposes no decoder for FDE ranges or CIE personality pointers (it keeps its own
// private). DW_EH_PE_indirect is rejected here; callers that allow it (personality, LSDA)
// strip the bit and dereference through the ElfFile. `value_only` drops the application
// (address_range uses only the format of the FDE encoding).
Result<uint64_t> read_encoded(uint8_t encoding, const uint8_t** p, const uint8_t* end,
                              const PointerContext& ctx, bool value_only = false);

Result<uint64_t> read_uleb(const uint8_t** p, const uint8_t* end, const char* what);

std::string libdw_error();

}  // namespace ljprof::cfi::internal

namespace ljprof::cfi::internal {

// .eh_frame_hdr must agree with the enumerated FDEs, since libdw looks FDEs up through it
// (table.cc). OK when the file has no .eh_frame_hdr.
Status check_eh_frame_hdr(const elf::ElfFile& file, const std::vector<FdeSummary>& fdes,
                          const std::vector<FdeError>& errors);

// The section scan without running FDE programs (eh_frame.cc).
Result<CfiScan> scan_cfi_entries(const elf::ElfFile& file, CfiSection kind);

}  // namespace ljprof::cfi::internal
