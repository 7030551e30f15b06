#include "luajit/layout.h"

namespace ljprof::luajit {

// The list declares each field once; a repeated name would make inspect's JSON keys collide.
static_assert(
    [] {
      for (size_t i = 0; i < kFieldCount; ++i) {
        if (kFieldSpecs[i].id != static_cast<FieldId>(i)) return false;
        for (size_t j = i + 1; j < kFieldCount; ++j)
          if (kFieldSpecs[i].name == kFieldSpecs[j].name) return false;
      }
      return true;
    }(),
    "LJ_LAYOUT_FIELDS: ids in order, names unique");

const FieldSpec* find_field_spec(std::string_view name) {
  for (const FieldSpec& spec : kFieldSpecs)
    if (spec.name == name) return &spec;
  return nullptr;
}

bool field_required(const FieldSpec& spec, elf::Arch arch, bool tarantool_numbering) {
  switch (spec.need) {
    case FieldNeed::ALWAYS:
      return true;
    case FieldNeed::X86_64:
      return arch == elf::Arch::X86_64;
    case FieldNeed::TARANTOOL:
      return tarantool_numbering;
    case FieldNeed::OPTIONAL:
      return false;
  }
  return true;
}

}  // namespace ljprof::luajit
