// symbolize: turns walker frames into names people read.
//  - native: module (mapped file) + offset, the ELF symbol containing the pc (+ offset);
//  - Lua: chunk name and line from the GCproto (lineinfo, 8/16/32-bit by numline), `main chunk`
//    for a prototype whose firstline is 0 (lj_debug.c lj_debug_getinfo's "main");
//  - C functions called from Lua: their C entry symbolized as native code.
// Memory is read through the walker's plain C reader, so the same code serves core files and,
// later, a live process.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "abi/read_mem.h"
#include "cfi/cfi.h"
#include "common/result.h"
#include "elf/elf_file.h"

extern "C" {
#include "abi/luajit_info.h"
}

namespace ljprof::symbolize {

// What one Lua function's prototype says about a bytecode pc.
struct LuaLocation {
  uint64_t proto = 0;
  std::string chunk;      // the raw chunk name ("@file.lua", "=stdin", source text)
  std::string short_src;  // as Lua prints it (lj_debug_shortname): file.lua, [string "..."]
  int32_t firstline = 0;
  int32_t line = -1;        // -1: the pc is unknown or outside the prototype
  bool main_chunk = false;  // firstline == 0
};

// Reads the prototype of Lua function object `gcfunc` and the line of bytecode `bcpc` in it
// (`bcpc` as the walker gives it: the return PC into this function, i.e. one past the call
// instruction, or 0 when unknown).
Result<LuaLocation> lua_location(const ljprof_mem_reader& mem, const lj_luajit_info& info,
                                 uint64_t gcfunc, uint64_t bcpc);

// The prototype of Lua function object `gcfunc` (lj_obj.h funcproto: GCfuncL.pc - sizeof(GCproto)).
Result<uint64_t> function_proto(const ljprof_mem_reader& mem, const lj_luajit_info& info,
                                uint64_t gcfunc);

// The same for a prototype read directly (e.g. a trace's start prototype).
Result<LuaLocation> proto_location(const ljprof_mem_reader& mem, const lj_luajit_info& info,
                                   uint64_t proto, uint64_t bcpc);

// lj_debug_shortname: "@file" -> file (front-truncated to fit), "=name" -> name, anything else
// -> [string "first line..."]. `size` is LUA_IDSIZE (60).
std::string short_source(const std::string& chunk, size_t size = 60);

// A native pc in an ELF file: its symbol, if any.
struct NativeSymbol {
  std::string name;     // empty when no symbol contains the address
  uint64_t offset = 0;  // pc - symbol start
  bool sized = true;    // false: an unsized symbol (hand-written assembly) taken to reach here
};
// The symbol containing `link_address`, C++ names demangled.
NativeSymbol native_symbol(const elf::ElfFile& file, uint64_t link_address);
// The same, and for a stripped file (no .symtab) without a symbol there, from its separate debug
// file's .symtab (Debian's -dbgsym/-dbg packages): local functions and a libc's internals, which
// .dynsym does not name. An exported name is kept: the debug file has local aliases at the same
// addresses (__libc_start_main_alias_1).
NativeSymbol native_symbol(const elf::ElfFile& file, elf::LazyDebugFile& debug,
                           uint64_t link_address);
// What names the code at `link_address` of the module `file` (path `module`) in every frame,
// live or from a core: native_symbol with the debug file; else the FDE of `table` (may be null)
// that covers it, as "BASENAME:sub_START" (stripped code: libm's __sin_fma, LuaJIT's static
// functions), so samples anywhere in one function aggregate under one name. An unsized symbol
// reaches the address only when no FDE starts between the two: in a stripped Tarantool the static
// coro_init after coro_transfer (size 0) is its own FDE's function, not coro_transfer+0x5f.
NativeSymbol code_symbol(const elf::ElfFile& file, elf::LazyDebugFile& debug,
                         const cfi::UnwindTable* table, const std::string& module,
                         uint64_t link_address);
// How a walk ended, as people read it (lj_walk_result.end, LJ_END_*): "root", "no CFI", ...
const char* walk_end_name(uint32_t end);
// Its stable snake_case name for counters and metrics: "root", "no_cfi", ...
const char* walk_end_metric(uint32_t end);

// A C++ mangled name in source form; anything else unchanged.
std::string demangle(std::string_view name);

}  // namespace ljprof::symbolize
