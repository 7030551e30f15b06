// Which LuaJIT runtime a binary is, and where its LuaJIT lives (linked in, or a libluajit the
// binary needs). Detection is by name *and* by content: a name alone never makes a runtime.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/result.h"
#include "elf/elf_file.h"

namespace ljprof::luajit {

enum class Runtime { None, Tarantool, LibLuaJIT, LuaJIT, Nginx, OpenResty };
const char* runtime_name(Runtime runtime);  // "none", "tarantool", "libluajit", ...

// Where the LuaJIT VM of a binary comes from.
enum class LuaJITSource {
  LinkedIn,     // the file defines the LuaJIT API (lua_close) itself
  NeededLib,    // a DT_NEEDED libluajit-5.1.so* provides it
  RuntimeLoad,  // nginx/openresty: a dlopen'ed module brings libluajit in at run time
  Absent,
};
const char* luajit_source_name(LuaJITSource source);

struct NeededLibrary {
  std::string name;                 // as written in DT_NEEDED
  std::optional<std::string> path;  // resolved path, if found
};

struct RuntimeInfo {
  Runtime runtime = Runtime::None;
  LuaJITSource source = LuaJITSource::Absent;
  std::optional<NeededLibrary> libluajit;  // the libluajit this file needs, if any
  std::string reason;                      // one sentence: why this classification
};

// The symbols `ljprof inspect` reports, in a stable order.
std::span<const char* const> reported_symbols();

// Classifies `file`: by its name (tarantool, libluajit-5.1.so*, nginx, openresty, luajit*), and
// an executable with LuaJIT linked in that exports Tarantool's module API as Tarantool whatever
// its name. `extra_lib_dirs` are searched before the standard library directories
// when resolving a DT_NEEDED libluajit (like LD_LIBRARY_PATH).
// `name`: the file's path when `file` was opened through another one (a live process's
// /proc/PID/map_files/START-END link, whose basename says nothing); "" = file.path().
RuntimeInfo detect_runtime(const elf::ElfFile& file, std::span<const std::string> extra_lib_dirs,
                           std::string_view name = {});

// Resolves a DT_NEEDED name the way the dynamic loader would look in: `extra_lib_dirs`, the
// file's DT_RUNPATH/DT_RPATH ($ORIGIN expanded), then the standard directories for its arch.
std::optional<std::string> resolve_needed(const elf::ElfFile& file, const std::string& name,
                                          std::span<const std::string> extra_lib_dirs);

}  // namespace ljprof::luajit
