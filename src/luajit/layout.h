// The LuaJIT layout fields, generated from the one declaration in bpf/abi/luajit_info.h
// (LJ_LAYOUT_FIELDS): their ids, stable names, inspect's order (the declaration order), the
// walker record's member for each and the layout rules. A field is added by adding one X(...)
// line there; extract_proc_info fills the CODE fields, everything else follows.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "elf/elf_file.h"

extern "C" {
#include "abi/luajit_info.h"
}

namespace ljprof::luajit {

enum class FieldId : uint8_t {
#define LJ_LAYOUT_ENUMERATOR(id, ...) id,
  LJ_LAYOUT_FIELDS(LJ_LAYOUT_ENUMERATOR)
#undef LJ_LAYOUT_ENUMERATOR
};
inline constexpr size_t kFieldCount = LJ_LAYOUT_FIELD_COUNT;

// Field names by id, as constants (field::kGCurL == "global_State.cur_L").
namespace field {
#define LJ_LAYOUT_NAME_CONSTANT(id, name, ...) inline constexpr std::string_view k##id = name;
LJ_LAYOUT_FIELDS(LJ_LAYOUT_NAME_CONSTANT)
#undef LJ_LAYOUT_NAME_CONSTANT
}  // namespace field

// When a field must be present (luajit_info.h NEED).
enum class FieldNeed : uint8_t { ALWAYS, X86_64, TARANTOOL, OPTIONAL };
// Where its value comes from (luajit_info.h FROM).
enum class FieldFrom : uint8_t { CODE, RULE };
// Bytes in LuaJIT's struct; kRefWidth: a GCRef/MRef (8 with GC64, else 4).
inline constexpr int kRefWidth = LJ_WIDTH_REF;

struct FieldSpec {
  FieldId id;
  std::string_view name;
  int32_t lj_luajit_info::*member;
  FieldNeed need;
  int width;
  FieldFrom from;
  int32_t rule_gc64;  // LJ_NO_RULE: none
  int32_t rule_gc32;
  std::string_view header;
  std::string_view dwarf;  // luajit_info.h DWARF expression; empty: not in DWARF

  bool has_rule() const { return rule_gc64 != LJ_NO_RULE; }
  int32_t rule(bool gc64) const { return gc64 ? rule_gc64 : rule_gc32; }
};

inline constexpr std::array<FieldSpec, kFieldCount> kFieldSpecs = {{
#define LJ_LAYOUT_SPEC(id, name, member, need, width, from, gc64, gc32, header, dwarf) \
  {                                                                                    \
      FieldId::id,                                                                     \
      name,                                                                            \
      &lj_luajit_info::member,                                                         \
      FieldNeed::need,                                                                 \
      width,                                                                           \
      FieldFrom::from,                                                                 \
      gc64,                                                                            \
      gc32,                                                                            \
      header,                                                                          \
      dwarf},
    LJ_LAYOUT_FIELDS(LJ_LAYOUT_SPEC)
#undef LJ_LAYOUT_SPEC
}};

constexpr const FieldSpec& field_spec(FieldId id) {
  return kFieldSpecs[static_cast<size_t>(id)];
}
constexpr std::string_view field_name(FieldId id) {
  return field_spec(id).name;
}
// The spec of a field by its stable name; nullptr if there is none.
const FieldSpec* find_field_spec(std::string_view name);

// Whether a field must be present in a build of `arch` with the given vmstate numbering.
bool field_required(const FieldSpec& spec, elf::Arch arch, bool tarantool_numbering);

}  // namespace ljprof::luajit
