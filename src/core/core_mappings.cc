// CoreFile's mappings: the mapped files (from NT_FILE, or from the executable and the dynamic
// linker's link_map in core memory), looked up in sysroots like a loader and checked by build-id.
#include <elf.h>
#include <link.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "common/bounds.h"
#include "core/core_file_internal.h"

namespace ljprof::core {

namespace {

std::string hex_of(std::span<const uint8_t> bytes) {
  std::string hex;
  for (uint8_t b : bytes) hex += fmt::format("{:02x}", b);
  return hex;
}

}  // namespace

const char* mapping_source_name(MappingSource source) {
  switch (source) {
    case MappingSource::NtFile:
      return "NT_FILE";
    case MappingSource::LinkMap:
      return "link_map";
    case MappingSource::ProcMaps:
      return "/proc/PID/maps";
    case MappingSource::None:
      return "none";
  }
  return "?";
}

const char* file_check_name(FileCheck check) {
  switch (check) {
    case FileCheck::Verified:
      return "verified";
    case FileCheck::Unverified:
      return "unverified";
    case FileCheck::Mismatch:
      return "build-id mismatch";
    case FileCheck::OpenFailed:
      return "open failed";
    case FileCheck::NotOpened:
      return "not opened";
    case FileCheck::Mapped:
      return "mapped by the process";
  }
  return "?";
}

// The paths a recorded file may be at, in the order a loader with these roots would look:
// the executable override alone; else each sysroot + the recorded path, then the path itself.
std::vector<std::string> CoreFile::State::candidate_paths(const std::string& recorded,
                                                          bool is_exe) const {
  if (is_exe && !options.exe.empty()) return {options.exe};
  std::vector<std::string> out;
  for (const std::string& root : options.sysroots) {
    if (!root.empty()) out.push_back(root + recorded);
  }
  if (std::find(out.begin(), out.end(), recorded) == out.end()) out.push_back(recorded);
  return out;
}

// The reason `candidate` is not the file whose first page the core holds at `header_addr`:
// the core holds that page's build-id note and the candidate's differs. Nothing when they are
// equal or the core does not hold the note (qemu-user cores dump no file-backed text).
std::optional<std::string> CoreFile::State::build_id_differs(uint64_t header_addr,
                                                             const std::string& path,
                                                             const elf::ElfFile& candidate) const {
  auto in_core = build_id_in_core(header_addr);
  if (!in_core.ok() || !in_core->has_value() || candidate.build_id() == **in_core) {
    return std::nullopt;
  }
  return fmt::format("{} has build-id {}, the core's mapping at {:#x} has {}", path,
                     candidate.build_id().value_or("(none)"), header_addr, **in_core);
}

// Adds a MappedFile for `recorded` and opens the first candidate path (candidate_paths) that is
// an ELF file of the core's architecture that `fits` the core's mapping. Returns its index, or
// nothing when the cap on files is reached. A file no candidate gives is refused, and the
// diagnostic names every path tried and why each was not used.
std::optional<uint32_t> CoreFile::State::add_file(const std::string& recorded, bool is_exe,
                                                  const Fits& fits) {
  if (files.size() >= Limits::kMaxMappedFiles) {
    diagnostics.push_back(fmt::format("{}: more than {} mapped files (cap); {} is ignored", path,
                                      Limits::kMaxMappedFiles, recorded));
    return std::nullopt;
  }
  MappedFile f;
  f.path = recorded;
  f.is_executable = is_exe;
  f.tried = candidate_paths(recorded, is_exe);
  f.resolved = f.tried.front();
  if (options.open_mapped_files) {
    std::vector<std::string> refused;
    bool mismatch = false;
    for (const std::string& candidate : f.tried) {
      auto opened = elf::ElfFile::open(candidate);
      if (!opened.ok()) {
        refused.push_back(opened.message());
        continue;
      }
      if ((*opened)->arch() != arch) {
        refused.push_back(fmt::format("{} is {} but the core is {}", candidate,
                                      elf::arch_name((*opened)->arch()), elf::arch_name(arch)));
        continue;
      }
      if (auto why = fits ? fits(candidate, **opened) : std::nullopt) {
        mismatch = true;
        refused.push_back(*why);
        continue;
      }
      f.resolved = candidate;
      f.elf = std::move(opened).value();
      f.check = FileCheck::Unverified;
      break;
    }
    if (f.elf == nullptr) {
      f.check = mismatch ? FileCheck::Mismatch : FileCheck::OpenFailed;
      f.error = fmt::format(
          "{} ({})",
          mismatch ? "build-id mismatch: no candidate is the file the core mapped" : "not found",
          fmt::join(refused, "; "));
      diagnostics.push_back(fmt::format("{}: mapped file {} refused: {}", path, recorded, f.error));
    }
  }
  files.push_back(std::move(f));
  if (is_exe) exe_index = static_cast<int>(files.size() - 1);
  return static_cast<uint32_t>(files.size() - 1);
}

Status CoreFile::State::build_nt_file_mappings() {
  source = MappingSource::NtFile;
  // The executable is the file mapped at AT_ENTRY (else AT_PHDR).
  std::optional<std::string> exe_path;
  for (uint64_t at : {uint64_t{AT_ENTRY}, uint64_t{AT_PHDR}}) {
    auto v = aux(at);
    if (!v) continue;
    for (size_t i = 0; i < mappings.size(); ++i) {
      if (*v >= mappings[i].start && *v < mappings[i].end) {
        exe_path = nt_file_paths[i];
        break;
      }
    }
    if (exe_path) break;
  }
  if (!exe_path && !options.exe.empty()) {
    return make_error(
        "{}: cannot apply the executable override {}: no NT_FILE mapping holds AT_ENTRY/AT_PHDR "
        "of NT_AUXV",
        path, options.exe);
  }
  // Where each file's first page (file offset 0) is mapped: its build-id note is there.
  std::map<std::string, uint64_t> header_of;
  for (size_t i = 0; i < mappings.size(); ++i) {
    if (mappings[i].file_offset == 0) header_of.emplace(nt_file_paths[i], mappings[i].start);
  }
  std::map<std::string, uint32_t> by_path;
  std::vector<Mapping> kept;
  kept.reserve(mappings.size());
  for (size_t i = 0; i < mappings.size(); ++i) {
    const std::string& p = nt_file_paths[i];
    auto it = by_path.find(p);
    if (it == by_path.end()) {
      auto header = header_of.find(p);
      Fits fits;
      if (header != header_of.end()) {
        fits = [this, addr = header->second](const std::string& candidate, const elf::ElfFile& e) {
          return build_id_differs(addr, candidate, e);
        };
      }
      auto index = add_file(p, exe_path && p == *exe_path, fits);
      if (!index) continue;
      it = by_path.emplace(p, *index).first;
    }
    Mapping m = mappings[i];
    m.file_index = it->second;
    kept.push_back(m);
  }
  mappings = std::move(kept);
  nt_file_paths.clear();
  return Ok{};
}

// Mappings of an ELF file loaded at `bias` (link_map mode): each PT_LOAD's file part, starting at
// its page (the loader maps whole pages from the page-aligned file offset).
void CoreFile::State::add_elf_mappings(uint32_t file_index, uint64_t bias) {
  const MappedFile& f = files[file_index];
  const uint64_t page = aux(AT_PAGESZ).value_or(4096);
  if (page == 0 || (page & (page - 1)) != 0) {
    diagnostics.push_back(fmt::format("{}: AT_PAGESZ {} is not a power of two", path, page));
    return;
  }
  for (const elf::Segment& seg : f.elf->segments()) {
    if (seg.type != PT_LOAD || seg.filesz == 0) continue;
    if ((seg.vaddr - seg.offset) % page != 0) {
      diagnostics.push_back(fmt::format(
          "{}: {}: PT_LOAD vaddr {:#x} and offset {:#x} disagree modulo the page size {}; not "
          "mapped",
          path, f.resolved, seg.vaddr, seg.offset, page));
      continue;
    }
    const uint64_t page_vaddr = seg.vaddr & ~(page - 1);
    uint64_t start, end;
    if (add_overflows(bias, page_vaddr, &start) ||
        add_overflows(bias, seg.vaddr + seg.filesz, &end)) {
      diagnostics.push_back(
          fmt::format("{}: {} at bias {:#x}: segment address overflows", path, f.resolved, bias));
      continue;
    }
    // Insert in order and refuse overlaps at once: reads made while the link_map is still being
    // walked already look mappings up by binary search.
    const Mapping m{start, end, seg.offset & ~(page - 1), file_index};
    auto at = std::upper_bound(mappings.begin(), mappings.end(), m.start,
                               [](uint64_t a, const Mapping& x) { return a < x.start; });
    const Mapping* before = at == mappings.begin() ? nullptr : &*(at - 1);
    const Mapping* after = at == mappings.end() ? nullptr : &*at;
    const Mapping* clash = before != nullptr && before->end > m.start ? before
                           : after != nullptr && after->start < m.end ? after
                                                                      : nullptr;
    if (clash != nullptr) {
      diagnostics.push_back(fmt::format(
          "{}: mapping {:#x}..{:#x} of {} overlaps {:#x}..{:#x} of {}; dropped", path, m.start,
          m.end, f.path, clash->start, clash->end, files[clash->file_index].path));
      continue;
    }
    mappings.insert(at, m);
  }
}

void CoreFile::State::build_link_map_mappings() {
  // qemu-user cores have no NT_FILE. Rebuild the mappings the way a debugger does: the
  // executable from the aux vector, the shared objects from the dynamic linker's list
  // (<link.h>: DT_DEBUG -> struct r_debug -> r_map -> struct link_map l_addr/l_name/l_next).
  auto recorded = recorded_executable_path();
  if (!recorded) return;
  auto phdr = aux(AT_PHDR);
  auto entry = aux(AT_ENTRY);
  if (!phdr || !entry) {
    diagnostics.push_back(fmt::format(
        "{}: no NT_FILE and no AT_PHDR/AT_ENTRY: the executable cannot be placed", path));
    return;
  }
  auto exe_index_opt = add_file(*recorded, true, nullptr);
  if (!exe_index_opt) return;
  const uint32_t exe = *exe_index_opt;
  source = MappingSource::LinkMap;
  if (!files[exe].usable()) return;
  auto bias = place_executable(exe, *phdr, *entry);
  if (!bias) return;
  add_elf_mappings(exe, *bias);
  auto r_debug = r_debug_address(*files[exe].elf, *bias);
  if (!r_debug || *r_debug == 0) {
    diagnostics.push_back(
        fmt::format("{}: the executable's DT_DEBUG is {} in the core: no shared objects are mapped",
                    path, r_debug ? "0" : "missing"));
    return;
  }
  add_link_map_files(*r_debug);
}

// The executable's path as the core records it: the override, else the AT_EXECFN string in core
// memory. Nothing (and a diagnostic) when there is neither.
std::optional<std::string> CoreFile::State::recorded_executable_path() {
  if (!options.exe.empty()) return options.exe;
  auto execfn = aux(AT_EXECFN);
  if (!execfn) {
    diagnostics.push_back(fmt::format(
        "{}: no NT_FILE, no executable override and no AT_EXECFN: only the core's own bytes are "
        "readable",
        path));
    return std::nullopt;
  }
  auto name = read_c_string(*execfn, Limits::kMaxPath);
  if (!name.ok()) {
    diagnostics.push_back(fmt::format("{}: AT_EXECFN string: {}", path, name.message()));
    return std::nullopt;
  }
  return *name;
}

// The load bias of the executable (file `exe`): AT_PHDR minus the link-time address of its
// program headers, which must put e_entry at AT_ENTRY. Nothing when it does not (the file is
// refused).
std::optional<uint64_t> CoreFile::State::place_executable(uint32_t exe, uint64_t phdr,
                                                          uint64_t entry) {
  MappedFile& exe_file = files[exe];
  const elf::ElfFile& exe_elf = *exe_file.elf;
  // Where the program headers are in the file's address space: PT_PHDR, else the PT_LOAD
  // that holds e_phoff.
  Elf64_Ehdr eh;
  read_struct(exe_elf.bytes(), 0, &eh);  // validated by ElfFile::open
  std::optional<uint64_t> phdr_vaddr;
  for (const elf::Segment& seg : exe_elf.segments()) {
    if (seg.type == PT_PHDR) phdr_vaddr = seg.vaddr;
  }
  for (const elf::Segment& seg : exe_elf.segments()) {
    if (phdr_vaddr) break;
    if (seg.type == PT_LOAD && eh.e_phoff >= seg.offset && eh.e_phoff - seg.offset < seg.filesz) {
      phdr_vaddr = seg.vaddr + (eh.e_phoff - seg.offset);
    }
  }
  if (!phdr_vaddr) {
    exe_file.elf.reset();
    exe_file.check = FileCheck::OpenFailed;
    exe_file.error = fmt::format("{}: no PT_PHDR and no PT_LOAD holds e_phoff {:#x}",
                                 exe_file.resolved, eh.e_phoff);
    diagnostics.push_back(fmt::format("{}: executable refused: {}", path, exe_file.error));
    return std::nullopt;
  }
  const uint64_t bias = phdr - *phdr_vaddr;
  if (bias + exe_elf.entry() != entry || (exe_elf.type() == ET_EXEC && bias != 0)) {
    exe_file.check = FileCheck::Mismatch;
    exe_file.error = fmt::format(
        "{} does not match the core: AT_PHDR {:#x} gives load bias {:#x}, so e_entry {:#x} would "
        "be at {:#x}, but AT_ENTRY is {:#x}",
        exe_file.resolved, phdr, bias, exe_elf.entry(), bias + exe_elf.entry(), entry);
    exe_file.elf.reset();
    diagnostics.push_back(fmt::format("{}: executable refused: {}", path, exe_file.error));
    return std::nullopt;
  }
  return bias;
}

// DT_DEBUG of the executable's dynamic section in memory holds &_r_debug.
std::optional<uint64_t> CoreFile::State::r_debug_address(const elf::ElfFile& exe,
                                                         uint64_t bias) const {
  std::optional<uint64_t> r_debug;
  for (const elf::Segment& seg : exe.segments()) {
    if (seg.type != PT_DYNAMIC) continue;
    const uint64_t count = std::min<uint64_t>(seg.memsz / sizeof(Elf64_Dyn), 4096);
    for (uint64_t i = 0; i < count; ++i) {
      Elf64_Dyn d;
      if (!read(bias + seg.vaddr + i * sizeof(Elf64_Dyn), &d, sizeof(d)).ok()) break;
      if (d.d_tag == DT_NULL) break;
      if (d.d_tag == DT_DEBUG) r_debug = d.d_un.d_ptr;
    }
  }
  return r_debug;
}

// Adds and maps the shared object of each entry of the dynamic linker's list at `r_debug`.
void CoreFile::State::add_link_map_files(uint64_t r_debug) {
  // struct r_debug { int r_version; struct link_map* r_map; ... }: r_map at 8 on LP64.
  auto lm = read_u64(r_debug + 8);
  uint64_t node = lm.ok() ? *lm : 0;
  if (!lm.ok()) diagnostics.push_back(fmt::format("{}: r_debug.r_map: {}", path, lm.message()));
  uint32_t steps = 0;
  for (; node != 0 && steps < Limits::kMaxLinkMapEntries; ++steps) {
    // struct link_map { ElfW(Addr) l_addr; char* l_name; ElfW(Dyn)* l_ld; link_map* l_next, ... }
    uint64_t fields[4];
    auto got = read(node, fields, sizeof(fields));
    if (!got.ok()) {
      diagnostics.push_back(
          fmt::format("{}: link_map entry at {:#x}: {}", path, node, got.message()));
      break;
    }
    const uint64_t l_addr = fields[0], l_name = fields[1], l_ld = fields[2], l_next = fields[3];
    node = l_next;
    auto name = read_c_string(l_name, Limits::kMaxPath);
    if (!name.ok()) {
      diagnostics.push_back(fmt::format("{}: link_map l_name: {}", path, name.message()));
      continue;
    }
    if (name->empty()) continue;  // the executable itself
    auto index = add_file(*name, false, loaded_file_fits(l_addr, l_ld));
    if (!index || !files[*index].usable()) continue;
    add_elf_mappings(*index, l_addr);
  }
  if (node != 0) {
    diagnostics.push_back(
        fmt::format("{}: link_map list longer than {} entries (cap); rest ignored", path,
                    Limits::kMaxLinkMapEntries));
  }
}

// Whether a candidate is the file a link_map entry (l_addr, l_ld) records. The file the loader
// mapped: its first page (l_addr + the vaddr of its offset-0 PT_LOAD) holds its build-id when the
// core has that page, and its PT_DYNAMIC is where the loader recorded l_ld. qemu-user cores dump no
// file-backed text, so l_ld is what tells two builds of one library apart there (Debian's
// libc6:arm64 and libc6-arm64-cross differ in it).
CoreFile::State::Fits CoreFile::State::loaded_file_fits(uint64_t l_addr, uint64_t l_ld) const {
  return [this, l_addr, l_ld](const std::string& candidate,
                              const elf::ElfFile& e) -> std::optional<std::string> {
    std::optional<uint64_t> dynamic;
    for (const elf::Segment& seg : e.segments()) {
      if (seg.type == PT_LOAD && seg.offset == 0) {
        if (auto why = build_id_differs(l_addr + seg.vaddr, candidate, e)) return why;
      }
      if (seg.type == PT_DYNAMIC) dynamic = seg.vaddr;
    }
    if (l_ld != 0 && (!dynamic || l_addr + *dynamic != l_ld)) {
      return fmt::format(
          "{} is not the file the loader mapped: its PT_DYNAMIC would be at {}, the "
          "link_map's l_ld is {:#x}",
          candidate, dynamic ? fmt::format("{:#x}", l_addr + *dynamic) : "(none)", l_ld);
    }
    return std::nullopt;
  };
}

// The build-id note of the ELF file whose first page (file offset 0) the core holds at
// `header_addr`, found through the in-memory ELF header and program headers only (never the
// file on disk, which is what is being checked). Nothing when the core lacks those bytes or the
// note; an error when the bytes are there but are not a well-formed ELF header.
Result<std::optional<std::string>> CoreFile::State::build_id_in_core(uint64_t header_addr) const {
  Elf64_Ehdr eh;
  if (!core_read(header_addr, &eh, sizeof(eh))) return std::optional<std::string>{};
  if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) {
    return make_error(
        "the core's bytes at {:#x} (file offset 0 of the mapping) are not an ELF "
        "header",
        header_addr);
  }
  if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_phentsize != sizeof(Elf64_Phdr) ||
      eh.e_phnum > elf::Limits::kMaxSegments) {
    return make_error(
        "the core's ELF header at {:#x} is malformed (class {}, e_phentsize {}, e_phnum {})",
        header_addr, eh.e_ident[EI_CLASS], eh.e_phentsize, eh.e_phnum);
  }
  std::vector<Elf64_Phdr> phdrs(eh.e_phnum);
  for (uint32_t i = 0; i < eh.e_phnum; ++i) {
    uint64_t at;
    if (add_overflows(header_addr, eh.e_phoff + uint64_t{i} * sizeof(Elf64_Phdr), &at) ||
        !core_read(at, &phdrs[i], sizeof(Elf64_Phdr))) {
      return std::optional<std::string>{};
    }
  }
  const Elf64_Phdr* first_load = nullptr;
  for (const Elf64_Phdr& ph : phdrs) {
    if (ph.p_type == PT_LOAD && (first_load == nullptr || ph.p_offset < first_load->p_offset)) {
      first_load = &ph;
    }
  }
  if (first_load == nullptr) {
    return make_error("the core's ELF header at {:#x} has no PT_LOAD", header_addr);
  }
  // Memory address of file offset X of the first segment is header_addr + X.
  const uint64_t bias = header_addr + first_load->p_offset - first_load->p_vaddr;
  for (const Elf64_Phdr& ph : phdrs) {
    if (ph.p_type != PT_NOTE) continue;
    if (ph.p_filesz > Limits::kMaxHeaderNoteBytes) {
      return make_error("the core's ELF header at {:#x}: PT_NOTE of {} bytes exceeds the cap of {}",
                        header_addr, ph.p_filesz, Limits::kMaxHeaderNoteBytes);
    }
    std::vector<uint8_t> notes(ph.p_filesz);
    if (!core_read(bias + ph.p_vaddr, notes.data(), notes.size())) continue;
    const uint64_t align = ph.p_align == 8 ? 8 : 4;
    uint64_t pos = 0;
    for (int guard = 0; pos < notes.size() && guard < 1024; ++guard) {
      Elf64_Nhdr nh;
      if (!read_struct(std::span<const uint8_t>(notes), pos, &nh)) break;
      const uint64_t name_at = pos + sizeof(nh);
      const uint64_t desc_at = (name_at + nh.n_namesz + align - 1) & ~(align - 1);
      const uint64_t next = (desc_at + nh.n_descsz + align - 1) & ~(align - 1);
      if (!in_bounds(name_at, nh.n_namesz, notes.size()) ||
          !in_bounds(desc_at, nh.n_descsz, notes.size())) {
        return make_error("the core's copy of the note at {:#x} runs past its PT_NOTE",
                          bias + ph.p_vaddr + pos);
      }
      if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 &&
          std::memcmp(notes.data() + name_at, "GNU", 4) == 0) {
        if (nh.n_descsz == 0 || nh.n_descsz > 64) {
          return make_error("the core's build-id note at {:#x} has {} bytes (expected 1..64)",
                            bias + ph.p_vaddr + pos, nh.n_descsz);
        }
        return std::optional<std::string>(
            hex_of(std::span<const uint8_t>(notes).subspan(desc_at, nh.n_descsz)));
      }
      pos = next;
    }
  }
  return std::optional<std::string>{};
}

void CoreFile::State::check_build_ids() {
  for (uint32_t index = 0; index < files.size(); ++index) {
    MappedFile& f = files[index];
    if (!f.usable()) continue;
    const Mapping* first = nullptr;
    for (const Mapping& m : mappings) {
      if (m.file_index == index && m.file_offset == 0) {
        first = &m;
        break;
      }
    }
    if (first == nullptr) continue;  // stays Unverified
    auto in_core = build_id_in_core(first->start);
    if (!in_core.ok()) {
      f.check = FileCheck::Mismatch;
      f.error = fmt::format("{}: {}", f.resolved, in_core.message());
    } else if (!in_core->has_value()) {
      continue;  // stays Unverified
    } else {
      f.core_build_id = **in_core;
      const auto& file_id = f.elf->build_id();
      if (!file_id) {
        f.check = FileCheck::Mismatch;
        f.error = fmt::format("{} has no build-id, but the core's mapping at {:#x} has {}",
                              f.resolved, first->start, *f.core_build_id);
      } else if (*file_id != *f.core_build_id) {
        f.check = FileCheck::Mismatch;
        f.error = fmt::format("build-id mismatch: the core's mapping at {:#x} has {}, {} has {}",
                              first->start, *f.core_build_id, f.resolved, *file_id);
      } else {
        f.check = FileCheck::Verified;
        continue;
      }
    }
    f.elf.reset();
    diagnostics.push_back(fmt::format("{}: mapped file {} refused: {}", path, f.path, f.error));
  }
}

}  // namespace ljprof::core
