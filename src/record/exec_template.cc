#include "record/exec_template.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <cstring>
#include <fstream>
#include <iterator>

#include <fmt/format.h>

namespace ljprof::record {

Result<std::vector<uint64_t>> read_auxv(uint32_t pid) {
  const std::string path = fmt::format("/proc/{}/auxv", pid);
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error("{}: cannot open", path);
  // A few hundred bytes in every kernel (AT_VECTOR_SIZE pairs); 4 KiB bounds a hostile /proc.
  std::vector<char> bytes(4096);
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  bytes.resize(static_cast<size_t>(in.gcount()));
  std::vector<uint64_t> words(bytes.size() / 8);
  if (!words.empty()) std::memcpy(words.data(), bytes.data(), words.size() * 8);
  for (size_t i = 0; i + 1 < words.size(); i += 2) {
    if (words[i] == 0) {
      words.resize(i);
      return words;
    }
  }
  return make_error("{}: no AT_NULL in its first {} bytes", path, bytes.size());
}

Result<lj_rec_exec_key> exec_key(uint32_t pid) {
  const std::string path = fmt::format("/proc/{}/exe", pid);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return make_error("{}: cannot stat: {}", path, std::strerror(errno));
  }
  lj_rec_exec_key key{};
  key.ino = st.st_ino;
  key.dev = (major(st.st_dev) << 20) | minor(st.st_dev);
  return key;
}

uint64_t auxv_value(std::span<const uint64_t> auxv, uint64_t type) {
  for (size_t i = 0; i + 1 < auxv.size(); i += 2) {
    if (auxv[i] == type) return auxv[i + 1];
  }
  return 0;
}

namespace {

// The anchor that places module `m` (LJ_REC_ANCHOR_*, an AT_* type), or 0.
uint32_t anchor_of(const ModuleView& m, const MappedObject* exe, uint64_t exe_bias,
                   std::span<const uint64_t> auxv) {
  const uint64_t base = auxv_value(auxv, LJ_REC_ANCHOR_BASE);
  if (m.object == exe && m.bias == exe_bias) return LJ_REC_ANCHOR_ENTRY;
  if (base != 0 && m.bias == base && m.object != exe) return LJ_REC_ANCHOR_BASE;
  if (m.start == auxv_value(auxv, LJ_REC_ANCHOR_VDSO) && m.object->image.size() != 0) {
    return LJ_REC_ANCHOR_VDSO;
  }
  return 0;
}

}  // namespace

Result<lj_rec_exec_template> exec_template(const ProcessContext& ctx,
                                           std::span<const uint64_t> auxv) {
  const uint64_t entry = auxv_value(auxv, LJ_REC_ANCHOR_ENTRY);
  const MappedObject* exe = nullptr;
  uint64_t exe_bias = 0;
  for (const ModuleView& m : ctx.modules) {
    if (entry >= m.start && entry < m.end) {
      exe = m.object;
      exe_bias = m.bias;
    }
  }
  if (exe == nullptr) {
    return make_error("pid {}: no executable mapping holds its entry point {:#x} (AT_ENTRY)",
                      ctx.pid, entry);
  }
  lj_rec_exec_template t{};
  bool has_exe = false;
  for (const ModuleView& m : ctx.modules) {
    const uint32_t anchor = anchor_of(m, exe, exe_bias, auxv);
    if (anchor == 0 || !m.object->uploaded || t.nmodules >= LJ_REC_EXEC_MODULES) continue;
    lj_rec_exec_module& out = t.modules[t.nmodules];
    out.link_start = m.start - m.bias;
    out.link_end = m.end - m.bias;
    out.delta = static_cast<int64_t>(m.bias - auxv_value(auxv, anchor));
    out.anchor = anchor;
    out.row_first = m.object->row_first;
    out.row_count = m.object->row_count;
    has_exe = has_exe || anchor == LJ_REC_ANCHOR_ENTRY;
    if (ctx.luajit != nullptr && ctx.luajit->start == m.start) {
      t.lj = m.object->info;
      t.vm_module = t.nmodules;
    }
    ++t.nmodules;
  }
  if (!has_exe) {
    return make_error("pid {}: its executable's rows are not in the kernel", ctx.pid);
  }
  return t;
}

}  // namespace ljprof::record
