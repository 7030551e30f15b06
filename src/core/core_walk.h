// Core mode: runs the one walker (bpf/walker, compiled natively in native_walk.c) over every
// thread of a core file and symbolizes the frames.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cfi/cfi.h"
#include "cfi/table_cache.h"
#include "common/result.h"
#include "core/core_file.h"
#include "core/fiber_list.h"
#include "luajit/fiber_layout.h"
#include "luajit/proc_info.h"
#include "symbolize/frame.h"
#include "symbolize/source_line.h"

struct lj_walk_result;
struct lj_walk_env;

namespace ljprof::core {

class CoreFrameSource;

struct ThreadStack {
  uint32_t tid = 0;
  int32_t signal = 0;
  std::vector<symbolize::Frame> frames;
  std::string end;  // how the walk ended: "root", "no CFI at 0x…", ...
  bool reached_root = false;
  uint64_t g = 0;  // the global_State the walk proved (0: none)
};

// A lua_State on G's GC list that is not the running one: a coroutine, or a Tarantool fiber's
// state (ljprof core --all-fibers).
struct CoroutineStack {
  uint64_t lua_state = 0;
  std::string status;  // as coroutine.status() words it: "suspended" or "normal"
  ThreadStack stack;   // Lua and C-function frames only; reached_root: its stack's bottom
};

struct CoroutineList {
  std::vector<CoroutineStack> coroutines;
  uint64_t objects = 0;      // GC objects visited
  uint64_t not_started = 0;  // created, never resumed (no frames)
  uint64_t dead = 0;         // finished or died with an error (no frames)
};

class CoreWalker {
 public:
  // Prepares unwind tables for the mapped files and extracts the LuaJIT layout from the file
  // that carries LuaJIT (the executable for tarantool/luajit, libluajit for nginx).
  // Tables come from and go into `tables` when given (cfi/table_cache.h).
  static Result<std::unique_ptr<CoreWalker>> create(const CoreFile& core,
                                                    cfi::TableCache* tables = nullptr);

  ThreadStack walk(const Thread& thread) const;
  // Every lua_State on the GC list of `g` (global_State.gc.root, then GCHeader.nextgc) except
  // G->cur_L, with its Lua frames (walker.h lj_walk_lua_state). An error when the layout has no
  // gc.root, or the list is unreadable or longer than the cap.
  Result<CoroutineList> walk_coroutines(uint64_t g) const;

  // The main cord's live fibers and its running fiber, for naming lua_States (--all-fibers).
  // An error (to show as the reason fibers are not named) when the executable is not Tarantool,
  // has no fiber layout, or the list in memory is unreadable, loops, holds over 1<<16 fibers, a
  // fid that is 0, repeated or absurd, or a name that is unreadable or unterminated: a corrupt
  // list never names anything.
  Result<FiberList> walk_fibers() const;
  // The runtime address of main_cord (0 without a fiber layout).
  uint64_t main_cord() const;
  // The struct cord `thread` runs: its TLS cord_ptr (src/lib/core/fiber.c), 0 for a thread that
  // runs none (a coio worker). The thread pointer is the core's (fs_base, NT_ARM_TLS) or, when
  // it has none (a qemu-user AArch64 core), glibc's thread list's. An error when the layout has
  // no cord_ptr, neither gives the thread's thread pointer, or the word is unreadable.
  Result<uint64_t> thread_cord(const Thread& thread) const;
  // The fiber list of the cord at `cord`, main_cord's when 0 (walk_fibers).
  Result<FiberList> walk_cord_fibers(uint64_t cord) const;
  // The cords other than main_cord that the process's threads run, each once, in address
  // order, with the thread that runs it: each thread's cord_ptr at its thread pointer (a core's
  // threads: thread_cord; a live process's: glibc's thread list, cord_scan.cc). An error when
  // the layout has no cord_ptr, or a live process's thread list could not be read.
  struct OtherCord {
    uint64_t cord = 0;  // struct cord address
    uint32_t tid = 0;   // the thread whose cord_ptr holds it
  };
  Result<std::vector<OtherCord>> other_cords() const;
  // The full stack (native and Lua frames) of a switched-out fiber of that list, walked from the
  // registers its coro_transfer saved at fiber.ctx.sp (x86-64 and AArch64 CORO_ASM). An error, one
  // line naming the fiber and the rule, when the saved words are unreadable or misaligned or the
  // walk does not end at a proven root (the caller keeps the fiber's Lua-only stack then).
  Result<ThreadStack> walk_fiber(const FiberName& fiber) const;
  // The Lua frames of one lua_State, from its own frame chain (walker.h lj_walk_lua_state).
  ThreadStack walk_lua_state(uint64_t lua_state) const;
  // `fiber` read again from memory (its fields as walk_fibers reads them), to tell whether it
  // changed while its stack was read in a live process.
  Result<FiberName> reread_fiber(const FiberName& fiber) const;
  // cord.fiber now of the cord at `cord`, main_cord's when 0 (0 when unreadable).
  uint64_t running_fiber(uint64_t cord = 0) const;
  // lua_State.stack, .base and .top of `lua_state` mixed into one word (0: unreadable or no
  // LuaJIT): its Lua stack was not moved (lj_state_shrinkstack) or changed while it is equal.
  uint64_t lua_stack_stamp(uint64_t lua_state) const;
  // A live process: reads in one batch what walk_fibers (walk_cord_fibers) and lua_stack_stamp
  // will read of the main cord (the cord at `cord`) and of `fibers` (a previous list), and
  // serves those reads from it until drop_prefetch() (core/core_file.h CoreFile::prefetch).
  // Does nothing for a core file.
  void prefetch_fibers(const std::vector<FiberName>& fibers, uint64_t cord = 0) const;
  void drop_prefetch() const { core_.drop_prefetch(); }
  // core/core_file.h CoreFile::cache_pages, for the reads of one walk of a live process.
  void cache_pages(bool on) const { core_.cache_pages(on); }
  // The file carrying LuaJIT is a Tarantool executable (so it has fibers to name).
  bool tarantool() const { return tarantool_; }

  const std::optional<luajit::LuaJITProcInfo>& luajit() const { return luajit_; }
  const std::string& luajit_file() const { return luajit_file_; }
  // Why LuaJIT frames cannot be walked (empty when luajit() is set or there is no LuaJIT).
  const std::string& luajit_error() const { return luajit_error_; }
  // The global_State proven from a static anchor of the runtime (0: none), and where from.
  uint64_t global_state() const { return g_hint_; }
  // The global_States of every VM whose GG_State lies in the process's anonymous writable
  // memory, proven by its main lua_State and its dispatch table (global_state_scan.cc), in
  // address order, at most 16: for a process whose threads prove none (a live luajit or nginx
  // worker). Reads all that memory once; an error only without a LuaJIT layout.
  Result<std::vector<uint64_t>> scan_global_states() const;

  // Row lookup for the walker (runtime address). Public for the C callback.
  int lookup(uint64_t pc, lj_cfi_row* row) const;

 private:
  explicit CoreWalker(const CoreFile& core) : core_(core) {}
  struct Module {
    std::string path;  // the mapped file's recorded path, or "[vdso]"
    const elf::ElfFile* elf = nullptr;
    // A stripped file's separate debug file, when installed, opened when a frame first needs a
    // name `elf` does not have (symbolize::native_symbol, from the const symbolize_native).
    mutable elf::LazyDebugFile debug;
    uint64_t bias = 0;
    std::optional<cfi::UnwindTable> table;
    std::string table_error;
    std::shared_ptr<symbolize::SourceLines> lines;  // null: the file has no DWARF line table
  };
  friend class CoreFrameSource;
  const Module* module_at(uint64_t pc) const;
  void symbolize_native(symbolize::Frame& frame, bool exact_pc) const;
  bool in_ffi_call_trampoline(const symbolize::Frame& frame) const;
  void add_frames(const ::lj_walk_result& result, const ::lj_walk_env& env, ThreadStack& out) const;
  ::lj_walk_env walk_env() const;
  void find_global_state();
  void load_vdso();
  const luajit::FiberLayout* fiber_layout() const;
  FiberListReader cord_fibers(const luajit::FiberLayout& layout, uint64_t cord) const;
  // The fiber layout, or why there is none (not Tarantool, no layout).
  Result<const luajit::FiberLayout*> tarantool_fiber_layout() const;
  // Where cord_ptr is from a thread pointer (luajit::cord_ptr_from_tp), or why it is not known.
  Result<int64_t> cord_ptr_offset() const;
  std::optional<proc::MemoryRange> lua_stack_range(uint64_t lua_state) const;

  const CoreFile& core_;
  mutable std::map<uint32_t, Module> modules_;  // by MappedFile index, built on first use
  cfi::TableCache* tables_ = nullptr;
  // The kernel's vDSO, read from the core's memory at AT_SYSINFO_EHDR (no NT_FILE names it).
  std::vector<uint8_t> vdso_image_;
  std::unique_ptr<elf::ElfFile> vdso_elf_;
  std::optional<Module> vdso_;
  uint64_t vdso_start_ = 0, vdso_end_ = 0;
  std::optional<luajit::LuaJITProcInfo> luajit_;
  std::string luajit_file_;
  std::string luajit_error_;
  std::optional<uint32_t> luajit_file_index_;
  bool tarantool_ = false;  // the LuaJIT file is a Tarantool executable
  uint64_t vm_bias_ = 0;
  uint64_t g_hint_ = 0;
  lj_luajit_info info_{};
  mutable std::optional<Result<luajit::FiberLayout>> fiber_layout_;  // read on first use
};

}  // namespace ljprof::core
