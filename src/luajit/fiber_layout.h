// Where a Tarantool executable keeps its fibers, read from its own DWARF: enough of
// `struct cord` and `struct fiber` (tarantool src/lib/core/fiber.h) to walk the main cord's live
// fibers in a core's memory and name each fiber's lua_State (core/core_walk.h walk_fibers).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"
#include "elf/elf_file.h"

namespace ljprof::luajit {

// Where a layout was proven: DWARF gives every field; machine code (x86-64 builds without debug
// information) gives what labels a CPU sample with its fiber and, when those patterns match too,
// what walks the fiber lists.
enum class FiberLayoutSource : uint8_t { Dwarf, MachineCode };

struct FiberLayout {
  FiberLayoutSource source = FiberLayoutSource::Dwarf;
  // Whether the fields that walk the cords' fiber lists (cord.alive ... fiber.ctx.sp) are set:
  // always from DWARF; from machine code when their patterns matched, else `lists_error` says
  // which did not (such a layout labels CPU samples but lists no fibers).
  bool has_lists = true;
  std::string lists_error;
  // Link-time address of `static struct cord main_cord` (src/lib/core/fiber.c), a LOCAL OBJECT
  // of .symtab: the cord of the tx thread, where Lua runs.
  uint64_t main_cord = 0;
  uint32_t cord_fiber = 0;   // cord.fiber: the running fiber (struct fiber *)
  uint32_t cord_alive = 0;   // cord.alive: the rlist of live fibers, linked through fiber.link
  uint32_t cord_ready = 0;   // cord.ready: fibers woken and waiting their turn, through fiber.state
  uint32_t cord_name = 0;    // cord.name: char[40], "main" for the main cord
  uint32_t rlist_next = 0;   // rlist.next (src/lib/salad/rlist.h)
  uint32_t fiber_link = 0;   // fiber.link
  uint32_t fiber_fid = 0;    // fiber.fid
  uint32_t fid_size = 0;     // 4 (uint32_t, 2.x) or 8 (uint64_t, 3.x)
  uint32_t fiber_name = 0;   // fiber.name (char *)
  uint32_t fiber_state = 0;  // fiber.state: its link in cord.ready (or in a wait list)
  // fiber.csw: how many times the fiber was switched to (fiber_call_impl ++callee->csw). A live
  // read of a suspended fiber is consistent when csw is the same before and after it.
  uint32_t fiber_csw = 0;
  uint32_t fiber_flags = 0;      // fiber.flags (uint32_t)
  uint64_t flag_dead = 0;        // the FIBER_IS_DEAD enumerator: finished, not yet joined
  uint32_t fiber_lua_state = 0;  // fiber.storage.lua.stack (struct lua_State *)
  // fiber.ctx.sp: the saved stack pointer of a switched-out fiber (third_party/coro/coro.h
  // struct coro_context { void **sp; } under CORO_ASM), where coro_transfer pushed its registers.
  uint32_t fiber_ctx_sp = 0;
  // `__thread struct cord *cord_ptr` (src/lib/core/fiber.c): the cord a thread runs, in the
  // executable's static TLS block. Its offset in the block (the TLS symbol's st_value) and the
  // block's PT_TLS size and alignment; has_cord_ptr false when the symbol or PT_TLS is missing
  // (then only the main cord's fibers are found).
  bool has_cord_ptr = false;
  uint64_t cord_ptr = 0;
  uint64_t tls_size = 0;
  uint64_t tls_align = 0;
  // MachineCode: cord_ptr's offset from the thread pointer as the code reads it (fs:[offset]),
  // set with main_cord, cord_fiber, fiber_fid, fid_size and fiber_name (and the list fields when
  // has_lists).
  int64_t cord_ptr_tp_offset = 0;
};

// Where cord_ptr is from a thread's thread pointer (x86-64 fs_base, AArch64 TPIDR_EL0): the
// executable is TLS module 1, placed by glibc's _dl_determine_tlsoffset (elf/dl-tls.c) right
// below the thread pointer on x86-64 (TLS_TCB_AT_TP: -roundup(size, align)) and above the
// 16-byte TCB on AArch64 (TLS_DTV_AT_TP: roundup(16, align)). nullopt without cord_ptr.
std::optional<int64_t> cord_ptr_from_tp(const FiberLayout& layout, elf::Arch arch);

// The layout of `elf` (a Tarantool executable) from its .symtab and DWARF, or from those of its
// separate debug file under `debug_dir` (elf/elf_file.h separate_debug_file) when it is
// stripped. Fails closed, naming what is missing: no main_cord symbol, no DWARF, or a
// struct/member absent or of an unexpected size ("no fiber layout: DWARF of /usr/bin/x has no
// struct fiber member fid"), and the debug file looked for.
Result<FiberLayout> read_fiber_layout_dwarf(const elf::ElfFile& elf,
                                            const std::string& debug_dir = elf::kDebugDir);

// The layout from the machine code of functions every Tarantool exports, for an x86-64
// executable shipped without any debug information: the fields that label a CPU sample with its
// fiber (main_cord, cord.fiber, fiber.fid and its size, fiber.name, cord_ptr; cord_is_main,
// fiber_self, fiber_set_name, fiber_new_ex: fiber_code.cc) and, with has_lists, those that walk
// the fiber lists (fiber_list_code.cc). Fails closed, naming the function and the pattern that
// did not match.
Result<FiberLayout> fiber_layout_from_code(const elf::ElfFile& elf);

// What lists fibers (`ljprof fibers`, `core --all-fibers`): the DWARF layout, else one from
// machine code with has_lists. The error gives both reasons.
Result<FiberLayout> read_fiber_layout(const elf::ElfFile& elf,
                                      const std::string& debug_dir = elf::kDebugDir);

// What `record` labels samples with: the DWARF layout, else the one from machine code (with or
// without the lists). The error gives both reasons.
Result<FiberLayout> read_fiber_label_layout(const elf::ElfFile& elf,
                                            const std::string& debug_dir = elf::kDebugDir);

// The layout as (name, value) rows in declaration order, for `ljprof inspect`:
// "main_cord", "cord.fiber", "cord.alive", "cord.ready", "cord.name", "rlist.next", "fiber.link",
// "fiber.fid", "sizeof(fiber.fid)", "fiber.name", "fiber.state", "fiber.csw", "fiber.flags",
// "FIBER_IS_DEAD", "fiber.storage.lua.stack", "fiber.ctx.sp", then with cord_ptr "cord_ptr",
// "PT_TLS.memsz", "PT_TLS.align". From machine code the same without cord_ptr's three but with
// "tp - &cord_ptr"; without the lists only "main_cord", "cord.fiber", "fiber.fid",
// "sizeof(fiber.fid)", "fiber.name", "tp - &cord_ptr".
std::vector<std::pair<std::string, uint64_t>> fiber_layout_rows(const FiberLayout& layout);

}  // namespace ljprof::luajit
