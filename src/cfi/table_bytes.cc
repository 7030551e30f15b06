// UnwindTable <-> bytes for the on-disk table cache. Hand-written: the reader must fail closed
// on a cache file that is truncated, stale or written by someone else, checking each count
// against the bytes left before it allocates.
#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <cstring>
#include <type_traits>

#include "cfi/cfi.h"

namespace ljprof::cfi {

namespace {

constexpr uint32_t kMaxMessageBytes = 1u << 12;

class Writer {
 public:
  template <typename T>
  void put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out.insert(out.end(), p, p + sizeof(T));
  }
  template <typename T>
  void put_all(std::span<const T> items) {
    put(static_cast<uint64_t>(items.size()));
    const auto* p = reinterpret_cast<const uint8_t*>(items.data());
    out.insert(out.end(), p, p + items.size_bytes());
  }
  std::vector<uint8_t> out;
};

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  template <typename T>
  Status get(T* v, const char* what) {
    if (bytes_.size() - at_ < sizeof(T)) return truncated(what);
    std::memcpy(v, bytes_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return Ok{};
  }
  // A count of items of `item_bytes` each, at most `cap` and no more than the bytes left hold.
  Status count(uint64_t* n, size_t item_bytes, uint64_t cap, const char* what) {
    LJ_TRY(get(n, what));
    if (*n > cap || *n > (bytes_.size() - at_) / item_bytes) {
      return make_error("table bytes at {}: {} count {} exceeds the cap {} or the bytes left", at_,
                        what, *n, cap);
    }
    return Ok{};
  }
  template <typename T>
  Status get_all(std::vector<T>* items, uint64_t cap, const char* what) {
    uint64_t n = 0;
    LJ_TRY(count(&n, sizeof(T), cap, what));
    items->resize(n);
    if (n > 0)
      std::memcpy(items->data(), bytes_.data() + at_, n * sizeof(T));  // data() may be null
    at_ += n * sizeof(T);
    return Ok{};
  }
  Status get_string(std::string* s, const char* what) {
    uint64_t n = 0;
    LJ_TRY(count(&n, 1, kMaxMessageBytes, what));
    s->assign(reinterpret_cast<const char*>(bytes_.data() + at_), n);
    at_ += n;
    return Ok{};
  }
  size_t offset() const { return at_; }
  bool done() const { return at_ == bytes_.size(); }

 private:
  Status truncated(const char* what) const {
    return make_error("table bytes at {}: truncated in {}", at_, what);
  }
  std::span<const uint8_t> bytes_;
  size_t at_ = 0;
};

Status check_rows(std::span<const lj_cfi_row> rows) {
  for (size_t i = 0; i < rows.size(); ++i) {
    const lj_cfi_row& r = rows[i];
    if (i > 0 && r.pc_start <= rows[i - 1].pc_start) {
      return make_error("table row {}: pc {:#x} does not follow {:#x}", i, r.pc_start,
                        rows[i - 1].pc_start);
    }
    if (r.hint > LJ_CFI_VM_CUR_L_SAVED || r.cfa_base > LJ_CFI_REG_BX ||
        r.ra_rule > LJ_CFI_RULE_UNKNOWN || r.fp_rule > LJ_CFI_RULE_UNKNOWN ||
        r.bx_rule > LJ_CFI_BX_AT_CFA) {
      return make_error("table row {}: unknown hint, CFA base or rule", i);
    }
    if (r.hint == LJ_CFI_SIGNAL && (r.ra_rule < LJ_CFI_SIGCONTEXT_X86_64 ||
                                    r.ra_rule > LJ_CFI_SIGCONTEXT_AARCH64 || r.cfa_offset < 0)) {
      return make_error("table row {}: a signal row with an unknown sigcontext layout", i);
    }
  }
  if (!rows.empty() && rows.back().hint != LJ_CFI_INVALID) {
    return make_error("table: the last row is not the Invalid end row");
  }
  return Ok{};
}

}  // namespace

std::vector<uint8_t> UnwindTable::to_bytes() const {
  // Sized before it is written: a table's bytes grown by doubling held up to twice their size
  // at the peak of the recorder's attach (a 100 k-row library's are 3 MB).
  size_t size = 2 + 5 * sizeof(uint64_t) + rows_.size() * sizeof(lj_cfi_row) +
                row_fde_offsets_.size() * sizeof(uint64_t) +
                functions_.size() * sizeof(FunctionRange);
  for (const FdeError& e : fde_errors_) {
    size += 1 + 4 * sizeof(uint64_t) + std::min<size_t>(e.message.size(), kMaxMessageBytes);
  }
  Writer w;
  w.out.reserve(size);
  w.put(static_cast<uint8_t>(arch_));
  w.put(static_cast<uint8_t>(section_));
  w.put(fde_count_);
  w.put_all(std::span<const lj_cfi_row>(rows_));
  w.put_all(std::span<const uint64_t>(row_fde_offsets_));
  w.put_all(std::span<const FunctionRange>(functions_));
  w.put(static_cast<uint64_t>(fde_errors_.size()));
  for (const FdeError& e : fde_errors_) {
    w.put(static_cast<uint8_t>(e.section));
    w.put(e.section_offset);
    w.put(e.pc_begin);
    w.put(e.pc_end);
    const std::string_view m = std::string_view(e.message).substr(0, kMaxMessageBytes);
    w.put(static_cast<uint64_t>(m.size()));
    w.out.insert(w.out.end(), m.begin(), m.end());
  }
  assert(w.out.size() == size);
  return std::move(w.out);
}

Result<UnwindTable> UnwindTable::from_bytes(std::span<const uint8_t> bytes) {
  UnwindTable t;
  Reader r(bytes);
  uint8_t arch = 0, section = 0;
  LJ_TRY(r.get(&arch, "arch"));
  LJ_TRY(r.get(&section, "section"));
  if (arch > static_cast<uint8_t>(elf::Arch::AArch64) ||
      section > static_cast<uint8_t>(CfiSection::DebugFrame)) {
    return make_error("table bytes: unknown arch {} or section {}", arch, section);
  }
  t.arch_ = static_cast<elf::Arch>(arch);
  t.section_ = static_cast<CfiSection>(section);
  LJ_TRY(r.get(&t.fde_count_, "FDE count"));
  LJ_TRY(r.get_all(&t.rows_, CfiLimits::kMaxRows + 1, "rows"));
  LJ_TRY(check_rows(t.rows_));
  LJ_TRY(r.get_all(&t.row_fde_offsets_, CfiLimits::kMaxRows + 1, "row origins"));
  if (t.row_fde_offsets_.size() != t.rows_.size()) {
    return make_error("table bytes: {} row origins for {} rows", t.row_fde_offsets_.size(),
                      t.rows_.size());
  }
  LJ_TRY(r.get_all(&t.functions_, 2 * CfiLimits::kMaxFdes, "function ranges"));
  for (size_t i = 0; i < t.functions_.size(); ++i) {
    const FunctionRange& f = t.functions_[i];
    if (f.begin >= f.end || (i > 0 && f.begin < t.functions_[i - 1].end)) {
      return make_error("table bytes: function range {} ({:#x}..{:#x}) is empty or overlaps", i,
                        f.begin, f.end);
    }
  }
  uint64_t errors = 0;
  constexpr size_t kErrorHeadBytes = 1 + 8 + 8 + 8 + 8;
  LJ_TRY(r.count(&errors, kErrorHeadBytes, 2 * CfiLimits::kMaxFdes, "FDE errors"));
  t.fde_errors_.resize(errors);
  for (FdeError& e : t.fde_errors_) {
    uint8_t s = 0;
    LJ_TRY(r.get(&s, "FDE error section"));
    if (s > static_cast<uint8_t>(CfiSection::DebugFrame)) {
      return make_error("table bytes at {}: unknown FDE error section {}", r.offset(), s);
    }
    e.section = static_cast<CfiSection>(s);
    LJ_TRY(r.get(&e.section_offset, "FDE error offset"));
    LJ_TRY(r.get(&e.pc_begin, "FDE error range"));
    LJ_TRY(r.get(&e.pc_end, "FDE error range"));
    LJ_TRY(r.get_string(&e.message, "FDE error message"));
  }
  if (!r.done()) {
    return make_error("table bytes: {} bytes after the table", bytes.size() - r.offset());
  }
  return t;
}

}  // namespace ljprof::cfi
