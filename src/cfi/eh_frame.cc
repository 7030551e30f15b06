// Enumerating CIEs/FDEs of .eh_frame / .debug_frame, decoding their pointers, and checking
// .eh_frame_hdr against the enumeration.
//
// The entry framing (lengths, CIE ids, CIE fields, augmentation string) comes from libdw's
// dwarf_next_cfi. libdw offers no public decoder for what follows an FDE header (the
// DW_EH_PE-encoded initial_location/address_range) or for the CIE augmentation data, so
// those few fields are decoded here, with every read bounded by the entry's end.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <unordered_map>

#include "cfi/internal.h"

namespace ljprof::cfi {

const char* cfi_section_name(CfiSection section) {
  return section == CfiSection::EhFrame ? ".eh_frame" : ".debug_frame";
}

ArchRegs arch_regs(elf::Arch arch) {
  if (arch == elf::Arch::AArch64) return {31, 29, 30, "sp", "x29", "x30"};
  return {7, 6, 16, "rsp", "rbp", "rip"};
}

namespace internal {

std::string libdw_error() {
  const char* msg = dwarf_errmsg(-1);
  return msg ? msg : "unknown libdw error";
}

Result<ElfHandle> ElfHandle::open(const elf::ElfFile& file) {
  if (elf_version(EV_CURRENT) == EV_NONE)
    return make_error("{}: libelf version mismatch", file.path());
  auto bytes = file.bytes();
  Elf* elf =
      elf_memory(const_cast<char*>(reinterpret_cast<const char*>(bytes.data())), bytes.size());
  if (elf == nullptr) {
    return make_error("{}: libelf cannot open the image: {}", file.path(), elf_errmsg(-1));
  }
  return ElfHandle(elf);
}

ElfHandle::~ElfHandle() {
  if (elf_ != nullptr) elf_end(elf_);
}

Result<Elf_Data*> ElfHandle::section_data(const elf::ElfFile& file, uint32_t index) const {
  Elf_Scn* scn = elf_getscn(elf_, index);
  Elf_Data* data = scn ? elf_rawdata(scn, nullptr) : nullptr;
  if (data == nullptr || data->d_buf == nullptr) {
    return make_error("{}: libelf has no data for section {}: {}", file.path(), index,
                      elf_errmsg(-1));
  }
  return data;
}

Result<uint64_t> read_uleb(const uint8_t** p, const uint8_t* end, const char* what) {
  uint64_t value = 0;
  for (unsigned shift = 0; shift < 64; shift += 7) {
    if (*p >= end) return make_error("truncated ULEB128 ({})", what);
    uint8_t byte = *(*p)++;
    value |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) return value;
  }
  return make_error("ULEB128 longer than 64 bits ({})", what);
}

static Result<int64_t> read_sleb(const uint8_t** p, const uint8_t* end, const char* what) {
  uint64_t value = 0;
  unsigned shift = 0;
  uint8_t byte = 0;
  do {
    if (*p >= end) return make_error("truncated SLEB128 ({})", what);
    if (shift >= 64) return make_error("SLEB128 longer than 64 bits ({})", what);
    byte = *(*p)++;
    value |= static_cast<uint64_t>(byte & 0x7f) << shift;
    shift += 7;
  } while (byte & 0x80);
  if (shift < 64 && (byte & 0x40)) value |= ~uint64_t{0} << shift;
  return static_cast<int64_t>(value);
}

template <typename T>
static Result<uint64_t> read_fixed(const uint8_t** p, const uint8_t* end, bool sign) {
  if (static_cast<size_t>(end - *p) < sizeof(T))
    return make_error("truncated {}-byte pointer", sizeof(T));
  T v;
  std::memcpy(&v, *p, sizeof(T));
  *p += sizeof(T);
  if (sign) {
    using S = std::make_signed_t<T>;
    return static_cast<uint64_t>(static_cast<int64_t>(static_cast<S>(v)));
  }
  return static_cast<uint64_t>(v);
}

Result<uint64_t> read_encoded(uint8_t encoding, const uint8_t** p, const uint8_t* end,
                              const PointerContext& ctx, bool value_only) {
  auto fail = [&](const std::string& why) {
    return make_error("{}+{:#x}: pointer encoding {:#04x}: {}", ctx.section, ctx.section_offset,
                      encoding, why);
  };
  if (encoding == DW_EH_PE_omit) return fail("omitted where a value is required");
  if (encoding & DW_EH_PE_indirect) return fail("DW_EH_PE_indirect is not legal here");
  Result<uint64_t> raw = make_error("");
  switch (encoding & 0x0f) {
    case DW_EH_PE_absptr:
      raw = read_fixed<uint64_t>(p, end, false);  // ELF64 only (ElfFile rejects ELF32)
      break;
    case DW_EH_PE_uleb128:
      raw = read_uleb(p, end, "pointer");
      break;
    case DW_EH_PE_udata2:
      raw = read_fixed<uint16_t>(p, end, false);
      break;
    case DW_EH_PE_udata4:
      raw = read_fixed<uint32_t>(p, end, false);
      break;
    case DW_EH_PE_udata8:
      raw = read_fixed<uint64_t>(p, end, false);
      break;
    case DW_EH_PE_sleb128: {
      auto s = read_sleb(p, end, "pointer");
      if (!s.ok()) return fail(s.message());
      raw = static_cast<uint64_t>(*s);
      break;
    }
    case DW_EH_PE_sdata2:
      raw = read_fixed<uint16_t>(p, end, true);
      break;
    case DW_EH_PE_sdata4:
      raw = read_fixed<uint32_t>(p, end, true);
      break;
    case DW_EH_PE_sdata8:
      raw = read_fixed<uint64_t>(p, end, true);
      break;
    default:
      return fail("unknown value format");
  }
  if (!raw.ok()) return fail(raw.message());
  if (value_only) return *raw;
  switch (encoding & 0x70) {
    case DW_EH_PE_absptr:
      return *raw;
    case DW_EH_PE_pcrel:
      return ctx.field_vaddr + *raw;
    case DW_EH_PE_datarel:
      if (!ctx.data_base) return fail("DW_EH_PE_datarel has no defined base in this section");
      return *ctx.data_base + *raw;
    default:
      // textrel/funcrel/aligned are not used by x86-64 or AArch64 Linux toolchains.
      return fail("unsupported pointer application (textrel/funcrel/aligned)");
  }
}

}  // namespace internal

namespace {

using internal::PointerContext;
using internal::read_encoded;
using internal::read_uleb;

struct CieInfo {
  std::string augmentation;
  uint8_t fde_encoding = DW_EH_PE_absptr;
  std::optional<uint8_t> lsda_encoding;
  std::optional<uint64_t> personality;
  bool has_z = false;
  bool signal_frame = false;
  uint32_t return_address_register = 0;
  std::optional<std::string> error;  // the CIE is unusable: every FDE using it fails
};

// Parses the augmentation string and data of one CIE (the 'z' forms GCC/LLVM emit).
CieInfo parse_cie(const elf::ElfFile& file, const elf::Section& section, CfiSection kind,
                  const uint8_t* section_start, uint64_t offset, const Dwarf_CIE& cie) {
  CieInfo info;
  info.augmentation = cie.augmentation ? cie.augmentation : "";
  info.return_address_register = static_cast<uint32_t>(cie.return_address_register);
  const char* name = cfi_section_name(kind);
  auto fail = [&](std::string why) {
    info.error = fmt::format("{}: CIE at {}+{:#x}: {}", file.path(), name, offset, why);
    return info;
  };
  if (cie.return_address_register > 0xffff) return fail("return address column out of range");
  const std::string& aug = info.augmentation;
  if (aug.empty()) {
    // .debug_frame CIEs (and rare .eh_frame ones) without augmentation: absolute pointers.
    info.fde_encoding = kind == CfiSection::EhFrame ? DW_EH_PE_absptr : DW_EH_PE_udata8;
    return info;
  }
  if (aug[0] != 'z') {
    return fail(fmt::format("augmentation \"{}\" without 'z' is not supported", aug));
  }
  info.has_z = true;
  const uint8_t* p = cie.augmentation_data;
  const uint8_t* end = p ? p + cie.augmentation_data_size : nullptr;
  if (p == nullptr && aug.size() > 1) return fail("augmentation data missing");
  for (size_t i = 1; i < aug.size(); ++i) {
    switch (aug[i]) {
      case 'R':
        if (p >= end) return fail("augmentation data truncated at 'R'");
        info.fde_encoding = *p++;
        break;
      case 'L':
        if (p >= end) return fail("augmentation data truncated at 'L'");
        info.lsda_encoding = *p++;
        break;
      case 'P': {
        if (p >= end) return fail("augmentation data truncated at 'P'");
        uint8_t enc = *p++;
        uint64_t field_off = static_cast<uint64_t>(p - section_start);
        PointerContext ctx{section.addr + field_off, std::nullopt, name, field_off};
        auto value = read_encoded(enc & 0x7f, &p, end, ctx);
        if (!value.ok()) return fail("personality: " + value.message());
        if (enc & DW_EH_PE_indirect) {
          // The personality is in a pointer slot (DW.ref.*), filled by the dynamic loader;
          // the file holds its link-time value, which is 0 when a relocation fills it.
          auto slot = file.read(*value, 8);
          if (slot.ok()) {
            uint64_t target = 0;
            std::memcpy(&target, slot->data(), 8);
            if (target != 0) info.personality = target;
          }
        } else {
          info.personality = *value;
        }
        break;
      }
      case 'S':
        info.signal_frame = true;
        break;
      case 'B':  // AArch64: return addresses signed with the B key (pointer authentication)
      case 'G':  // AArch64: MTE-tagged stack frames
        break;
      default:
        return fail(fmt::format("unknown augmentation character '{}' in \"{}\"", aug[i], aug));
    }
  }
  return info;
}

// Hard cap on the entries of one section, independent of content.
Status check_caps(const elf::ElfFile& file, const char* name, uint64_t entries) {
  if (entries > CfiLimits::kMaxFdes) {
    return make_error("{}: {} has more than {} entries (cap CfiLimits::kMaxFdes)", file.path(),
                      name, CfiLimits::kMaxFdes);
  }
  return Ok{};
}

// An FDE as the first pass finds it: its CIE may come later in the section.
struct RawFde {
  uint64_t offset;
  uint64_t cie;
  const uint8_t* begin;
  const uint8_t* end;
};

// The entries of one section: the CIEs parsed (by section offset), the FDEs still raw.
struct CfiEntries {
  std::unordered_map<uint64_t, CieInfo> cies;
  std::vector<RawFde> fdes;
};

// One CFI section of a file, as both passes over its entries read it.
struct CfiSectionView {
  const elf::ElfFile& file;
  const elf::Section& section;
  CfiSection kind;
  const char* name;
  const uint8_t* start;  // libelf's data of the section
};

// Pass 1: all entries (CIEs can follow the FDEs that use them), counting the CIEs in `scan`.
Status read_cfi_entries(const CfiSectionView& view, Elf_Data* data, CfiEntries* entries,
                        CfiScan* scan) {
  const elf::ElfFile& file = view.file;
  const char* name = view.name;
  const unsigned char* ident = file.bytes().data();
  const bool eh = view.kind == CfiSection::EhFrame;
  Dwarf_Off offset = 0;
  uint64_t count = 0;
  while (offset < data->d_size) {
    Dwarf_Off next = 0;
    Dwarf_CFI_Entry entry;
    int rc = dwarf_next_cfi(ident, data, eh, offset, &next, &entry);
    if (rc == 1) break;  // terminator
    if (rc != 0) {
      return make_error("{}: {}+{:#x}: malformed CIE/FDE header: {}", file.path(), name, offset,
                        internal::libdw_error());
    }
    if (next <= offset || next > data->d_size) {
      return make_error("{}: {}+{:#x}: entry length runs past the section end", file.path(), name,
                        offset);
    }
    if (next - offset > CfiLimits::kMaxEntryLength) {
      return make_error("{}: {}+{:#x}: entry of {} bytes exceeds CfiLimits::kMaxEntryLength",
                        file.path(), name, offset, next - offset);
    }
    LJ_TRY(check_caps(file, name, ++count));
    if (dwarf_cfi_cie_p(&entry)) {
      entries->cies.emplace(
          offset, parse_cie(file, view.section, view.kind, view.start, offset, entry.cie));
      ++scan->cie_count;
    } else {
      entries->fdes.push_back({offset, entry.fde.CIE_pointer, entry.fde.start, entry.fde.end});
    }
    offset = next;
  }
  return Ok{};
}

// Pass 2 for one FDE: its range (and LSDA) decoded with its CIE's encodings, added to
// scan->fdes, or why it cannot be, to scan->errors.
void decode_fde(const CfiSectionView& view, const std::unordered_map<uint64_t, CieInfo>& cies,
                const RawFde& r, CfiScan* scan) {
  const elf::ElfFile& file = view.file;
  const char* name = view.name;
  FdeError err{view.kind, r.offset, 0, 0, ""};
  auto it = cies.find(r.cie);
  if (it == cies.end()) {
    err.message = fmt::format("{}: FDE at {}+{:#x}: CIE pointer {:#x} does not name a CIE",
                              file.path(), name, r.offset, r.cie);
    scan->errors.push_back(std::move(err));
    return;
  }
  const CieInfo& cie = it->second;
  if (cie.error) {
    err.message = fmt::format("FDE at {}+{:#x}: {}", name, r.offset, *cie.error);
    scan->errors.push_back(std::move(err));
    return;
  }
  const uint8_t* p = r.begin;
  uint64_t field_off = static_cast<uint64_t>(p - view.start);
  PointerContext ctx{view.section.addr + field_off, std::nullopt, name, field_off};
  auto begin = read_encoded(cie.fde_encoding, &p, r.end, ctx);
  if (!begin.ok()) {
    err.message = fmt::format("{}: FDE at {}+{:#x}: initial_location: {}", file.path(), name,
                              r.offset, begin.message());
    scan->errors.push_back(std::move(err));
    return;
  }
  auto range = read_encoded(cie.fde_encoding, &p, r.end, ctx, /*value_only=*/true);
  if (!range.ok()) {
    err.message = fmt::format("{}: FDE at {}+{:#x}: address_range: {}", file.path(), name, r.offset,
                              range.message());
    scan->errors.push_back(std::move(err));
    return;
  }
  if (*begin + *range < *begin) {
    err.message = fmt::format("{}: FDE at {}+{:#x}: pc range {:#x}+{:#x} wraps around", file.path(),
                              name, r.offset, *begin, *range);
    scan->errors.push_back(std::move(err));
    return;
  }
  FdeSummary fde;
  fde.section = view.kind;
  fde.section_offset = r.offset;
  fde.cie_offset = r.cie;
  fde.pc_begin = *begin;
  fde.pc_end = *begin + *range;
  fde.augmentation = cie.augmentation;
  fde.personality = cie.personality;
  fde.return_address_register = cie.return_address_register;
  fde.signal_frame = cie.signal_frame;
  if (cie.has_z) {
    auto aug_len = read_uleb(&p, r.end, "FDE augmentation length");
    if (!aug_len.ok() || *aug_len > static_cast<uint64_t>(r.end - p)) {
      err.pc_begin = fde.pc_begin;
      err.pc_end = fde.pc_end;
      err.message = fmt::format("{}: FDE at {}+{:#x}: augmentation data runs past the entry",
                                file.path(), name, r.offset);
      scan->errors.push_back(std::move(err));
      return;
    }
    if (cie.lsda_encoding && *cie.lsda_encoding != DW_EH_PE_omit) {
      const uint8_t* q = p;
      uint64_t lsda_off = static_cast<uint64_t>(q - view.start);
      PointerContext lctx{view.section.addr + lsda_off, std::nullopt, name, lsda_off};
      auto lsda = read_encoded(*cie.lsda_encoding & 0x7f, &q, p + *aug_len, lctx);
      if (lsda.ok() && *lsda != 0 && !(*cie.lsda_encoding & DW_EH_PE_indirect)) {
        fde.lsda = *lsda;
      }
    }
  }
  scan->fdes.push_back(std::move(fde));
}

}  // namespace

namespace internal {
Result<CfiScan> scan_cfi_entries(const elf::ElfFile& file, CfiSection kind) {
  CfiScan scan;
  const char* name = cfi_section_name(kind);
  const elf::Section* section = file.section(name);
  if (section == nullptr || !section->has_file_data() || section->size == 0) return scan;
  auto data_span = file.section_data(*section);
  LJ_ASSIGN_OR_RETURN(internal::ElfHandle elf, internal::ElfHandle::open(file));
  LJ_ASSIGN_OR_RETURN(Elf_Data * data, elf.section_data(file, section->index));
  if (data->d_size != data_span.size()) {
    return make_error("{}: {} size disagrees between libelf and the ELF reader", file.path(), name);
  }
  const CfiSectionView view{file, *section, kind, name, static_cast<const uint8_t*>(data->d_buf)};
  CfiEntries entries;
  LJ_TRY(read_cfi_entries(view, data, &entries, &scan));
  // Pass 2: decode each FDE's range (and LSDA) with its CIE's encodings, into a list sized once
  // (grown by doubling it held up to twice itself, 1.4 MB for a 10 k-FDE library).
  scan.fdes.reserve(scan.fdes.size() + entries.fdes.size());
  for (const RawFde& r : entries.fdes) decode_fde(view, entries.cies, r, &scan);
  return scan;
}
}  // namespace internal

namespace {

// scan_cfi with initial CFAs, for the FDEs `keep` accepts (all when it is empty); the others
// are dropped from the scan.
Result<CfiScan> scan_cfi_kept(const elf::ElfFile& file, CfiSection kind,
                              const std::function<bool(const FdeSummary&)>& keep) {
  LJ_ASSIGN_OR_RETURN(CfiScan scan, internal::scan_cfi_entries(file, kind));
  if (scan.fdes.empty()) return scan;
  if (kind == CfiSection::EhFrame)
    LJ_TRY(internal::check_eh_frame_hdr(file, scan.fdes, scan.errors));
  LJ_ASSIGN_OR_RETURN(FdeRowReader reader, FdeRowReader::open(file, kind));
  std::vector<FdeSummary> kept;
  kept.reserve(keep ? 0 : scan.fdes.size());
  for (FdeSummary& fde : scan.fdes) {
    if (keep && !keep(fde)) continue;
    if (fde.pc_end == fde.pc_begin) {
      kept.push_back(std::move(fde));
      continue;
    }
    auto rows = reader.rows(fde);
    if (!rows.ok()) {
      scan.errors.push_back({kind, fde.section_offset, fde.pc_begin, fde.pc_end, rows.message()});
      continue;
    }
    fde.initial_cfa = rows->front().cfa;
    kept.push_back(std::move(fde));
  }
  scan.fdes = std::move(kept);
  return scan;
}

}  // namespace

Result<CfiScan> scan_cfi(const elf::ElfFile& file, CfiSection kind, bool with_initial_cfa) {
  if (!with_initial_cfa) return internal::scan_cfi_entries(file, kind);
  return scan_cfi_kept(file, kind, {});
}

Result<std::vector<FdeSummary>> list_fdes_with_initial_cfa(
    const elf::ElfFile& file, CfiSection section,
    const std::function<bool(const FdeSummary&)>& keep) {
  LJ_ASSIGN_OR_RETURN(CfiScan scan, scan_cfi_kept(file, section, keep));
  return std::move(scan.fdes);
}

Result<std::vector<FdeSummary>> list_fdes(const elf::ElfFile& file, CfiSection section) {
  LJ_ASSIGN_OR_RETURN(CfiScan scan, scan_cfi(file, section, true));
  return std::move(scan.fdes);
}

Result<std::vector<FdeSummary>> list_fdes(const elf::ElfFile& file) {
  LJ_ASSIGN_OR_RETURN(std::vector<FdeSummary> all, list_fdes(file, CfiSection::EhFrame));
  LJ_ASSIGN_OR_RETURN(std::vector<FdeSummary> debug, list_fdes(file, CfiSection::DebugFrame));
  all.insert(all.end(), std::make_move_iterator(debug.begin()),
             std::make_move_iterator(debug.end()));
  return all;
}

}  // namespace ljprof::cfi
