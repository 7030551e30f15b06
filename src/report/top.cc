#include "report/top.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "report/frames.h"

namespace ljprof::report {

std::vector<TopRow> top_rows(const profile::Profile& profile) {
  // Keyed by (label, kind): a native and a cfunc frame with the same symbol are different rows.
  std::map<std::pair<std::string, profile::FrameKind>, TopRow> rows;
  for (const profile::Sample& s : profile.samples) {
    if (s.frames.empty() || s.count <= 0) continue;
    std::set<std::pair<std::string, profile::FrameKind>> seen;  // recursion counts once in cum
    for (size_t i = 0; i < s.frames.size(); ++i) {
      // A printable label (report/frames.h): no line break can tear the table apart.
      std::pair<std::string, profile::FrameKind> key{function_label(s.frames[i]), s.frames[i].kind};
      TopRow& row = rows[key];
      row.name = key.first;
      row.kind = key.second;
      if (i == 0) row.flat += s.count;
      if (seen.insert(key).second) row.cum += s.count;
    }
  }
  std::vector<TopRow> out;
  for (auto& [key, row] : rows) out.push_back(std::move(row));
  std::stable_sort(out.begin(), out.end(), [](const TopRow& a, const TopRow& b) {
    if (a.flat != b.flat) return a.flat > b.flat;
    if (a.cum != b.cum) return a.cum > b.cum;
    return a.name < b.name;
  });
  return out;
}

void write_top(const profile::Profile& profile, std::ostream& out, size_t n) {
  std::vector<TopRow> rows = top_rows(profile);
  int64_t total = 0;
  for (const profile::Sample& s : profile.samples) {
    if (!s.frames.empty() && s.count > 0) total += s.count;
  }
  auto pct = [total](int64_t v) {
    return total > 0 ? 100.0 * static_cast<double>(v) / static_cast<double>(total) : 0.0;
  };
  size_t shown = std::min(n, rows.size());
  std::string period = profile.period_ns > 0
                           ? fmt::format(", period {:.3g} ms", profile.period_ns / 1e6)
                           : std::string();
  out << fmt::format("Showing top {} of {} functions, {} {} total{}\n", shown, rows.size(), total,
                     profile.count_unit, period);
  out << fmt::format("{:>10} {:>7} {:>7} {:>10} {:>7}  {:<8}{}\n", "flat", "flat%", "sum%", "cum",
                     "cum%", "kind", "name");
  int64_t sum = 0;
  for (size_t i = 0; i < shown; ++i) {
    const TopRow& r = rows[i];
    sum += r.flat;
    out << fmt::format("{:>10} {:>6.2f}% {:>6.2f}% {:>10} {:>6.2f}%  {:<8}{}\n", r.flat,
                       pct(r.flat), pct(sum), r.cum, pct(r.cum), profile::frame_kind_name(r.kind),
                       r.name);
  }
}

void write_top_by_fiber(const profile::Profile& profile, std::ostream& out, size_t n) {
  std::map<std::string, profile::Profile> groups;
  int64_t total = 0;
  for (const profile::Sample& s : profile.samples) {
    if (s.frames.empty() || s.count <= 0) continue;
    const std::string label = fiber_group_label(s);
    profile::Profile& g = groups[label.empty() ? "(no fiber)" : label];
    g.period_ns = profile.period_ns;
    g.count_unit = profile.count_unit;
    g.samples.push_back(s);
    total += s.count;
  }
  std::vector<std::pair<int64_t, const std::string*>> order;
  for (const auto& [label, g] : groups) {
    int64_t count = 0;
    for (const profile::Sample& s : g.samples) count += s.count;
    order.emplace_back(count, &label);
  }
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : *a.second < *b.second;
  });
  for (const auto& [count, label] : order) {
    out << fmt::format(
        "== {}: {} {}, {:.2f}% of all\n", *label, count, profile.count_unit,
        total > 0 ? 100.0 * static_cast<double>(count) / static_cast<double>(total) : 0.0);
    write_top(groups.at(*label), out, n);
  }
}

}  // namespace ljprof::report
