// The walker table: FDE rows -> sorted lj_cfi_row with Invalid gaps, Stop roots, the caller's
// overlays and delta compaction.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "cfi/internal.h"
#include "common/bounds.h"

namespace ljprof::cfi {

namespace {

constexpr uint64_t kNoFde = std::numeric_limits<uint64_t>::max();

bool fits_i32(int64_t v) {
  return v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max();
}
bool fits_i16(int64_t v) {
  return v >= std::numeric_limits<int16_t>::min() && v <= std::numeric_limits<int16_t>::max();
}

// Converts one full rule into the walker's form; anything the walker cannot evaluate with
// sp/fp/pc and plain memory reads becomes Invalid. An explicitly undefined return address is
// the ABI's mark of the outermost frame (x86-64 psABI §3.7 / AArch64 AAPCS64 unwinding: "the
// end of the stack"): _start, clone/clone3 thread starts, Tarantool's coro_init. Those rows
// become Stop.
lj_cfi_row compact(const CfiRow& r, elf::Arch arch) {
  ArchRegs regs = arch_regs(arch);
  lj_cfi_row row = invalid_row(r.pc_begin);
  if (r.cfa.kind != CfaRule::Kind::RegOffset || !fits_i32(r.cfa.offset)) return row;
  if (r.cfa.reg == regs.sp) {
    row.cfa_base = LJ_CFI_REG_SP;
  } else if (r.cfa.reg == regs.fp) {
    row.cfa_base = LJ_CFI_REG_FP;
  } else if (arch == elf::Arch::X86_64 && r.cfa.reg == kX86DwarfRbx) {
    row.cfa_base = LJ_CFI_REG_BX;
  } else {
    return row;
  }
  row.cfa_offset = static_cast<int32_t>(r.cfa.offset);
  switch (r.ra.kind) {
    case RegisterRule::Kind::AtCfa:
    case RegisterRule::Kind::ValCfa:
      if (!fits_i16(r.ra.offset)) return row;
      row.ra_rule =
          r.ra.kind == RegisterRule::Kind::AtCfa ? LJ_CFI_RULE_AT_CFA : LJ_CFI_RULE_VAL_CFA;
      row.ra_offset = static_cast<int16_t>(r.ra.offset);
      break;
    case RegisterRule::Kind::SameValue:
      // AArch64: the RA is still in x30 (leaf code, prologue). x86-64 has no RA register.
      if (arch != elf::Arch::AArch64) return row;
      row.ra_rule = LJ_CFI_RULE_SAME;
      break;
    case RegisterRule::Kind::Undefined:
      row.ra_rule = LJ_CFI_RULE_UNDEFINED;
      break;
    default:
      return row;
  }
  switch (r.fp.kind) {
    case RegisterRule::Kind::SameValue:
      row.fp_rule = LJ_CFI_RULE_SAME;
      break;
    case RegisterRule::Kind::Undefined:
      row.fp_rule = LJ_CFI_RULE_UNDEFINED;
      break;
    case RegisterRule::Kind::AtCfa:
    case RegisterRule::Kind::ValCfa:
      if (fits_i16(r.fp.offset)) {
        row.fp_rule =
            r.fp.kind == RegisterRule::Kind::AtCfa ? LJ_CFI_RULE_AT_CFA : LJ_CFI_RULE_VAL_CFA;
        row.fp_offset = static_cast<int16_t>(r.fp.offset);
      } else {
        row.fp_rule = LJ_CFI_RULE_UNKNOWN;
      }
      break;
    default:
      row.fp_rule = LJ_CFI_RULE_UNKNOWN;
      break;
  }
  // rbx, for a caller's rbx-based CFA (cfi_row.h LJ_CFI_REG_BX): x86-64 only.
  if (arch == elf::Arch::X86_64 && r.bx.kind == RegisterRule::Kind::SameValue) {
    row.bx_rule = LJ_CFI_BX_SAME;
  } else if (arch == elf::Arch::X86_64 && r.bx.kind == RegisterRule::Kind::AtCfa &&
             fits_i16(r.bx.offset)) {
    row.bx_rule = LJ_CFI_BX_AT_CFA;
    row.bx_offset = static_cast<int16_t>(r.bx.offset);
  }
  row.hint = row.ra_rule == LJ_CFI_RULE_UNDEFINED ? LJ_CFI_STOP : LJ_CFI_OK;
  return row;
}

bool same_rule(const lj_cfi_row& a, const lj_cfi_row& b) {
  return a.hint == b.hint && a.cfa_base == b.cfa_base && a.cfa_offset == b.cfa_offset &&
         a.ra_rule == b.ra_rule && a.ra_offset == b.ra_offset && a.fp_rule == b.fp_rule &&
         a.fp_offset == b.fp_offset && a.bx_rule == b.bx_rule && a.bx_offset == b.bx_offset;
}

// Whether compaction drops `row` after `last`: the same rule, unless either is a Stop or Keep row
// (the ranges those overlays mark stay their own).
bool repeats(const lj_cfi_row& row, const lj_cfi_row& last) {
  const bool pinned = row.hint == LJ_CFI_STOP || row.hint == LJ_CFI_KEEP ||
                      last.hint == LJ_CFI_STOP || last.hint == LJ_CFI_KEEP;
  return !pinned && same_rule(row, last);
}

// Table under construction: rows sorted by pc_start plus the FDE each came from.
struct Builder {
  std::vector<lj_cfi_row> rows;
  std::vector<uint64_t> origins;

  size_t index_at(uint64_t pc) const {  // index of the row covering pc; rows must not be empty
    auto it = std::upper_bound(rows.begin(), rows.end(), pc,
                               [](uint64_t v, const lj_cfi_row& r) { return v < r.pc_start; });
    return it == rows.begin() ? 0 : static_cast<size_t>(it - rows.begin()) - 1;
  }

  // Makes a row start at pc (a copy of the row covering it), when pc is inside the table.
  void split(uint64_t pc) {
    if (rows.empty() || pc <= rows.front().pc_start || pc >= rows.back().pc_start) return;
    size_t i = index_at(pc);
    if (rows[i].pc_start == pc) return;
    lj_cfi_row copy = rows[i];
    copy.pc_start = pc;
    rows.insert(rows.begin() + static_cast<long>(i) + 1, copy);
    origins.insert(origins.begin() + static_cast<long>(i) + 1, origins[i]);
  }

  // Replaces [begin, end) by `row`, restoring the previous rule at `end`.
  void overlay(uint64_t begin, uint64_t end, lj_cfi_row row, uint64_t origin) {
    if (begin >= end) return;
    lj_cfi_row after = invalid_row(end);
    uint64_t after_origin = kNoFde;
    if (!rows.empty() && rows.front().pc_start <= end) {
      size_t i = index_at(end);
      after = rows[i];
      after_origin = origins[i];
      after.pc_start = end;
    }
    size_t lo = static_cast<size_t>(
        std::lower_bound(rows.begin(), rows.end(), begin,
                         [](const lj_cfi_row& r, uint64_t v) { return r.pc_start < v; }) -
        rows.begin());
    size_t hi = static_cast<size_t>(
        std::upper_bound(rows.begin(), rows.end(), end,
                         [](uint64_t v, const lj_cfi_row& r) { return v < r.pc_start; }) -
        rows.begin());
    rows.erase(rows.begin() + static_cast<long>(lo), rows.begin() + static_cast<long>(hi));
    origins.erase(origins.begin() + static_cast<long>(lo), origins.begin() + static_cast<long>(hi));
    row.pc_start = begin;
    rows.insert(rows.begin() + static_cast<long>(lo), {row, after});
    origins.insert(origins.begin() + static_cast<long>(lo), {origin, after_origin});
  }

  // Rows in [begin, end) with hint Ok take `hint` (the rules stay; the table's last row, past
  // every FDE, is never one of them).
  void rehint(uint64_t begin, uint64_t end, uint8_t hint) {
    split(begin);
    split(end);
    for (size_t i = 0; i + 1 < rows.size(); ++i) {
      if (rows[i].pc_start >= begin && rows[i].pc_start < end && rows[i].hint == LJ_CFI_OK) {
        rows[i].hint = hint;
      }
    }
  }

  void apply(const Overlay& o) {
    if (o.kind == Overlay::Kind::Hint) {
      rehint(o.begin, o.end, o.row.hint);
    } else {
      overlay(o.begin, o.end, o.row, kNoFde);
    }
  }
};

}  // namespace

lj_cfi_row invalid_row(uint64_t pc) {
  lj_cfi_row row{};
  row.pc_start = pc;
  row.hint = LJ_CFI_INVALID;
  row.ra_rule = LJ_CFI_RULE_UNKNOWN;
  row.fp_rule = LJ_CFI_RULE_UNKNOWN;
  return row;
}

lj_cfi_row sp_row(int32_t cfa, uint8_t fp_rule, int16_t fp_off, uint8_t hint) {
  lj_cfi_row r{};
  r.hint = hint;
  r.cfa_base = LJ_CFI_REG_SP;
  r.cfa_offset = cfa;
  r.ra_rule = LJ_CFI_RULE_AT_CFA;
  r.ra_offset = -8;
  r.fp_rule = fp_rule;
  r.fp_offset = fp_off;
  return r;
}

namespace internal {
// .eh_frame_hdr's binary-search table is what libdw uses to find an FDE by pc; a table that
// disagrees with the section would make libdw answer with another FDE's rows, so it must
// match the enumeration exactly or the whole table fails.
Status check_eh_frame_hdr(const elf::ElfFile& file, const std::vector<FdeSummary>& fdes,
                          const std::vector<FdeError>& errors) {
  const elf::Section* hdr = file.section(".eh_frame_hdr");
  const elf::Section* eh = file.section(".eh_frame");
  if (hdr == nullptr || eh == nullptr || !hdr->has_file_data()) return Ok{};
  auto bytes = file.section_data(*hdr);
  auto fail = [&](uint64_t off, const std::string& why) {
    return make_error("{}: .eh_frame_hdr+{:#x}: {}", file.path(), off, why);
  };
  if (bytes.size() < 4) return fail(0, "shorter than its 4-byte header");
  if (bytes[0] != 1) return fail(0, fmt::format("version {} (expected 1)", bytes[0]));
  const uint8_t ptr_enc = bytes[1], count_enc = bytes[2], table_enc = bytes[3];
  const uint8_t* p = bytes.data() + 4;
  const uint8_t* end = bytes.data() + bytes.size();
  auto at = [&](const uint8_t* q) { return static_cast<uint64_t>(q - bytes.data()); };
  internal::PointerContext ctx{hdr->addr + 4, hdr->addr, ".eh_frame_hdr", 4};
  auto eh_ptr = internal::read_encoded(ptr_enc, &p, end, ctx);
  if (!eh_ptr.ok()) return fail(4, eh_ptr.message());
  if (*eh_ptr != eh->addr) {
    return fail(
        4, fmt::format("eh_frame_ptr {:#x} is not .eh_frame's address {:#x}", *eh_ptr, eh->addr));
  }
  if (count_enc == DW_EH_PE_omit || table_enc == DW_EH_PE_omit) return Ok{};
  ctx.field_vaddr = hdr->addr + at(p);
  ctx.section_offset = at(p);
  auto count = internal::read_encoded(count_enc, &p, end, ctx);
  if (!count.ok()) return fail(at(p), count.message());
  if (table_enc != (DW_EH_PE_datarel | DW_EH_PE_sdata4)) {
    return fail(3, fmt::format("table encoding {:#04x} (expected datarel|sdata4)", table_enc));
  }
  if (*count > static_cast<uint64_t>(end - p) / 8) {
    return fail(at(p), fmt::format("fde_count {} runs past the section", *count));
  }
  std::vector<std::pair<uint64_t, uint64_t>> by_offset;  // section offset -> pc_begin
  by_offset.reserve(fdes.size());
  for (const FdeSummary& f : fdes) by_offset.emplace_back(f.section_offset, f.pc_begin);
  std::sort(by_offset.begin(), by_offset.end());
  std::vector<uint64_t> failed;
  for (const FdeError& e : errors) failed.push_back(e.section_offset);
  std::sort(failed.begin(), failed.end());
  uint64_t prev = 0;
  for (uint64_t i = 0; i < *count; ++i) {
    const uint8_t* entry = p;
    ctx.section_offset = at(p);
    auto loc = internal::read_encoded(table_enc, &p, end, ctx);
    auto fde = internal::read_encoded(table_enc, &p, end, ctx);
    if (!loc.ok() || !fde.ok()) return fail(at(entry), "truncated table entry");
    if (i > 0 && *loc < prev) return fail(at(entry), "table is not sorted by initial location");
    prev = *loc;
    if (*fde < eh->addr || *fde - eh->addr >= eh->size) {
      return fail(at(entry), fmt::format("FDE address {:#x} is outside .eh_frame", *fde));
    }
    uint64_t off = *fde - eh->addr;
    auto it =
        std::lower_bound(by_offset.begin(), by_offset.end(), std::make_pair(off, uint64_t{0}));
    if (it != by_offset.end() && it->first == off) {
      if (it->second != *loc) {
        return fail(at(entry), fmt::format("initial location {:#x} but the FDE at .eh_frame+{:#x} "
                                           "starts at {:#x}",
                                           *loc, off, it->second));
      }
    } else if (!std::binary_search(failed.begin(), failed.end(), off)) {
      return fail(at(entry), fmt::format("names .eh_frame+{:#x}, which is not an FDE", off));
    }
  }
  return Ok{};
}

}  // namespace internal

const char* hint_name(uint8_t hint) {
  switch (hint) {
    case LJ_CFI_OK:
      return "ok";
    case LJ_CFI_INVALID:
      return "invalid";
    case LJ_CFI_STOP:
      return "stop";
    case LJ_CFI_KEEP:
      return "keep";
    case LJ_CFI_VM_LEAF:
      return "vm-leaf";
    case LJ_CFI_VM_EMPTY:
      return "vm-empty";
    case LJ_CFI_VM_CUR_L:
      return "vm-cur-L";
    case LJ_CFI_VM_RETURNED:
      return "vm-returned";
    case LJ_CFI_VM_EXIT:
      return "vm-exit";
    case LJ_CFI_VM_LINK_PENDING:
      return "vm-link-pending";
    case LJ_CFI_SIGNAL:
      return "signal";
    case LJ_CFI_VM_CUR_L_SAVED:
      return "vm-cur-L-saved";
    default:
      return "bad-hint";
  }
}

std::string rule_text(uint8_t rule, int32_t offset, const char* reg) {
  switch (rule) {
    case LJ_CFI_RULE_SAME:
      return fmt::format("{}", reg);
    case LJ_CFI_RULE_UNDEFINED:
      return "undefined";
    case LJ_CFI_RULE_AT_CFA:
      return fmt::format("[cfa{:+d}]", offset);
    case LJ_CFI_RULE_VAL_CFA:
      return fmt::format("cfa{:+d}", offset);
    default:
      return "unknown";
  }
}

std::string describe_row(const lj_cfi_row& row, elf::Arch arch) {
  ArchRegs regs = arch_regs(arch);
  if (row.hint == LJ_CFI_INVALID) return "no rule";
  if (row.hint == LJ_CFI_SIGNAL) {
    return fmt::format("signal frame: sigcontext at {}{:+d}", regs.sp_name, row.cfa_offset);
  }
  const char* base = row.cfa_base == LJ_CFI_REG_SP   ? regs.sp_name
                     : row.cfa_base == LJ_CFI_REG_FP ? regs.fp_name
                                                     : "rbx";
  // rbx only where a frame saved it (where a caller's rbx-based CFA finds it).
  const std::string bx =
      row.bx_rule == LJ_CFI_BX_AT_CFA ? fmt::format(" rbx=[cfa{:+d}]", row.bx_offset) : "";
  return fmt::format("cfa={}{:+d} ra={} fp={}{}", base, row.cfa_offset,
                     rule_text(row.ra_rule, row.ra_offset, regs.ra_name),
                     rule_text(row.fp_rule, row.fp_offset, regs.fp_name), bx);
}

void UnwindTable::release_rows() {
  std::vector<lj_cfi_row>().swap(rows_);
  std::vector<uint64_t>().swap(row_fde_offsets_);
}

uint64_t UnwindTable::heap_bytes() const {
  uint64_t bytes =
      rows_.capacity() * sizeof(lj_cfi_row) + row_fde_offsets_.capacity() * sizeof(uint64_t) +
      fde_errors_.capacity() * sizeof(FdeError) + overlays_.capacity() * sizeof(Overlay) +
      functions_.capacity() * sizeof(FunctionRange);
  for (const FdeError& e : fde_errors_) bytes += e.message.capacity();
  for (const Overlay& o : overlays_) bytes += o.what.capacity() + o.how.capacity();
  return bytes;
}

const lj_cfi_row* UnwindTable::row_at(uint64_t pc) const {
  auto it = std::upper_bound(rows_.begin(), rows_.end(), pc,
                             [](uint64_t v, const lj_cfi_row& r) { return v < r.pc_start; });
  if (it == rows_.begin()) return nullptr;
  return &*(it - 1);
}

// A PLT row's rule depends on the pc within each 16-byte entry: CFA = rsp + 8 before byte N
// (the `jmp *GOT` of a bound entry, or the lazy path before its `push`), rsp + 16 from N on
// (after `push $index`, jumping to PLT0). The RA is at CFA - 8 either way and rbp is untouched.
Status expand_plt_rows(const elf::ElfFile& file, const CfiRow& r, uint64_t fde_offset, Builder& b) {
  // A .plt of a large executable has a few thousand entries; more is not a PLT.
  constexpr uint64_t kMaxPltBytes = 1u << 20;
  if (r.pc_end <= r.pc_begin || r.pc_end - r.pc_begin > kMaxPltBytes) {
    return make_error("{}: PLT CFA expression over {:#x}..{:#x} is larger than {} bytes",
                      file.path(), r.pc_begin, r.pc_end, kMaxPltBytes);
  }
  if (r.ra.kind != RegisterRule::Kind::AtCfa || r.ra.offset != -8 ||
      r.fp.kind != RegisterRule::Kind::SameValue) {
    b.rows.push_back(compact(r, file.arch()));  // not the PLT's RA/rbp rules: no rule
    b.origins.push_back(fde_offset);
    return Ok{};
  }
  const uint64_t split = static_cast<uint64_t>(r.cfa.offset);
  auto push = [&](uint64_t pc, int32_t cfa_offset) {
    lj_cfi_row row = sp_row(cfa_offset, LJ_CFI_RULE_SAME, 0, LJ_CFI_OK);
    row.pc_start = pc;
    b.rows.push_back(row);
    b.origins.push_back(fde_offset);
  };
  uint64_t pc = r.pc_begin;
  while (pc < r.pc_end) {
    const uint64_t entry = pc & ~uint64_t{15};
    const bool pushed = pc - entry >= split;
    push(pc, pushed ? 16 : 8);
    pc = pushed ? entry + 16 : entry + split;
  }
  return Ok{};
}

const UnwindTable::FunctionRange* UnwindTable::function_at(uint64_t pc) const {
  auto it = std::upper_bound(functions_.begin(), functions_.end(), pc,
                             [](uint64_t v, const FunctionRange& r) { return v < r.begin; });
  if (it == functions_.begin()) return nullptr;
  --it;
  return pc < it->end ? &*it : nullptr;
}

std::optional<uint64_t> UnwindTable::function_start(uint64_t pc) const {
  const FunctionRange* f = function_at(pc);
  return f ? std::optional<uint64_t>(f->begin) : std::nullopt;
}

std::optional<uint64_t> UnwindTable::function_end(uint64_t pc) const {
  const FunctionRange* f = function_at(pc);
  return f ? std::optional<uint64_t>(f->end) : std::nullopt;
}

namespace {

// The section the table is built from (.eh_frame, or .debug_frame when .eh_frame has no
// entries at all), scanned, its FDEs sorted by pc.
Result<CfiScan> table_scan(const elf::ElfFile& file, CfiSection* section) {
  *section = CfiSection::EhFrame;
  LJ_ASSIGN_OR_RETURN(CfiScan scan, internal::scan_cfi_entries(file, CfiSection::EhFrame));
  if (scan.fdes.empty() && scan.errors.empty()) {
    *section = CfiSection::DebugFrame;
    LJ_ASSIGN_OR_RETURN(scan, internal::scan_cfi_entries(file, CfiSection::DebugFrame));
  }
  std::sort(scan.fdes.begin(), scan.fdes.end(), [](const FdeSummary& a, const FdeSummary& b) {
    return a.pc_begin != b.pc_begin ? a.pc_begin < b.pc_begin : a.section_offset < b.section_offset;
  });
  return scan;
}

// The FDEs the table places, in pc order: one that describes no code is left out, one that
// overlaps the previous placed FDE becomes an error.
std::vector<const FdeSummary*> place_fdes(const elf::ElfFile& file,
                                          const std::vector<FdeSummary>& sorted,
                                          std::vector<FdeError>* errors) {
  std::vector<const FdeSummary*> placed;
  placed.reserve(sorted.size());
  for (const FdeSummary& fde : sorted) {
    if (fde.pc_end == fde.pc_begin) continue;
    if (!placed.empty() && fde.pc_begin < placed.back()->pc_end) {
      errors->push_back(
          {fde.section, fde.section_offset, fde.pc_begin, fde.pc_end,
           fmt::format("{}: FDE at {}+{:#x} (pc {:#x}..{:#x}) overlaps the FDE at {:#x}",
                       file.path(), cfi_section_name(fde.section), fde.section_offset, fde.pc_begin,
                       fde.pc_end, placed.back()->section_offset)});
      continue;
    }
    placed.push_back(&fde);
  }
  return placed;
}

// One placed FDE's walker rows (an Invalid row when its program fails: the error is recorded).
Status add_fde_rows(const elf::ElfFile& file, const FdeRowReader& reader, const FdeSummary& fde,
                    Builder& b, std::vector<FdeError>* errors) {
  auto rows = reader.rows(fde);
  if (!rows.ok()) {
    errors->push_back({fde.section, fde.section_offset, fde.pc_begin, fde.pc_end, rows.message()});
    b.rows.push_back(invalid_row(fde.pc_begin));
    b.origins.push_back(fde.section_offset);
    return Ok{};
  }
  const size_t first = b.rows.size();
  for (const CfiRow& r : *rows) {
    if (r.cfa.kind == CfaRule::Kind::PltEntry && file.arch() == elf::Arch::X86_64) {
      LJ_TRY(expand_plt_rows(file, r, fde.section_offset, b));
      continue;
    }
    const lj_cfi_row row = compact(r, file.arch());
    // Most rows of an FDE differ from the one before only in registers the walker does not
    // follow: dropped here, within the FDE, as compact_into would drop them after the
    // overlays (it sees the same rules), so the raw rows are not all held at once.
    if (b.rows.size() > first && repeats(row, b.rows.back())) continue;
    b.rows.push_back(row);
    b.origins.push_back(fde.section_offset);
  }
  return Ok{};
}

// Delta compaction: drop a row equal to its predecessor, unless either is Stop or Keep. In place
// (a row kept only moves to a lower index), the builder's vectors then moved into the table and
// trimmed: a copy into vectors of their own would hold the raw rows, their doubling slack and the
// compacted rows at once, the peak of the recorder's attach (a 10 k-FDE library has ~100 k raw
// rows of 32 bytes with their origins).
void compact_into(Builder& b, std::vector<lj_cfi_row>* rows, std::vector<uint64_t>* origins) {
  size_t kept = 0;
  for (size_t i = 0; i < b.rows.size(); ++i) {
    const lj_cfi_row row = b.rows[i];
    if (kept != 0) {
      const lj_cfi_row& last = b.rows[kept - 1];
      if (row.pc_start == last.pc_start) {  // an empty range left by an overlay
        b.rows[kept - 1] = row;
        b.origins[kept - 1] = b.origins[i];
        continue;
      }
      if (repeats(row, last)) continue;
    }
    b.rows[kept] = row;
    b.origins[kept] = b.origins[i];
    ++kept;
  }
  b.rows.resize(kept);
  b.origins.resize(kept);
  // The table lives as long as its file is mapped anywhere: no doubling slack kept with it.
  b.rows.shrink_to_fit();
  b.origins.shrink_to_fit();
  *rows = std::move(b.rows);
  *origins = std::move(b.origins);
}

// The file's entry point (ELF e_entry) when no FDE covers it: code the kernel starts a process
// at, with no return address to describe — glibc's dynamic loader begins there (RTLD_START:
// `mov rdi, rsp; call _dl_start; ...; jmp *r12`, no CFI) — so the stack's root, like a _start
// whose CFI marks the return address undefined. Only a short gap that the next FDE closes is
// taken (ld.so's is 64 bytes): in a file without FDEs after it, the code that follows the
// entry is unknown and stays so.
constexpr uint64_t kEntryRootBytes = 256;

template <typename Ranges>
std::optional<Overlay> entry_root(const elf::ElfFile& file, const Ranges& functions) {
  const uint64_t entry = file.entry();
  if (entry == 0) return std::nullopt;
  auto next = std::upper_bound(functions.begin(), functions.end(), entry,
                               [](uint64_t pc, const auto& f) { return pc < f.begin; });
  if (next != functions.begin() && entry < std::prev(next)->end) return std::nullopt;
  if (next == functions.end() || next->begin - entry > kEntryRootBytes) return std::nullopt;
  Overlay o;
  o.begin = entry;
  o.end = next->begin;
  o.what = "process entry point without CFI (ELF e_entry): the stack's root";
  o.how = "ELF header";
  o.row = invalid_row(0);
  o.row.hint = LJ_CFI_STOP;
  return o;
}

}  // namespace

// AArch64 linkers emit no CFI for .plt (x86-64's do: expand_plt_rows). A PLT entry is
// `adrp x16; ldr x17, [x16, #off]; add x16, x16, #off; br x17` (GNU ld elfNN_aarch64_small_plt
// _entry; lld the same): no stack change, the return address still in x30, so CFA = sp, RA =
// x30. PLT0, the lazy-binding trampoline, first stores x16 and x30 (`stp x16, x30, [sp,
// #-16]!`): after that CFA = sp + 16 with x30 at CFA - 8. Only when the section starts with that
// exact instruction and no FDE covers any of it; anything else keeps no rule.
constexpr uint32_t kA64PltStp = 0xa9bf7bf0;  // stp x16, x30, [sp, #-16]!
constexpr uint64_t kA64Plt0Bytes = 32;

template <typename Ranges>
std::vector<Overlay> aarch64_plt(const elf::ElfFile& file, const Ranges& functions) {
  if (file.arch() != elf::Arch::AArch64) return {};
  const elf::Section* plt = file.section(".plt");
  if (plt == nullptr || !plt->has_file_data() || plt->size <= kA64Plt0Bytes) return {};
  uint32_t first = 0;  // little-endian, like the files ljprof reads and the hosts it runs on
  if (!read_struct(file.section_data(*plt), 0, &first) || first != kA64PltStp) return {};
  for (const auto& f : functions) {
    if (f.begin < plt->addr + plt->size && plt->addr < f.end) return {};
  }
  lj_cfi_row at_call{};
  at_call.hint = LJ_CFI_OK;
  at_call.cfa_base = LJ_CFI_REG_SP;
  at_call.ra_rule = LJ_CFI_RULE_SAME;
  at_call.fp_rule = LJ_CFI_RULE_SAME;
  lj_cfi_row pushed = at_call;
  pushed.cfa_offset = 16;
  pushed.ra_rule = LJ_CFI_RULE_AT_CFA;
  pushed.ra_offset = -8;
  const std::string how = ".plt (AArch64 PLT layout)";
  return {Overlay{plt->addr, plt->addr + 4, "PLT0 before it saves x30", how, at_call},
          Overlay{plt->addr + 4, plt->addr + kA64Plt0Bytes, "PLT0 after stp x16, x30", how, pushed},
          Overlay{plt->addr + kA64Plt0Bytes, plt->addr + plt->size,
                  "PLT entry: return address in x30", how, at_call}};
}

// The overlays a whole file's table takes from the file itself, whatever runtime it carries:
// its entry point's root, AArch64 PLT rules, x86-64 glue code, signal trampolines.
template <typename Ranges>
void add_file_overlays(const elf::ElfFile& file, const Ranges& functions,
                       std::span<const FdeSummary> fdes, std::vector<Overlay>& out) {
  if (std::optional<Overlay> root = entry_root(file, functions)) out.push_back(std::move(*root));
  for (Overlay& o : aarch64_plt(file, functions)) out.push_back(std::move(o));
  std::vector<FunctionSpan> spans;
  for (const auto& f : functions) spans.push_back({f.begin, f.end});
  for (Overlay& o : x86_glue_overlays(file, spans).overlays) out.push_back(std::move(o));
  for (Overlay& o : signal_trampoline_overlays(file, fdes)) out.push_back(std::move(o));
}

Result<UnwindTable> build_unwind_table(const elf::ElfFile& file,
                                       std::span<const Overlay> overlays) {
  return UnwindTable::build(file, overlays, 0, UINT64_MAX, true);
}

Result<UnwindTable> build_unwind_table_over(const elf::ElfFile& file, uint64_t begin, uint64_t end,
                                            std::span<const Overlay> overlays) {
  return UnwindTable::build(file, overlays, begin, end, false);
}

Result<UnwindTable> UnwindTable::build(const elf::ElfFile& file, std::span<const Overlay> overlays,
                                       uint64_t begin, uint64_t end, bool whole_file) {
  UnwindTable table;
  table.arch_ = file.arch();
  LJ_ASSIGN_OR_RETURN(CfiScan scan, table_scan(file, &table.section_));
  if (table.section_ == CfiSection::EhFrame)
    LJ_TRY(internal::check_eh_frame_hdr(file, scan.fdes, scan.errors));
  table.fde_errors_ = scan.errors;
  table.fde_count_ = scan.fdes.size() + scan.errors.size();

  Builder b;
  std::optional<FdeRowReader> reader;
  if (!scan.fdes.empty()) {
    LJ_ASSIGN_OR_RETURN(FdeRowReader r, FdeRowReader::open(file, table.section_));
    reader.emplace(std::move(r));
  }
  uint64_t covered_end = 0;  // end of the last FDE placed
  for (const FdeSummary* fde : place_fdes(file, scan.fdes, &table.fde_errors_)) {
    if (fde->pc_end <= begin || fde->pc_begin >= end) continue;
    if (!b.rows.empty() && fde->pc_begin > covered_end) {
      b.rows.push_back(invalid_row(covered_end));  // gap between FDEs
      b.origins.push_back(kNoFde);
    }
    LJ_TRY(add_fde_rows(file, *reader, *fde, b, &table.fde_errors_));
    if (b.rows.size() > CfiLimits::kMaxRows) {
      return make_error("{}: more than {} rows (cap CfiLimits::kMaxRows)", file.path(),
                        CfiLimits::kMaxRows);
    }
    table.functions_.push_back({fde->pc_begin, fde->pc_end});
    covered_end = fde->pc_end;
  }
  if (!b.rows.empty()) {
    b.rows.push_back(invalid_row(covered_end));  // terminator: past the last FDE
    b.origins.push_back(kNoFde);
  }
  if (whole_file) add_file_overlays(file, table.functions_, scan.fdes, table.overlays_);
  table.overlays_.insert(table.overlays_.end(), overlays.begin(), overlays.end());
  for (const Overlay& o : table.overlays_) b.apply(o);
  compact_into(b, &table.rows_, &table.row_fde_offsets_);
  return table;
}

Result<std::optional<FdeRowAt>> fde_row_at(const elf::ElfFile& file, uint64_t pc) {
  CfiSection section = CfiSection::EhFrame;
  LJ_ASSIGN_OR_RETURN(CfiScan scan, table_scan(file, &section));
  std::vector<FdeError> ignored;  // build_unwind_table reports them
  for (const FdeSummary* fde : place_fdes(file, scan.fdes, &ignored)) {
    if (pc < fde->pc_begin || pc >= fde->pc_end) continue;
    LJ_ASSIGN_OR_RETURN(FdeRowReader reader, FdeRowReader::open(file, section));
    Builder b;
    LJ_TRY(add_fde_rows(file, reader, *fde, b, &ignored));
    if (b.rows.empty()) return std::optional<FdeRowAt>();
    return std::optional<FdeRowAt>(FdeRowAt{fde->pc_begin, fde->pc_end, b.rows[b.index_at(pc)]});
  }
  return std::optional<FdeRowAt>();
}

}  // namespace ljprof::cfi
