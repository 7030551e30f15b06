// report/json_text.h: how ljprof writes a JSON document (`core --json`, `inspect --json`,
// `cfi --json`). Documents quote target bytes (paths, symbol and chunk names, messages about
// them); nlohmann's dump() throws type_error 316 on a string that is not UTF-8, and JSON's own
// escaping leaves C1 and bidirectional controls raw for the terminal that shows it.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace ljprof::report {

// Every string of `doc`, values and object keys, made printable (common/printable.h).
void make_json_printable(nlohmann::ordered_json& doc);

// `doc` made printable and serialized (`indent` as for nlohmann's dump: -1 for one line).
// Serializing cannot fail on any string.
std::string json_text(nlohmann::ordered_json doc, int indent = 2);

}  // namespace ljprof::report
