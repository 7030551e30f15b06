#include "core/thread_pointers.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <optional>

namespace ljprof::core {
namespace {

// How much of the top of a mapping is looked at (sizeof(struct pthread) is about 2.3 KiB; the
// static TLS block lies below it), and the block's alignment (nptl TCB_ALIGNMENT).
constexpr uint64_t kTopBytes = 8192;
constexpr uint64_t kTcbAlign = 64;

// Where struct pthread keeps `tid`: libc's _thread_db_pthread_tid, nptl_db/structs.def
// DB_STRUCT_FIELD (pthread, tid) = {bits, count, offset} ({32, 1, 720} in Debian 12's glibc).
std::optional<uint64_t> pthread_tid_offset(const CoreFile& core) {
  for (uint32_t i = 0; i < core.files().size(); ++i) {
    const MappedFile& f = core.files()[i];
    if (!f.usable()) continue;
    const elf::Symbol* sym = f.elf->find_symbol("_thread_db_pthread_tid");
    if (sym == nullptr || !sym->defined() || sym->size != 12) continue;
    auto bias = core.load_bias(i);
    if (!bias.ok()) continue;
    std::array<uint32_t, 3> field{};
    if (!core.read(*bias + sym->value, field.data(), sizeof field).ok()) continue;
    if (field[0] == 32 && field[1] == 1 && field[2] + 4 <= kTopBytes) return field[2];
  }
  return std::nullopt;
}

// Whether `tid` is a thread of process `pid` now (tgkill with signal 0 sends nothing).
bool thread_alive(uint32_t pid, uint32_t tid) {
  return ::syscall(SYS_tgkill, pid, tid, 0) == 0 || errno == EPERM;
}

}  // namespace

Result<std::vector<LiveThread>> live_threads(const CoreFile& core) {
  const std::optional<uint32_t> pid = core.live_pid();
  if (!pid) return make_error("{}: not a running process", core.path());
  if (core.arch() != elf::Arch::X86_64) {
    return make_error("{}: threads are found by glibc's x86-64 thread control block only",
                      core.path());
  }
  const std::optional<uint64_t> tid_offset = pthread_tid_offset(core);
  if (!tid_offset) {
    return make_error(
        "{}: no mapped libc exports _thread_db_pthread_tid, so a live thread's control block "
        "cannot be told from an exited one's",
        core.path());
  }
  std::vector<LiveThread> out;
  std::array<uint64_t, kTopBytes / 8> words{};
  for (const AddressRange& r : core.anonymous_writable()) {
    if (r.end - r.start < kTopBytes) continue;
    const uint64_t base = r.end - kTopBytes;
    if (!core.read(base, words.data(), kTopBytes).ok()) continue;
    for (uint64_t off = 0; off + *tid_offset + 4 <= kTopBytes; off += kTcbAlign) {
      const uint64_t p = base + off;
      if (words[off / 8] != p || words[off / 8 + 2] != p) continue;
      uint32_t tid = 0;
      std::memcpy(&tid, reinterpret_cast<const uint8_t*>(words.data()) + off + *tid_offset, 4);
      if (tid != 0 && thread_alive(*pid, tid)) out.push_back({p, tid});
    }
  }
  return out;
}

}  // namespace ljprof::core
