#include "luajit/runtime.h"

#include "common/path.h"

#include <elf.h>
#include <sys/stat.h>

#include <array>
#include <filesystem>

namespace ljprof::luajit {

namespace {

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

bool is_regular_file(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// A file "contains LuaJIT" when it defines the public API entry that every LuaJIT build has
// (lua_close, lj_api.c) — Debian's /usr/bin/luajit re-exports it in .dynsym, Tarantool keeps it
// in .symtab, libluajit exports it.
bool defines_luajit(const elf::ElfFile& file) {
  return file.find_symbol("lua_close") != nullptr;
}

// Tarantool's module API (src/module.h), which every Tarantool since 1.7 exports for C modules
// and the FFI: so a Tarantool executable renamed or copied (tarantool-2.11, a container's
// entrypoint) is still known, stripped or not (.dynsym keeps them).
bool exports_tarantool_api(const elf::ElfFile& file) {
  for (const char* name : {"box_txn_begin", "luaT_pushtuple"}) {
    const elf::Symbol* sym = file.find_symbol(name);
    if (sym == nullptr || !sym->defined()) return false;
  }
  return true;
}

}  // namespace

const char* runtime_name(Runtime runtime) {
  switch (runtime) {
    case Runtime::Tarantool:
      return "tarantool";
    case Runtime::LibLuaJIT:
      return "libluajit";
    case Runtime::LuaJIT:
      return "luajit";
    case Runtime::Nginx:
      return "nginx";
    case Runtime::OpenResty:
      return "openresty";
    case Runtime::None:
      break;
  }
  return "none";
}

const char* luajit_source_name(LuaJITSource source) {
  switch (source) {
    case LuaJITSource::LinkedIn:
      return "linked-in";
    case LuaJITSource::NeededLib:
      return "needed-library";
    case LuaJITSource::RuntimeLoad:
      return "loaded-at-run-time";
    case LuaJITSource::Absent:
      break;
  }
  return "absent";
}

std::span<const char* const> reported_symbols() {
  static constexpr std::array<const char*, 10> kSymbols = {
      "lj_vm_asm_begin",  "lj_vm_exit_handler", "lj_vm_exit_interp", "lua_close",
      "luaopen_jit",      "lj_dispatch_update", "jit_checktrace",    "lj_cf_jit_util_traceinfo",
      "lua_pushcclosure", "coro_startup"};
  return kSymbols;
}

std::optional<std::string> resolve_needed(const elf::ElfFile& file, const std::string& name,
                                          std::span<const std::string> extra_lib_dirs) {
  if (name.find('/') != std::string::npos) {
    return is_regular_file(name) ? std::optional<std::string>(name) : std::nullopt;
  }
  std::vector<std::string> dirs(extra_lib_dirs.begin(), extra_lib_dirs.end());
  const std::string origin = std::filesystem::path(file.path()).parent_path().string();
  for (std::string_view entry : file.runpath()) {
    size_t start = 0;
    while (start <= entry.size()) {
      size_t colon = entry.find(':', start);
      std::string dir(entry.substr(
          start, colon == std::string_view::npos ? std::string_view::npos : colon - start));
      for (const char* token : {"$ORIGIN", "${ORIGIN}"}) {
        size_t at = dir.find(token);
        if (at != std::string::npos) dir.replace(at, std::string_view(token).size(), origin);
      }
      if (!dir.empty()) dirs.push_back(dir);
      if (colon == std::string_view::npos) break;
      start = colon + 1;
    }
  }
  // Debian's multiarch directories (the ones /etc/ld.so.conf.d lists), then the classic ones.
  const std::string triplet =
      file.arch() == elf::Arch::X86_64 ? "x86_64-linux-gnu" : "aarch64-linux-gnu";
  for (const std::string& dir :
       {"/lib/" + triplet, "/usr/lib/" + triplet, "/usr/local/lib/" + triplet,
        "/usr/" + triplet + "/lib", std::string("/lib64"), std::string("/usr/lib64"),
        std::string("/lib"), std::string("/usr/lib"), std::string("/usr/local/lib")}) {
    dirs.push_back(dir);
  }
  for (const std::string& dir : dirs) {
    std::string candidate = dir + "/" + name;
    if (is_regular_file(candidate)) return candidate;
  }
  return std::nullopt;
}

RuntimeInfo detect_runtime(const elf::ElfFile& file, std::span<const std::string> extra_lib_dirs,
                           std::string_view name) {
  RuntimeInfo info;
  const std::string base = basename_of(name.empty() ? std::string_view(file.path()) : name);
  const bool linked_in = defines_luajit(file);

  for (std::string_view needed : file.needed()) {
    if (starts_with(needed, "libluajit-5.1.so")) {
      NeededLibrary lib;
      lib.name = std::string(needed);
      lib.path = resolve_needed(file, lib.name, extra_lib_dirs);
      info.libluajit = std::move(lib);
      break;
    }
  }
  if (linked_in) {
    info.source = LuaJITSource::LinkedIn;
  } else if (info.libluajit) {
    info.source = LuaJITSource::NeededLib;
  }

  const bool executable = file.type() == ET_EXEC || file.type() == ET_DYN;
  if (base == "tarantool") {
    if (linked_in) {
      info.runtime = Runtime::Tarantool;
      info.reason = "basename is 'tarantool' and the binary defines lua_close (LuaJIT linked in)";
    } else {
      info.reason = "basename is 'tarantool' but the binary does not define lua_close";
    }
  } else if (linked_in && executable && exports_tarantool_api(file)) {
    info.runtime = Runtime::Tarantool;
    info.reason =
        "it defines lua_close (LuaJIT linked in) and Tarantool's module API (box_txn_begin, "
        "luaT_pushtuple)";
  } else if (starts_with(base, "libluajit-5.1.so")) {
    if (linked_in) {
      info.runtime = Runtime::LibLuaJIT;
      info.reason = "basename starts with 'libluajit-5.1.so' and it exports lua_close";
    } else {
      info.reason = "basename starts with 'libluajit-5.1.so' but it does not define lua_close";
    }
  } else if (base == "nginx" || base == "openresty") {
    info.runtime = base == "nginx" ? Runtime::Nginx : Runtime::OpenResty;
    if (info.source == LuaJITSource::Absent) {
      // Debian's nginx links no LuaJIT: ngx_http_lua_module.so, loaded by `load_module`, needs
      // libluajit-5.1.so.2 and brings it into the process.
      info.source = LuaJITSource::RuntimeLoad;
      info.reason = "basename is '" + base +
                    "'; LuaJIT is not linked in, a module (ngx_http_lua_module.so) loads "
                    "libluajit at run time";
    } else {
      info.reason = "basename is '" + base + "' and LuaJIT is " + luajit_source_name(info.source);
    }
  } else if (starts_with(base, "luajit") && executable) {
    if (info.source != LuaJITSource::Absent) {
      info.runtime = Runtime::LuaJIT;
      info.reason = "executable named 'luajit*' and LuaJIT is " +
                    std::string(luajit_source_name(info.source));
    } else {
      info.reason = "named 'luajit*' but neither defines lua_close nor needs libluajit";
    }
  } else if (info.source != LuaJITSource::Absent) {
    info.reason =
        std::string("not a known runtime name, but LuaJIT is ") + luajit_source_name(info.source);
  } else {
    info.reason = "no LuaJIT: does not define lua_close and needs no libluajit";
  }
  return info;
}

}  // namespace ljprof::luajit
