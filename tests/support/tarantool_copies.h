// Copies of Debian's /usr/bin/tarantool as other builds ship it: stripped of all debug
// information, and stripped with a fiber function whose code the fiber layout patterns do not
// recognise (the fail-closed cases of luajit/fiber_code.cc and fiber_list_code.cc on a real
// binary).
#pragma once

#include <string>

namespace ljprof::test {

inline constexpr const char* kDebianTarantool = "/usr/bin/tarantool";

// `strip --strip-all` of Debian's tarantool to `path`: no .symtab, no DWARF, .dynsym kept.
// Empty string on failure (the test's ASSERT names it).
std::string stripped_tarantool(const std::string& path);

// The same, with the immediate of fiber_new_ex's compare with FIBER_ID_MAX_RESERVED (found by
// objdump's disassembly, its last byte) changed, so that no new-fiber-id pattern matches.
std::string tarantool_without_fid_pattern(const std::string& path);

// The stripped copy with the bit fiber_join tests again after its fiber_yield (the loop's
// `testb $0x10, 0x68(%rbx)`, FIBER_IS_DEAD) changed: the fiber-list patterns fail, the label
// ones still match.
std::string tarantool_without_dead_flag_pattern(const std::string& path);

}  // namespace ljprof::test
