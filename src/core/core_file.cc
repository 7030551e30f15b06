// CoreFile: opening a core (notes, then mappings, then build-id checks) and its public accessors.
#include "core/core_file.h"

#include <elf.h>

#include <cstring>

#include "core/core_file_internal.h"

namespace ljprof::core {

CoreFile::CoreFile(std::unique_ptr<State> state) : state_(std::move(state)) {}
CoreFile::CoreFile(CoreFile&&) noexcept = default;
CoreFile& CoreFile::operator=(CoreFile&&) noexcept = default;
CoreFile::~CoreFile() = default;

Result<CoreFile> CoreFile::open(const std::string& path, const CoreOptions& options) {
  LJ_ASSIGN_OR_RETURN(auto elf, elf::ElfFile::open(path));
  return from_elf(std::move(elf), options);
}

Result<CoreFile> CoreFile::from_memory(std::span<const uint8_t> bytes, std::string name,
                                       const CoreOptions& options) {
  LJ_ASSIGN_OR_RETURN(auto elf, elf::ElfFile::from_memory(bytes, std::move(name)));
  return from_elf(std::move(elf), options);
}

Result<CoreFile> CoreFile::from_elf(std::unique_ptr<elf::ElfFile> elf, const CoreOptions& options) {
  auto st = std::make_unique<State>();
  st->path = elf->path();
  st->options = options;
  if (elf->type() != ET_CORE) {
    return make_error("{}: not a core file (e_type {}, expected ET_CORE {})", st->path, elf->type(),
                      ET_CORE);
  }
  st->arch = elf->arch();
  st->elf = std::move(elf);
  LJ_TRY(st->parse_segments());
  LJ_TRY(st->parse_notes());
  if (st->have_nt_file) {
    LJ_TRY(st->build_nt_file_mappings());
  } else {
    st->build_link_map_mappings();
  }
  if (st->options.open_mapped_files) st->check_build_ids();
  return CoreFile(std::move(st));
}

const std::string& CoreFile::path() const {
  return state_->path;
}
elf::Arch CoreFile::arch() const {
  return state_->arch;
}
std::optional<uint32_t> CoreFile::live_pid() const {
  if (!state_->live) return std::nullopt;
  return state_->live->pid();
}
std::span<const Thread> CoreFile::threads() const {
  return state_->threads;
}
const std::optional<ProcessInfo>& CoreFile::process() const {
  return state_->process;
}
const std::optional<SignalInfo>& CoreFile::signal() const {
  return state_->signal;
}
std::span<const AuxEntry> CoreFile::auxv() const {
  return state_->auxv;
}
std::optional<uint64_t> CoreFile::auxv_value(uint64_t type) const {
  return state_->aux(type);
}
MappingSource CoreFile::mapping_source() const {
  return state_->source;
}
std::span<const Mapping> CoreFile::mappings() const {
  return state_->mappings;
}
std::span<const MappedFile> CoreFile::files() const {
  return state_->files;
}
const Mapping* CoreFile::mapping_at(uint64_t addr) const {
  return state_->mapping_at(addr);
}
const MappedFile& CoreFile::file_of(const Mapping& mapping) const {
  return state_->files[mapping.file_index];
}
std::vector<AddressRange> CoreFile::anonymous_writable() const {
  const State& st = *state_;
  if (st.live) return st.live_anonymous_writable;
  std::vector<AddressRange> out;
  for (const LoadSegment& seg : st.segments) {
    if (seg.writable && seg.present != 0 && st.mapping_at(seg.vaddr) == nullptr) {
      out.push_back({seg.vaddr, seg.vaddr + seg.present});
    }
  }
  return out;
}
const MappedFile* CoreFile::executable() const {
  return state_->exe_index < 0 ? nullptr : &state_->files[state_->exe_index];
}
Result<FileAddress> CoreFile::file_address(uint64_t addr) const {
  const Mapping* m = state_->mapping_at(addr);
  if (m == nullptr) {
    return make_error("{}: {:#x} is in no file mapping", state_->path, addr);
  }
  const MappedFile& f = file_of(*m);
  if (!f.usable()) {
    return make_error("{}: {:#x} is in {}, which is {}: {}", state_->path, addr, f.path,
                      file_check_name(f.check), f.error);
  }
  const uint64_t off = m->file_offset + (addr - m->start);
  for (const elf::Segment& seg : f.elf->segments()) {
    if (seg.type == PT_LOAD && off >= seg.offset && off - seg.offset < seg.filesz) {
      return FileAddress{&f, off, seg.vaddr + (off - seg.offset)};
    }
  }
  return make_error("{}: {:#x} maps file offset {:#x} of {}, which no PT_LOAD of the file holds",
                    state_->path, addr, off, f.resolved);
}

Result<uint64_t> CoreFile::load_bias(uint32_t file_index) const {
  if (file_index >= state_->files.size()) {
    return make_error("{}: no mapped file {}", state_->path, file_index);
  }
  const MappedFile& f = state_->files[file_index];
  if (!f.usable()) {
    return make_error("{}: {} is {}: {}", state_->path, f.path, file_check_name(f.check), f.error);
  }
  for (const Mapping& m : state_->mappings) {
    if (m.file_index != file_index) continue;
    for (const elf::Segment& seg : f.elf->segments()) {
      if (seg.type != PT_LOAD || seg.offset < m.file_offset ||
          seg.offset - m.file_offset >= m.end - m.start) {
        continue;
      }
      // The byte at file offset p_offset is at m.start + (p_offset - file_offset) and links at
      // p_vaddr.
      return m.start + (seg.offset - m.file_offset) - seg.vaddr;
    }
  }
  return make_error("{}: no mapping of {} holds the start of one of its PT_LOAD segments",
                    state_->path, f.path);
}

std::span<const std::string> CoreFile::diagnostics() const {
  return state_->diagnostics;
}
Result<size_t> CoreFile::read(uint64_t addr, void* dst, size_t len) const {
  return state_->read(addr, dst, len);
}
Result<uint64_t> CoreFile::read_u64(uint64_t addr) const {
  return state_->read_u64(addr);
}
Result<uint32_t> CoreFile::read_u32(uint64_t addr) const {
  uint32_t v = 0;
  LJ_TRY(state_->read(addr, &v, sizeof(v)));
  return v;
}
Result<std::string> CoreFile::read_c_string(uint64_t addr, size_t max_len) const {
  return state_->read_c_string(addr, max_len);
}
bool CoreFile::core_has(uint64_t addr) const {
  uint8_t b;
  return state_->core_read(addr, &b, 1);
}

CoreFile::InPlaceBytes CoreFile::in_place_at(uint64_t addr) const {
  if (state_->live) return {};
  const LoadSegment* seg = state_->segment_at(addr);
  if (seg == nullptr || addr - seg->vaddr >= seg->present) return {};
  return {seg->vaddr, state_->bytes().subspan(seg->offset, seg->present)};
}

// The same contract as ljprof_core_read_mem, over the State (stable across moves of CoreFile).
int CoreFile::read_mem_of_state(void* ctx, uint64_t addr, void* dst, uint32_t len) {
  if (ctx == nullptr || dst == nullptr) return -14;  // -EFAULT
  if (static_cast<const CoreFile::State*>(ctx)->read(addr, dst, len).ok()) return 0;
  std::memset(dst, 0, len);
  return -14;  // -EFAULT, as bpf_probe_read_user
}

int CoreFile::read_live_of_state(void* ctx, uint64_t addr, void* dst, uint32_t len) {
  return static_cast<const CoreFile::State*>(ctx)->read_live(addr, dst, len);
}

ljprof_mem_reader CoreFile::mem_reader() const {
  // A live process: its memory (or the prefetched batch), without a Result per read.
  if (state_->live) return ljprof_mem_reader{&read_live_of_state, state_.get()};
  return ljprof_mem_reader{&read_mem_of_state, state_.get()};
}

}  // namespace ljprof::core

extern "C" int ljprof_core_read_mem(void* ctx, uint64_t addr, void* dst, uint32_t len) {
  const auto* core = static_cast<const ljprof::core::CoreFile*>(ctx);
  if (core == nullptr || dst == nullptr) return -14;  // -EFAULT
  if (core->read(addr, dst, len).ok()) return 0;
  std::memset(dst, 0, len);
  return -14;  // -EFAULT, as bpf_probe_read_user
}
