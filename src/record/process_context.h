// record/process_context.h: what the recorder knows about one followed process — its
// executable file mappings with their unwind tables, the LuaJIT layout of the file that
// carries the VM, and a global_State hint — built from /proc/PID/maps and the mapped files.
// The same files are shared by every process that maps them (ObjectCache), so a fleet of nginx
// workers costs one table per file.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "cfi/cfi.h"
#include "cfi/table_cache.h"
#include "common/result.h"
#include "elf/elf_file.h"
#include "luajit/fiber_layout.h"
#include "luajit/proc_info.h"
#include "proc/proc_maps.h"

extern "C" {
#include "abi/luajit_info.h"
}

namespace ljprof::record {

// One mapped ELF file (identified by device and inode, so a replaced file on disk is a new
// object).
struct MappedObject {
  std::string path;
  // An object with no file ([vdso]): its bytes, read from the process; `elf` views them.
  std::vector<uint8_t> image;
  std::unique_ptr<elf::ElfFile> elf;
  // A stripped file's separate debug file, when installed, opened when a frame first needs a
  // name `elf` does not have (symbolize::native_symbol).
  elf::LazyDebugFile debug;
  std::string error;            // why `elf` or `table` is missing
  uint32_t opened_through = 0;  // the process whose /proc/PID/map_files it was opened by
  // The mapping it was opened through: a failed open is tried again through another one (the
  // loader may have replaced a mapping between the maps read and the open: its map_files entry
  // is gone).
  uint64_t opened_start = 0, opened_end = 0;
  std::optional<cfi::UnwindTable> table;
  std::optional<luajit::LuaJITProcInfo> luajit;  // set when this file carries the LuaJIT VM
  std::string luajit_error;
  lj_luajit_info info{};
  // Tarantool: where the tx thread's running fiber is (luajit/fiber_layout.h), for the samples'
  // fiber labels; absent with the reason in fiber_error when the build does not tell.
  std::optional<luajit::FiberLayout> fibers;
  std::string fiber_error;
  // Where the recorder put this file's rows in the kernel's row table (record/unwind_rows.h):
  // while a followed process maps the file, and freed (uploaded false again) once none has for a
  // while; a later mapping uploads them again.
  bool uploaded = false;
  bool upload_failed = false;  // writing them failed: not tried again
  bool no_room = false;        // they did not fit: tried again at each publish, counted once
  uint32_t row_first = 0;
  uint32_t row_count = 0;
  uint64_t unmapped_since_ns = 0;  // UnwindRows: when it first saw no context map it (0: mapped)
  // Live ProcessContexts whose modules map this file (build_process_context counts them,
  // ~ProcessContext uncounts them). Rows and cache entry are only given back at 0.
  uint32_t contexts = 0;
  uint64_t last_used = 0;  // ObjectCache's use count when a context last took it (LRU pruning)

  // What the agent holds for it on its heap (symbols, function ranges, rows, layout, image).
  uint64_t held_bytes() const;
};

class ObjectCache {
 public:
  // The object for a mapping of process `pid`, opened through /proc/PID/map_files (so a file
  // in another mount namespace or deleted since it was mapped is still the right one) and
  // analysed once: ELF, LuaJIT detection and layout, unwind table (VM hints for the LuaJIT
  // file). Never null; a failure is recorded in `error`.
  MappedObject* get(uint32_t pid, const proc::MapEntry& map);
  // The kernel's vDSO mapped at `map` (an ELF image with .eh_frame and .dynsym: samples in
  // clock_gettime / gettimeofday, or in the syscall fallback of a CPU-time clock, unwind
  // through it). Read from the process's memory, at most kMaxVdsoBytes; keyed by content.
  MappedObject* get_vdso(const proc::MapEntry& map, const proc::ProcessMemory& mem);
  static constexpr uint64_t kMaxVdsoBytes = 1u << 20;
  // Whether the file of a mapping links LuaJIT in (it defines lua_close), without analysing it
  // further: `record -a` and the agent ask this of every executable mapping on the host, and
  // only a file that says yes is worth its unwind table and layout (get). Remembered per file.
  bool links_luajit(uint32_t pid, const proc::MapEntry& map);
  size_t size() const { return objects_.size() + uncached_.size(); }
  // Every object held (the recorder's row sweep).
  void for_each(const std::function<void(MappedObject&)>& f);
  // Unwind tables of files analysed from now on come from `tables` and go into it (null: none).
  void use_table_cache(cfi::TableCache* tables) { tables_ = tables; }
  // Called with each file whose unwind table get() has just built or read (the recorder uploads
  // the rows at once and frees them, instead of holding every file's until the process is done).
  void on_table(std::function<void(MappedObject&)> f) { on_table_ = std::move(f); }
  // The rows of `obj`'s unwind table again after release_rows (its rows were freed in the kernel
  // and a process maps it again): from the table cache, else built as get() built them.
  Status reload_rows(MappedObject& obj);
  // How many unwind tables were built (not read from the table cache) so far: the recorder
  // gives the heap libdw used for them back to the system after an attach.
  uint64_t tables_built() const { return tables_built_; }

  // Drops objects no live context maps and whose rows are not in the kernel ("idle"), least
  // recently used first, while more than `max_idle` of them or more than `max_idle_bytes`
  // (held_bytes) are held. Each holds its file open and mapped (a deleted file's blocks stay
  // allocated while it does) and its symbols: an agent living across upgrades would otherwise
  // keep every binary it ever saw. The idle ones kept spare a re-analysis when the same file is
  // mapped again (a periodic job, a restarted service). Returns how many were dropped.
  size_t prune(size_t max_idle = kMaxIdleObjects, uint64_t max_idle_bytes = kMaxIdleBytes);
  static constexpr size_t kMaxIdleObjects = 32;
  static constexpr uint64_t kMaxIdleBytes = 16u << 20;
  uint64_t held_bytes() const;

 private:
  using Key = std::tuple<std::string, uint64_t, std::string>;
  // analyse_mapped_file into `obj` with tables_, then on_table_.
  void analyse(MappedObject& obj, uint32_t pid, const proc::MapEntry& map);
  MappedObject* used(MappedObject* obj) {
    obj->last_used = ++uses_;
    return obj;
  }
  std::function<void(MappedObject&)> on_table_;
  cfi::TableCache* tables_ = nullptr;
  std::map<Key, std::unique_ptr<MappedObject>> objects_;
  std::vector<std::unique_ptr<MappedObject>> uncached_;
  uint64_t uses_ = 0;
  uint64_t tables_built_ = 0;
  // Whether a file links LuaJIT: asked of every executable file any process on the host maps
  // (-a), so it is bounded too: past kMaxLinksLuajit answers it starts over (an answer costs
  // one ELF open to find again).
  std::map<Key, bool> links_luajit_;
  static constexpr size_t kMaxLinksLuajit = 8192;
};

struct ModuleView {
  uint64_t start = 0;
  uint64_t end = 0;
  uint64_t bias = 0;  // runtime = link-time + bias
  MappedObject* object = nullptr;
  // The mapping's file as the kernel knows it (proc::MapEntry inode, kernel_dev, offset): what
  // a library template is keyed by (record/kernel_contexts.h). 0 for the vDSO.
  uint64_t inode = 0;
  uint32_t dev = 0;
  uint64_t offset = 0;
};

struct ProcessContext {
  uint32_t pid = 0;
  std::string comm;                    // /proc/PID/comm
  std::vector<ModuleView> modules;     // executable file mappings, sorted by start
  const ModuleView* luajit = nullptr;  // the module carrying the VM, if any
  uint64_t g_hint = 0;
  std::unique_ptr<proc::ProcessMemory> mem;
  std::string signature;  // the executable mappings, to notice when they change
  // Unique per build of a context in this run: caches keyed by it (native symbols by pc, whole
  // raw stacks) never outlive an exec or a remap of the same pid.
  uint64_t generation = 0;
  std::vector<std::string> warnings;
  // Code mappings left out because their file could not be opened (in warnings too).
  size_t unread_modules = 0;

  ProcessContext() = default;
  ProcessContext(const ProcessContext&) = delete;
  ProcessContext& operator=(const ProcessContext&) = delete;
  // Uncounts its modules' objects (MappedObject::contexts): the ObjectCache they are in must
  // outlive it.
  ~ProcessContext();

  const ModuleView* module_at(uint64_t pc) const;
};

// A key describing the executable file mappings and the vDSO of `maps` (changes on
// dlopen/exec).
std::string executable_signature(const std::vector<proc::MapEntry>& maps);
// Whether every executable file mapping of `signature` (executable_signature) is still in
// `maps`: false after an exec or an munmap, true when code was only mapped in addition.
bool still_mapped(std::string_view signature, const std::vector<proc::MapEntry>& maps);

// The load bias of `map` (an executable mapping of `elf`): the PT_LOAD that starts inside the
// mapping gives it (same rule as core/core_file.cc CoreFile::load_bias).
Result<uint64_t> mapping_bias(const elf::ElfFile& elf, const proc::MapEntry& map);

Result<std::unique_ptr<ProcessContext>> build_process_context(uint32_t pid, ObjectCache& cache);

// True if `pid` maps a file that carries LuaJIT (for `record -a`).
bool maps_luajit(uint32_t pid, ObjectCache& cache);

}  // namespace ljprof::record
