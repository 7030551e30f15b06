#include "core/thread_pointers.h"

#include <fmt/format.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <optional>
#include <set>
#include <string>

namespace ljprof::core {
namespace {

constexpr uint32_t kMaxListNodes = 1u << 14;

// A field descriptor as nptl_db/structs.def DB_STRUCT_FIELD / DB_RTLD_GLOBAL_FIELD emits it:
// uint32_t {bits, count, offset}.
struct FieldDescriptor {
  uint32_t bits = 0, count = 0, offset = 0;
};

// Where the lists are and how to read them, from the mapped ld.so and libc.
struct ThreadListLayout {
  uint64_t rtld_global = 0;                 // runtime address of ld.so's _rtld_global
  uint32_t stack_used = 0, stack_user = 0;  // the two list heads' offsets in it
  uint32_t list_next = 0;                   // list_t.next
  uint32_t pthread_list = 0, pthread_tid = 0;
  uint64_t tp_from_pthread = 0;  // thread pointer - struct pthread address
};

// The symbol `name` defined in mapped file `index`, its file-relative address.
const elf::Symbol* defined_symbol(const CoreFile& core, uint32_t index, const char* name) {
  const MappedFile& f = core.files()[index];
  if (!f.usable()) return nullptr;
  const elf::Symbol* sym = f.elf->find_symbol(name);
  return sym != nullptr && sym->defined() ? sym : nullptr;
}

Result<FieldDescriptor> read_descriptor(const MappedFile& libc, const char* name, uint32_t bits) {
  const elf::Symbol* sym = libc.elf->find_symbol(name);
  if (sym == nullptr || !sym->defined() || sym->size != 12) {
    return make_error("{} exports no 12-byte {} (glibc's libthread_db descriptor)", libc.path,
                      name);
  }
  LJ_ASSIGN_OR_RETURN(std::span<const uint8_t> bytes, libc.elf->read(sym->value, 12));
  FieldDescriptor d;
  std::memcpy(&d, bytes.data(), sizeof d);
  if (d.bits != bits || d.count != 1 || d.offset > (1u << 16)) {
    return make_error("{}: {} is {{{}, {}, {}}}, expected {{{}, 1, offset < 65536}}", libc.path,
                      name, d.bits, d.count, d.offset, bits);
  }
  return d;
}

Result<ThreadListLayout> thread_list_layout(const CoreFile& core) {
  std::optional<uint32_t> ld, libc;
  for (uint32_t i = 0; i < core.files().size(); ++i) {
    if (!ld && defined_symbol(core, i, "_rtld_global")) ld = i;
    if (!libc && defined_symbol(core, i, "_thread_db_pthread_list")) libc = i;
  }
  if (!ld || !libc) {
    return make_error(
        "{}: no mapped {} (glibc's thread list is read as libthread_db reads it: a static or "
        "non-glibc program has none)",
        core.path(),
        !ld ? "ld.so exports _rtld_global" : "libc exports the _thread_db_* descriptors");
  }
  const MappedFile& c = core.files()[*libc];
  ThreadListLayout l;
  LJ_ASSIGN_OR_RETURN(const uint64_t ld_bias, core.load_bias(*ld));
  l.rtld_global = ld_bias + defined_symbol(core, *ld, "_rtld_global")->value;
  LJ_ASSIGN_OR_RETURN(FieldDescriptor used,
                      read_descriptor(c, "_thread_db_rtld_global__dl_stack_used", 128));
  LJ_ASSIGN_OR_RETURN(FieldDescriptor user,
                      read_descriptor(c, "_thread_db_rtld_global__dl_stack_user", 128));
  LJ_ASSIGN_OR_RETURN(FieldDescriptor next, read_descriptor(c, "_thread_db_list_t_next", 64));
  LJ_ASSIGN_OR_RETURN(FieldDescriptor list, read_descriptor(c, "_thread_db_pthread_list", 128));
  LJ_ASSIGN_OR_RETURN(FieldDescriptor tid, read_descriptor(c, "_thread_db_pthread_tid", 32));
  l.stack_used = used.offset;
  l.stack_user = user.offset;
  l.list_next = next.offset;
  l.pthread_list = list.offset;
  l.pthread_tid = tid.offset;
  if (core.arch() == elf::Arch::AArch64) {
    // uint32_t _thread_db_const_thread_area = sizeof(struct pthread) on AArch64; gdb's
    // aarch64_ps_get_thread_area gives libthread_db TPIDR_EL0 minus it.
    const elf::Symbol* area = c.elf->find_symbol("_thread_db_const_thread_area");
    if (area == nullptr || !area->defined() || area->size != 4) {
      return make_error("{} exports no 4-byte _thread_db_const_thread_area", c.path);
    }
    LJ_ASSIGN_OR_RETURN(std::span<const uint8_t> bytes, c.elf->read(area->value, 4));
    uint32_t size = 0;
    std::memcpy(&size, bytes.data(), 4);
    if (size < l.pthread_tid + 4 || size > (1u << 16)) {
      return make_error("{}: _thread_db_const_thread_area {} is no sizeof(struct pthread)", c.path,
                        size);
    }
    l.tp_from_pthread = size;
  }
  return l;
}

// Whether `tid` is a thread of process `pid` now (tgkill with signal 0 sends nothing).
bool thread_alive(uint32_t pid, uint32_t tid) {
  return ::syscall(SYS_tgkill, pid, tid, 0) == 0 || errno == EPERM;
}

// Appends the threads on the list whose head is at `head`.
Status read_list(const CoreFile& core, const ThreadListLayout& l, uint64_t head,
                 std::vector<ListedThread>& out) {
  LJ_ASSIGN_OR_RETURN(uint64_t node, core.read_u64(head + l.list_next));
  for (uint32_t n = 0; node != head; ++n) {
    if (n == kMaxListNodes || node == 0 || (node & 7) != 0 || node < l.pthread_list) {
      return make_error(
          "glibc's thread list at {:#x}: node {} is {:#x} (misaligned, null, or past {} nodes "
          "without returning to the head)",
          head, n, node, kMaxListNodes);
    }
    const uint64_t pthread = node - l.pthread_list;
    LJ_ASSIGN_OR_RETURN(const uint32_t tid, core.read_u32(pthread + l.pthread_tid));
    if (tid != 0) out.push_back({pthread + l.tp_from_pthread, tid});
    LJ_ASSIGN_OR_RETURN(node, core.read_u64(node + l.list_next));
  }
  return Ok{};
}

// The tid offset in struct pthread as libc (or, before glibc 2.34, libpthread) publishes it.
std::optional<uint32_t> pthread_tid_offset(const CoreFile& core) {
  for (uint32_t i = 0; i < core.files().size(); ++i) {
    const MappedFile& f = core.files()[i];
    if (!f.usable() || defined_symbol(core, i, "_thread_db_pthread_tid") == nullptr) continue;
    auto tid = read_descriptor(f, "_thread_db_pthread_tid", 32);
    if (tid.ok()) return tid->offset;
  }
  return std::nullopt;
}

// The lists' descriptors are missing (not the list unreadable): fall back to the TCB scan.
bool lists_unpublished(const CoreFile& core) {
  for (uint32_t i = 0; i < core.files().size(); ++i) {
    if (defined_symbol(core, i, "_thread_db_rtld_global__dl_stack_used") != nullptr) return false;
  }
  return true;
}

}  // namespace

Result<std::vector<ListedThread>> x86_tcb_threads(const CoreFile& core) {
  // How much of the top of a mapping is looked at (sizeof(struct pthread) is about 2.3 KiB; the
  // static TLS block lies below it), and the block's alignment (nptl TCB_ALIGNMENT).
  constexpr uint64_t kTopBytes = 8192, kTcbAlign = 64;
  const std::optional<uint32_t> pid = core.live_pid();
  if (!pid || core.arch() != elf::Arch::X86_64) {
    return make_error("{}: the thread control block scan is for a running x86-64 process",
                      core.path());
  }
  const std::optional<uint32_t> tid_offset = pthread_tid_offset(core);
  if (!tid_offset || *tid_offset + 4 > kTopBytes) {
    return make_error(
        "{}: no mapped libc or libpthread exports _thread_db_pthread_tid, so a live thread's "
        "control block cannot be told from an exited one's",
        core.path());
  }
  std::vector<ListedThread> out;
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

Result<std::vector<ListedThread>> glibc_threads(const CoreFile& core) {
  if (core.live_pid() && core.arch() == elf::Arch::X86_64 && lists_unpublished(core)) {
    return x86_tcb_threads(core);
  }
  LJ_ASSIGN_OR_RETURN(const ThreadListLayout l, thread_list_layout(core));
  std::vector<ListedThread> listed;
  LJ_TRY(read_list(core, l, l.rtld_global + l.stack_used, listed));
  LJ_TRY(read_list(core, l, l.rtld_global + l.stack_user, listed));
  std::set<uint32_t> in_core;
  for (const Thread& t : core.threads()) in_core.insert(t.tid);
  const std::optional<uint32_t> pid = core.live_pid();
  std::vector<ListedThread> out;
  for (const ListedThread& t : listed) {
    if (pid ? thread_alive(*pid, t.tid) : in_core.count(t.tid) != 0) out.push_back(t);
  }
  return out;
}

}  // namespace ljprof::core
