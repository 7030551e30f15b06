#include "symbolize/symbolize.h"

#include <cxxabi.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <vector>

#include "common/path.h"
#include "symbolize/read_field.h"

extern "C" {
#include "abi/walk_types.h"
}

namespace ljprof::symbolize {

namespace {

constexpr size_t kMaxChunkName = 4096;

}  // namespace

Result<uint64_t> read_uint(const ljprof_mem_reader& mem, uint64_t addr, uint32_t size,
                           const char* what) {
  uint64_t value = 0;
  if (size != 1 && size != 2 && size != 4 && size != 8) {
    return make_error("{}: unsupported field size {}", what, size);
  }
  if (mem.read_mem(mem.ctx, addr, &value, size) != 0) {
    return make_error("cannot read {} at {:#x}", what, addr);
  }
  return value;
}

std::string short_source(const std::string& chunk, size_t size) {
  if (!chunk.empty() && chunk[0] == '=') return chunk.substr(1, size - 1);
  if (!chunk.empty() && chunk[0] == '@') {
    std::string file = chunk.substr(1);
    if (file.size() <= size - 1) return file;
    return "..." + file.substr(file.size() - (size - 4));
  }
  // [string "source"]: the first line only, truncated with "..." (lj_debug_shortname).
  const size_t line_end = chunk.find_first_of("\r\n");
  std::string first = chunk.substr(0, line_end);
  const size_t budget = size - sizeof("[string \"...\"]");
  bool cut = line_end != std::string::npos;
  if (first.size() > budget) {
    first.resize(budget);
    cut = true;
  }
  return "[string \"" + first + (cut ? "...\"]" : "\"]");
}

Result<uint64_t> function_proto(const ljprof_mem_reader& mem, const lj_luajit_info& info,
                                uint64_t gcfunc) {
  LJ_ASSIGN_OR_RETURN(uint64_t first_ins,
                      read_uint(mem, gcfunc + info.fn_pc, info.ref_size, "GCfuncL.pc"));
  // lj_obj.h funcproto(): the prototype header sits right before its first instruction.
  return first_ins - info.pt_size;
}

Result<LuaLocation> lua_location(const ljprof_mem_reader& mem, const lj_luajit_info& info,
                                 uint64_t gcfunc, uint64_t bcpc) {
  LJ_ASSIGN_OR_RETURN(uint64_t proto, function_proto(mem, info, gcfunc));
  return proto_location(mem, info, proto, bcpc);
}

Result<LuaLocation> proto_location(const ljprof_mem_reader& mem, const lj_luajit_info& info,
                                   uint64_t proto, uint64_t bcpc) {
  LuaLocation loc;
  const uint32_t ref = info.ref_size;
  const uint64_t first_ins = proto + info.pt_size;
  loc.proto = proto;
  const uint64_t pt = loc.proto;
  LJ_ASSIGN_OR_RETURN(uint64_t name_ref,
                      read_uint(mem, pt + info.pt_chunkname, ref, "GCproto.chunkname"));
  LJ_ASSIGN_OR_RETURN(uint64_t name_len, read_uint(mem, name_ref + info.str_len, 4, "GCstr.len"));
  if (name_len > kMaxChunkName) {
    return make_error("chunk name of {} bytes at {:#x} exceeds the {} byte cap", name_len, name_ref,
                      kMaxChunkName);
  }
  loc.chunk.resize(name_len);
  if (name_len > 0 && mem.read_mem(mem.ctx, name_ref + info.str_data, loc.chunk.data(),
                                   static_cast<uint32_t>(name_len)) != 0) {
    return make_error("cannot read chunk name at {:#x}", name_ref + info.str_data);
  }
  loc.short_src = short_source(loc.chunk);
  LJ_ASSIGN_OR_RETURN(uint64_t firstline,
                      read_uint(mem, pt + info.pt_firstline, 4, "GCproto.firstline"));
  loc.firstline = static_cast<int32_t>(firstline);
  loc.main_chunk = loc.firstline == 0;
  if (bcpc == 0) return loc;

  LJ_ASSIGN_OR_RETURN(uint64_t sizebc, read_uint(mem, pt + info.pt_sizebc, 4, "GCproto.sizebc"));
  LJ_ASSIGN_OR_RETURN(uint64_t numline, read_uint(mem, pt + info.pt_numline, 4, "GCproto.numline"));
  LJ_ASSIGN_OR_RETURN(uint64_t lineinfo,
                      read_uint(mem, pt + info.pt_lineinfo, ref, "GCproto.lineinfo"));
  // lj_debug.c debug_framepc: the position of the instruction before the return PC.
  if (bcpc < first_ins + 4 || (bcpc - first_ins) % 4 != 0) return loc;
  const uint64_t pos = (bcpc - first_ins) / 4 - 1;
  if (pos > sizebc || lineinfo == 0) return loc;
  if (pos == sizebc) {
    loc.line = loc.firstline + static_cast<int32_t>(numline);
    return loc;
  }
  // lj_debug_line: lineinfo entries are 8, 16 or 32 bits wide by numline; entry 0 belongs to
  // the instruction after the implicit FUNCF header, hence pos - 1.
  if (pos == 0) {
    loc.line = loc.firstline;
    return loc;
  }
  const uint32_t width = numline < 256 ? 1 : numline < 65536 ? 2 : 4;
  LJ_ASSIGN_OR_RETURN(uint64_t delta,
                      read_uint(mem, lineinfo + (pos - 1) * width, width, "GCproto lineinfo"));
  loc.line = loc.firstline + static_cast<int32_t>(delta);
  return loc;
}

const char* walk_end_name(uint32_t end) {
  switch (end) {
#define LJ_WALK_END_TEXT(id, value, metric, text) \
  case LJ_END_##id:                               \
    return text;
    LJ_WALK_ENDS(LJ_WALK_END_TEXT)
#undef LJ_WALK_END_TEXT
    default:
      return "unknown";
  }
}

const char* walk_end_metric(uint32_t end) {
  switch (end) {
#define LJ_WALK_END_METRIC(id, value, metric, text) \
  case LJ_END_##id:                                 \
    return metric;
    LJ_WALK_ENDS(LJ_WALK_END_METRIC)
#undef LJ_WALK_END_METRIC
    default:
      return "unknown";
  }
}

std::string demangle(std::string_view name) {
  if (name.substr(0, 2) != "_Z") return std::string(name);
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> out(
      abi::__cxa_demangle(std::string(name).c_str(), nullptr, nullptr, &status), std::free);
  return status == 0 && out ? std::string(out.get()) : std::string(name);
}

NativeSymbol native_symbol(const elf::ElfFile& file, uint64_t link_address) {
  NativeSymbol out;
  if (const elf::Symbol* sym = file.symbol_at(link_address)) {
    out.name = demangle(sym->name);
    out.offset = link_address - sym->value;
    out.sized = sym->size != 0;
  }
  return out;
}

NativeSymbol native_symbol(const elf::ElfFile& file, elf::LazyDebugFile& debug,
                           uint64_t link_address) {
  NativeSymbol out = native_symbol(file, link_address);
  if (!out.name.empty() || file.has_symbol_table(elf::SymbolTable::Symtab)) return out;
  const elf::ElfFile* symbols = debug.get(file);
  return symbols != nullptr ? native_symbol(*symbols, link_address) : out;
}

NativeSymbol code_symbol(const elf::ElfFile& file, elf::LazyDebugFile& debug,
                         const cfi::UnwindTable* table, const std::string& module,
                         uint64_t link_address) {
  NativeSymbol sym = native_symbol(file, debug, link_address);
  const std::optional<uint64_t> fde =
      table != nullptr ? table->function_start(link_address) : std::nullopt;
  const bool fde_after_symbol =
      fde && !sym.name.empty() && !sym.sized && *fde > link_address - sym.offset;
  if (!sym.name.empty() && !fde_after_symbol) return sym;
  if (!fde) return {};
  return {fmt::format("{}:sub_{:x}", basename_of(module), *fde), link_address - *fde, true};
}

}  // namespace ljprof::symbolize
