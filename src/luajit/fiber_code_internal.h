// Internals shared by the Tarantool fiber patterns (fiber_code.cc: what labels a sample;
// fiber_list_code.cc: what walks the fiber lists): x86-64 __thread access and which registers a
// call or an instruction leaves unknown.
#pragma once

#include <cstdint>
#include <optional>

#include "common/result.h"
#include "elf/elf_file.h"
#include "luajit/fiber_layout.h"
#include "luajit/matchers.h"
#include "luajit/matchers_internal.h"

namespace ljprof::luajit::fiber_code_internal {

using matchers_internal::LoadView;

// Struct members past 64 KiB are no member of struct fiber or struct cord.
inline constexpr int64_t kMaxMemberOffset = 1 << 16;

// decode_symbol (matchers.h), saying which Tarantool export is missing when it is.
Result<DecodedFunction> decode_export(const elf::ElfFile& elf, const char* name);

// `op` of `i` is a __thread variable of the executable (initial-exec TLS): an absolute memory
// operand (no base, no index) under the %fs segment.
bool tls_operand(const Insn& i, const Operand& op);

// `reg = fs:[disp]`: a load of a __thread variable.
std::optional<LoadView> tls_load(const Insn& i);

bool is_call(const Insn& i);

// Whether `reg` may hold something else after `i`: written by it, or caller-saved across a call.
bool clobbered(const Code& c, const Insn& i, int reg);

// A member offset of the fiber or the cord (0..kMaxMemberOffset), else an error naming `what`.
Status check_offset(const elf::ElfFile& elf, const char* what, int64_t offset);

// Adds to `layout` (its label fields proven: cord_ptr_tp_offset, cord.fiber) the fields that walk
// the fiber lists, from fiber_stat, fiber_wakeup, fiber_join, fiber_call, cord_set_name and
// tarantool_lua_run_script (fiber_list_code.cc), and sets has_lists; `layout` is unchanged on an
// error, which names the function and the pattern that did not match.
Status fiber_list_fields_from_code(const elf::ElfFile& elf, FiberLayout& layout);

}  // namespace ljprof::luajit::fiber_code_internal
