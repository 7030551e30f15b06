// libFuzzer target for the core reader and what `ljprof core` writes of a core: any input must
// give an error or a core whose threads, mappings and memory reads stay inside the input, and
// whose report (report/core_report.h: every thread walked and symbolized, the text and the JSON
// document) serializes and holds printable text only — the input's NT_FILE paths, vDSO symbol
// names and messages quoting them included. Mapped files are not opened (the input's NT_FILE
// paths are attacker-controlled and the fuzzer must not touch the filesystem); the report then
// lists every one of them as not used, so each path reaches both writers.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/printable.h"
#include "core/core_file.h"
#include "core/core_walk.h"
#include "report/core_report.h"
#include "report/json_text.h"

namespace {

void require(bool ok) {
  if (!ok) __builtin_trap();
}

// Every line of `text` is printable (common/printable.h): nothing in it can drive a terminal.
bool printable_lines(std::string_view text) {
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    if (!ljprof::is_printable_text(text.substr(start, end - start))) return false;
    start = end + 1;
  }
  return true;
}

// The reader alone: reads at every thread's registers, every mapping's ends and every writable
// anonymous region's.
uint64_t exercise_reads(const ljprof::core::CoreFile& core) {
  uint8_t buf[64];
  uint64_t sum = 0;
  for (const ljprof::core::Thread& t : core.threads()) {
    if (core.read(t.pc, buf, sizeof(buf)).ok()) sum += buf[0];
    if (core.read(t.sp, buf, sizeof(buf)).ok()) sum += buf[63];
    auto s = core.read_c_string(t.sp, 256);
    if (s.ok()) sum += s->size();
  }
  for (const ljprof::core::Mapping& m : core.mappings()) {
    if (core.read(m.start, buf, 8).ok()) sum += buf[7];
    (void)core.file_address(m.end - 1);
  }
  for (const ljprof::core::AuxEntry& e : core.auxv()) sum += e.value;
  // The heap's scan regions (CoreFile::anonymous_writable): inside the input, readable at both
  // ends.
  for (const ljprof::core::AddressRange& r : core.anonymous_writable()) {
    require(r.end > r.start && core.core_has(r.start) && core.core_has(r.end - 1));
    if (core.read(r.end - 1, buf, 1).ok()) sum += buf[0];
  }
  return sum;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ljprof::core::CoreOptions options;
  options.open_mapped_files = false;
  auto core = ljprof::core::CoreFile::from_memory({data, size}, "fuzz-core", options);
  if (!core.ok()) return 0;
  uint64_t sum = exercise_reads(*core);
  auto walker = ljprof::core::CoreWalker::create(*core);
  if (walker.ok()) {
    ljprof::report::CoreReport report = ljprof::report::core_report(
        *core, **walker, {.core_name = "fuzz-core", .all_fibers = true});
    require(printable_lines(report.text));
    nlohmann::ordered_json printable = report.json;
    ljprof::report::make_json_printable(printable);
    require(printable == report.json);
    // nlohmann's strict dump (the default error handler) throws on any string that is not
    // UTF-8, which libFuzzer reports; `ljprof core --json` writes the same document.
    sum += report.json.dump(2).size();
  }
  return sum == 0xdeadbeef ? 1 : 0;
}
