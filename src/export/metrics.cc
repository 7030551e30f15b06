#include "export/metrics.h"

#include "common/printable.h"

#include <fmt/format.h>

#include <cassert>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <set>
#include <string_view>

namespace ljprof::exporter {

namespace {

// ---- Text exposition format 0.0.4 ----

bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_name_char(char c) {
  return is_name_start(c) || (c >= '0' && c <= '9');
}

// [a-zA-Z_:][a-zA-Z0-9_:]*
bool valid_metric_name(std::string_view name) {
  if (name.empty() || !(is_name_start(name[0]) || name[0] == ':')) return false;
  for (char c : name) {
    if (!is_name_char(c) && c != ':') return false;
  }
  return true;
}

// [a-zA-Z_][a-zA-Z0-9_]*, and not "__..." (reserved for Prometheus' own labels).
bool valid_label_name(std::string_view name) {
  if (name.empty() || !is_name_start(name[0]) || name.starts_with("__")) return false;
  for (char c : name) {
    if (!is_name_char(c)) return false;
  }
  return true;
}

// The caller built a family wrong. Release builds drop the offending part so that the page
// still parses (one bad metric must not cost every other metric); debug builds stop here so
// the mistake is found by the tests.
void invalid_input([[maybe_unused]] std::string_view what, [[maybe_unused]] std::string_view name) {
#ifndef NDEBUG
  std::fprintf(stderr, "render_prometheus: %.*s '%.*s'\n", static_cast<int>(what.size()),
               what.data(), static_cast<int>(name.size()), name.data());
  assert(false && "render_prometheus: invalid metric family");
#endif
}

// Appends `text` escaped for a HELP line (\ and newline) or, with `quote`, for a label value
// (also "). A line break keeps the format's own escape, \n; every other byte goes through the
// printable-text rule (common/printable.h): label values come from other processes, and a byte
// that is not UTF-8 would make Prometheus reject the whole page.
void append_escaped(std::string& out, std::string_view text, bool quote) {
  for (size_t start = 0;;) {
    const size_t line_break = text.find('\n', start);
    for (char c : printable_text(text.substr(start, line_break - start))) {
      if (c == '\\') {
        out += "\\\\";
      } else if (c == '"' && quote) {
        out += "\\\"";
      } else {
        out += c;
      }
    }
    if (line_break == std::string_view::npos) return;
    out += "\\n";
    start = line_break + 1;
  }
}

// Go's strconv.ParseFloat reads what Prometheus reads: NaN, +Inf, -Inf, and decimal numbers.
// Integral values (counters) print as plain integers, never as 1e+06; other values print in
// the shortest form that reads back as the same double.
std::string format_value(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (value == std::trunc(value) && std::fabs(value) < 0x1p64) return fmt::format("{:.0f}", value);
  return fmt::format("{}", value);
}

bool valid_labels(const MetricFamily::Point& point) {
  for (const auto& [name, value] : point.labels) {
    if (!valid_label_name(name)) {
      invalid_input("invalid label name", name);
      return false;
    }
  }
  return true;
}

void append_point(std::string& out, const std::string& name, const MetricFamily::Point& point) {
  out += name;
  if (!point.labels.empty()) {
    out += '{';
    for (size_t i = 0; i < point.labels.size(); ++i) {
      if (i > 0) out += ',';
      out += point.labels[i].first;
      out += "=\"";
      append_escaped(out, point.labels[i].second, /*quote=*/true);
      out += '"';
    }
    out += '}';
  }
  out += ' ';
  out += format_value(point.value);
  out += '\n';
}

const char* type_name(MetricType type) {
  return type == MetricType::Counter ? "counter" : "gauge";
}

void append_family(std::string& out, const MetricFamily& family) {
  if (!family.help.empty()) {
    fmt::format_to(std::back_inserter(out), "# HELP {} ", family.name);
    append_escaped(out, family.help, /*quote=*/false);
    out += '\n';
  }
  fmt::format_to(std::back_inserter(out), "# TYPE {} {}\n", family.name, type_name(family.type));
  for (const MetricFamily::Point& point : family.points) {
    if (valid_labels(point)) append_point(out, family.name, point);
  }
}

}  // namespace

std::string render_prometheus(const std::vector<MetricFamily>& families) {
  std::string out;
  std::set<std::string_view> seen;
  for (const MetricFamily& family : families) {
    if (!valid_metric_name(family.name)) {
      invalid_input("invalid metric name", family.name);
      continue;
    }
    // A second # TYPE line for a name makes Prometheus reject the whole page.
    if (!seen.insert(family.name).second) {
      invalid_input("repeated metric family", family.name);
      continue;
    }
    if (!family.points.empty()) append_family(out, family);
  }
  return out;
}

void Histogram::observe(double value) {
  if (buckets.size() != bounds.size()) buckets.assign(bounds.size(), 0);
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (value <= bounds[i]) ++buckets[i];
  }
  sum += value;
  ++count;
}

std::string render_prometheus(const std::vector<MetricFamily>& families,
                              const std::vector<Histogram>& histograms) {
  std::string out = render_prometheus(families);
  for (const Histogram& h : histograms) {
    bool repeated = !valid_metric_name(h.name);
    for (const MetricFamily& f : families) repeated = repeated || f.name == h.name;
    if (repeated) {
      invalid_input("invalid or repeated histogram", h.name);
      continue;
    }
    if (!h.help.empty()) {
      fmt::format_to(std::back_inserter(out), "# HELP {} ", h.name);
      append_escaped(out, h.help, /*quote=*/false);
      out += '\n';
    }
    fmt::format_to(std::back_inserter(out), "# TYPE {} histogram\n", h.name);
    for (size_t i = 0; i < h.bounds.size(); ++i) {
      const uint64_t n = i < h.buckets.size() ? h.buckets[i] : 0;
      fmt::format_to(std::back_inserter(out), "{}_bucket{{le=\"{}\"}} {}\n", h.name, h.bounds[i],
                     n);
    }
    fmt::format_to(std::back_inserter(out), "{}_bucket{{le=\"+Inf\"}} {}\n", h.name, h.count);
    fmt::format_to(std::back_inserter(out), "{}_sum {}\n{}_count {}\n", h.name, h.sum, h.name,
                   h.count);
  }
  return out;
}

}  // namespace ljprof::exporter
