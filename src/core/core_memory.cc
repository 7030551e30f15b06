// CoreFile's memory by address: the core's PT_LOAD segments, and reads that take each byte from
// the core, or else from the file mapped there.
#include <elf.h>

#include <algorithm>
#include <cstring>

#include "common/bounds.h"
#include "core/core_file_internal.h"

namespace ljprof::core {

Status CoreFile::State::parse_segments() {
  const uint64_t size = bytes().size();
  uint64_t truncated = 0;
  for (const elf::Segment& seg : elf->segments()) {
    if (seg.type != PT_LOAD || seg.memsz == 0) continue;
    LoadSegment s{seg.vaddr, seg.memsz, seg.filesz, seg.offset, 0, (seg.flags & PF_W) != 0};
    if (seg.filesz != 0) {
      if (seg.offset >= size) {
        s.present = 0;
      } else {
        s.present = std::min(seg.filesz, size - seg.offset);
      }
      if (s.present < seg.filesz && ++truncated == 1) {
        diagnostics.push_back(fmt::format(
            "{}: core file truncated: PT_LOAD {:#x}..{:#x} should hold {:#x} bytes at offset "
            "{:#x} but the file has {} bytes; the missing part is unreadable",
            path, seg.vaddr, seg.vaddr + seg.memsz, seg.filesz, seg.offset, size));
      }
    }
    segments.push_back(s);
  }
  if (truncated > 1) {
    diagnostics.push_back(
        fmt::format("{}: core file truncated: {} more PT_LOAD segments lack "
                    "some or all of their bytes",
                    path, truncated - 1));
  }
  std::sort(segments.begin(), segments.end(),
            [](const LoadSegment& a, const LoadSegment& b) { return a.vaddr < b.vaddr; });
  for (size_t i = 1; i < segments.size(); ++i) {
    const LoadSegment& prev = segments[i - 1];
    if (segments[i].vaddr < prev.vaddr + prev.memsz) {
      return make_error(
          "{}: inconsistent core: PT_LOAD {:#x}..{:#x} overlaps PT_LOAD {:#x}..{:#x} (the rule: "
          "load segments of a core must not overlap)",
          path, segments[i].vaddr, segments[i].vaddr + segments[i].memsz, prev.vaddr,
          prev.vaddr + prev.memsz);
    }
  }
  return Ok{};
}

const LoadSegment* CoreFile::State::segment_at(uint64_t addr) const {
  auto it = std::upper_bound(segments.begin(), segments.end(), addr,
                             [](uint64_t a, const LoadSegment& s) { return a < s.vaddr; });
  if (it == segments.begin()) return nullptr;
  --it;
  return addr - it->vaddr < it->memsz ? &*it : nullptr;
}

const LoadSegment* CoreFile::State::segment_after(uint64_t addr) const {
  auto it = std::upper_bound(segments.begin(), segments.end(), addr,
                             [](uint64_t a, const LoadSegment& s) { return a < s.vaddr; });
  return it == segments.end() ? nullptr : &*it;
}

const Mapping* CoreFile::State::mapping_at(uint64_t addr) const {
  auto it = std::upper_bound(mappings.begin(), mappings.end(), addr,
                             [](uint64_t a, const Mapping& m) { return a < m.start; });
  if (it == mappings.begin()) return nullptr;
  --it;
  return addr < it->end ? &*it : nullptr;
}

// Only the core's own bytes, all or nothing.
bool CoreFile::State::core_read(uint64_t addr, void* dst, size_t len) const {
  uint8_t* out = static_cast<uint8_t*>(dst);
  size_t done = 0;
  while (done < len) {
    const uint64_t a = addr + done;
    if (a < addr) return false;  // wrapped
    const LoadSegment* seg = segment_at(a);
    if (seg == nullptr) return false;
    const uint64_t rel = a - seg->vaddr;
    if (rel >= seg->present) return false;
    const size_t n = std::min<uint64_t>(len - done, seg->present - rel);
    std::memcpy(out + done, bytes().data() + seg->offset + rel, n);
    done += n;
  }
  return true;
}

Result<size_t> CoreFile::State::read_piece(uint64_t addr, uint8_t* dst, size_t want) const {
  const LoadSegment* seg = segment_at(addr);
  uint64_t limit = UINT64_MAX;  // where core bytes may start again
  if (seg != nullptr) {
    const uint64_t rel = addr - seg->vaddr;
    if (rel < seg->present) {
      const size_t n = std::min<uint64_t>(want, seg->present - rel);
      std::memcpy(dst, bytes().data() + seg->offset + rel, n);
      return n;
    }
    if (rel < seg->filesz) {
      return make_error(
          "{}: {:#x}: the core file is truncated: its PT_LOAD {:#x}..{:#x} should hold this byte "
          "at file offset {:#x}, past the end of the file ({} bytes)",
          path, addr, seg->vaddr, seg->vaddr + seg->memsz, seg->offset + rel, bytes().size());
    }
    limit = seg->vaddr + seg->memsz;
  } else if (const LoadSegment* next = segment_after(addr)) {
    limit = next->vaddr;
  }
  const Mapping* m = mapping_at(addr);
  if (m == nullptr) {
    return make_error("{}: {:#x}: not in the core ({}) and not in a file mapping", path, addr,
                      seg ? "its PT_LOAD holds no bytes here" : "no PT_LOAD");
  }
  const MappedFile& f = files[m->file_index];
  if (!f.usable()) {
    return make_error(
        "{}: {:#x}: the core holds no bytes here and the mapped file {} ({}..{}) is {}: {}", path,
        addr, f.path, fmt::format("{:#x}", m->start), fmt::format("{:#x}", m->end),
        file_check_name(f.check), f.error.empty() ? "mapped files not opened" : f.error);
  }
  const uint64_t off = m->file_offset + (addr - m->start);
  const uint64_t fsize = f.elf->bytes().size();
  if (off < m->file_offset || off >= fsize) {
    return make_error(
        "{}: {:#x}: maps file offset {:#x} of {}, past its end ({} bytes; the process would get "
        "SIGBUS)",
        path, addr, off, f.resolved, fsize);
  }
  const size_t n = std::min({uint64_t{want}, m->end - addr, fsize - off, limit - addr});
  std::memcpy(dst, f.elf->bytes().data() + off, n);
  return n;
}

Result<size_t> CoreFile::State::read(uint64_t addr, void* dst, size_t len) const {
  uint64_t end;
  if (len > Limits::kMaxRead || add_overflows(addr, len, &end)) {
    return make_error("{}: read of {} bytes at {:#x}: too long or wraps around", path, len, addr);
  }
  if (live) {
    if (read_live(addr, dst, static_cast<uint32_t>(len)) != 0) {
      return make_error("{}: {:#x}: {} bytes are not readable in its memory", path, addr, len);
    }
    return len;
  }
  uint8_t* out = static_cast<uint8_t*>(dst);
  size_t done = 0;
  while (done < len) {  // every piece is at least one byte
    auto n = read_piece(addr + done, out + done, len - done);
    if (!n.ok()) return n.error();
    done += *n;
  }
  return len;
}

Result<uint64_t> CoreFile::State::read_u64(uint64_t addr) const {
  uint64_t v = 0;
  LJ_TRY(read(addr, &v, sizeof(v)));
  return v;
}

Result<std::string> CoreFile::State::read_c_string(uint64_t addr, size_t max_len) const {
  std::string s;
  char chunk[64];
  while (s.size() <= max_len) {
    // Read up to the end of the 64-byte block so a string ending just before an unreadable
    // page is still found.
    const size_t n = 64 - ((addr + s.size()) & 63);
    auto got = read(addr + s.size(), chunk, n);
    if (!got.ok()) return got.error();
    const void* nul = std::memchr(chunk, 0, n);
    if (nul != nullptr) {
      s.append(chunk, static_cast<const char*>(nul) - chunk);
      if (s.size() > max_len) break;
      return s;
    }
    s.append(chunk, n);
  }
  return make_error("{}: string at {:#x} is longer than {} bytes", path, addr, max_len);
}

}  // namespace ljprof::core
