#include "report/json_text.h"

#include <utility>

#include "common/printable.h"

namespace ljprof::report {

void make_json_printable(nlohmann::ordered_json& doc) {
  if (doc.is_string()) {
    make_printable(doc.get_ref<std::string&>());
  } else if (doc.is_array()) {
    for (auto& v : doc) make_json_printable(v);
  } else if (doc.is_object()) {
    bool keys_printable = true;
    for (auto& [key, v] : doc.items()) {
      keys_printable = keys_printable && is_printable_text(key);
      make_json_printable(v);
    }
    if (keys_printable) return;
    // Keys cannot be changed in place; ordered_json keeps the order they are re-inserted in.
    nlohmann::ordered_json rebuilt = nlohmann::ordered_json::object();
    for (auto& [key, v] : doc.items()) rebuilt[printable_text(key)] = std::move(v);
    doc = std::move(rebuilt);
  }
}

std::string json_text(nlohmann::ordered_json doc, int indent) {
  make_json_printable(doc);
  // After the pass above no string can be invalid UTF-8; replace is the last line of defence
  // should one ever get through, instead of an exception that would end the program.
  return doc.dump(indent, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace ljprof::report
