#include "report/flamegraph.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "common/printable.h"
#include "report/frames.h"

namespace ljprof::report {

namespace {

// Builder with map children (for merging); converted to the sorted vector form at the end.
struct BuildNode {
  std::string name;
  profile::FrameKind kind = profile::FrameKind::Root;
  int64_t total = 0;
  std::map<std::pair<std::string, profile::FrameKind>, BuildNode> children;
};

FlameNode freeze(BuildNode&& b) {
  FlameNode n{std::move(b.name), b.kind, b.total, {}};
  n.children.reserve(b.children.size());
  for (auto& [key, child] : b.children) n.children.push_back(freeze(std::move(child)));
  return n;
}

int64_t total_samples(const profile::Profile& profile) {
  int64_t total = 0;
  for (const profile::Sample& s : profile.samples) {
    if (!s.frames.empty() && s.count > 0) total += s.count;
  }
  return total;
}

// Printable text (common/printable.h) has none of the characters XML 1.0 forbids (C0
// controls, U+FFFE/U+FFFF) and is well-formed UTF-8, so one odd name cannot make the whole SVG
// unparseable; labels are printable already, the guard keeps every other text so too.
std::string xml_escape(const std::string& raw) {
  std::string s = printable_text(raw), out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// Fill colours by kind (same palette as the HTML page's CSS).
const char* svg_colour(profile::FrameKind kind) {
  switch (kind) {
    case profile::FrameKind::Lua:
      return "#7fcf7f";
    case profile::FrameKind::Native:
      return "#f0a05a";
    case profile::FrameKind::CFunc:
      return "#e6d45c";
    case profile::FrameKind::Ffi:
      return "#c49be8";
    case profile::FrameKind::Trace:
      return "#6fb6e8";
    case profile::FrameKind::Root:
      return "#c8c8c8";
    case profile::FrameKind::Unknown:
      return "#e07070";
  }
  return "#c8c8c8";
}

// Everything that walks the tree (here, and the page's script) recurses once per level, so
// the depth is bounded: a hostile .pb.gz can hold a million-frame stack. Real stacks are far
// shallower (the recorder's walker stops long before this).
constexpr size_t kMaxFlameDepth = 2048;

constexpr double kSvgWidth = 1200, kSvgPad = 10, kRow = 16, kCharWidth = 7;

int depth_of(const FlameNode& n) {
  int d = 0;
  for (const FlameNode& c : n.children) d = std::max(d, depth_of(c));
  return d + 1;
}

void svg_node(const FlameNode& n, double x, int depth, double px_per_sample, double bottom,
              int64_t total, const std::string& unit, std::string* out) {
  double w = static_cast<double>(n.total) * px_per_sample;
  if (w < 0.1) return;  // invisible; its children are narrower still
  double y = bottom - (depth + 1) * kRow;
  double pct = total > 0 ? 100.0 * static_cast<double>(n.total) / static_cast<double>(total) : 0;
  const std::string& label = n.name;  // frame_label(): printable
  *out += fmt::format("<g class=\"frame\"><title>{} ({} {}, {:.2f}%)</title>", xml_escape(label),
                      n.total, xml_escape(unit), pct);
  *out += fmt::format(
      "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\" rx=\"2\"/>",
      x, y, w, kRow - 1, svg_colour(n.kind));
  // Text that would not fit is cut with ".." like flamegraph.pl; counted in bytes, which is
  // close enough for a fixed-width estimate.
  size_t fits = w > 6 ? static_cast<size_t>((w - 6) / kCharWidth) : 0;
  if (fits >= 3) {
    std::string text = label;
    if (text.size() > fits) {
      text.resize(fits - 2);
      while (!text.empty() && (static_cast<unsigned char>(text.back()) & 0xc0) == 0x80) {
        text.pop_back();  // do not cut a UTF-8 sequence in half
      }
      if (!text.empty() && static_cast<unsigned char>(text.back()) >= 0xc0) text.pop_back();
      text += "..";
    }
    *out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\">{}</text>", x + 3, y + kRow - 4,
                        xml_escape(text));
  }
  *out += "</g>\n";
  double cx = x;
  for (const FlameNode& c : n.children) {
    svg_node(c, cx, depth + 1, px_per_sample, bottom, total, unit, out);
    cx += static_cast<double>(c.total) * px_per_sample;
  }
}

const char* kHtmlTemplate = R"HTML(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>@TITLE@</title>
<style>
body { font: 13px sans-serif; margin: 0; padding: 8px 12px; background: #fafafa; color: #222; }
#bar { display: flex; gap: 12px; align-items: center; margin-bottom: 6px; }
#bar { flex-wrap: wrap; }
#bar h1 { font-size: 15px; margin: 0; flex: 1; white-space: nowrap; }
#search { width: 18em; }
#matched { color: #a0208c; min-width: 10em; }
#fg { position: relative; width: 100%; overflow: hidden; }
.frame { position: absolute; height: 17px; box-sizing: border-box; border: 1px solid #fafafa;
  border-radius: 2px; font: 11px/15px monospace; padding: 0 3px; white-space: nowrap;
  overflow: hidden; text-overflow: ellipsis; cursor: pointer; }
.frame:hover { border-color: #333; }
.k-lua { background: #7fcf7f; } .k-native { background: #f0a05a; }
.k-cfunc { background: #e6d45c; } .k-ffi { background: #c49be8; }
.k-trace { background: #6fb6e8; } .k-root { background: #c8c8c8; }
.k-unknown { background: #e07070; }
.ancestor { opacity: 0.55; }
.frame.match { background: #e040fb; color: #fff; }
#details { margin-top: 6px; min-height: 1.4em; font-family: monospace; white-space: pre; }
#legend span { display: inline-block; padding: 0 6px; margin-right: 4px; border-radius: 2px; }
</style>
</head>
<body>
<div id="bar"><h1 id="heading"></h1>
<span id="legend"><span class="k-lua">lua</span><span class="k-native">native</span><span class="k-cfunc">cfunc</span><span class="k-ffi">ffi</span><span class="k-trace">trace</span><span class="k-root">root</span><span class="k-unknown">unknown</span></span>
<input id="search" type="search" placeholder="search (substring)">
<span id="matched"></span>
<button id="reset">reset zoom</button></div>
<div id="fg"></div>
<div id="details">hover a frame; click to zoom</div>
<script type="application/json" id="fg-data">@DATA@</script>
<script>
"use strict";
(function () {
  const ROW = 18, MIN_FRACTION = 1 / 2000;
  const data = JSON.parse(document.getElementById("fg-data").textContent);
  const fg = document.getElementById("fg"), details = document.getElementById("details");
  const search = document.getElementById("search"), matched = document.getElementById("matched");
  // Tree as [name, kind index, total, children]; turned into objects with parent links.
  function build(a, parent, depth) {
    const node = { n: a[0], k: data.kinds[a[1]], v: a[2], p: parent, d: depth, c: [] };
    for (const child of a[3]) node.c.push(build(child, node, depth + 1));
    return node;
  }
  const root = build(data.tree, null, 0);
  document.getElementById("heading").textContent = data.title;
  let zoom = root, term = "";
  const isMatch = (node) => term !== "" && node.n.toLowerCase().includes(term);
  function place(frag, node, x, w, ancestor) {
    const el = document.createElement("div");
    el.className = "frame k-" + node.k + (ancestor ? " ancestor" : "") + (isMatch(node) ? " match" : "");
    el.style.left = (x * 100) + "%";
    el.style.width = (w * 100) + "%";
    el.style.top = (node.d * ROW) + "px";
    el.dataset.name = node.n;
    el.dataset.kind = node.k;
    el.textContent = node.n;
    el.fgNode = node;
    frag.appendChild(el);
  }
  function render() {
    const frag = document.createDocumentFragment();
    let depth = 0;
    for (let a = zoom.p; a; a = a.p) place(frag, a, 0, 1, true);
    (function walk(node, x) {
      const w = node.v / zoom.v;
      if (w < MIN_FRACTION) return;
      place(frag, node, x, w, false);
      depth = Math.max(depth, node.d);
      let cx = x;
      for (const child of node.c) { walk(child, cx); cx += child.v / zoom.v; }
    })(zoom, 0);
    fg.textContent = "";
    fg.appendChild(frag);
    fg.style.height = ((depth + 1) * ROW) + "px";
    // Share of samples under a match, each sample counted once (skip matches inside matches).
    if (term === "") { matched.textContent = ""; return; }
    let hit = 0;
    (function count(node) { if (isMatch(node)) { hit += node.v; return; } node.c.forEach(count); })(root);
    matched.textContent = "matched " + (root.v ? (100 * hit / root.v).toFixed(2) : "0") + "%";
  }
  const pct = (v) => (root.v ? (100 * v / root.v).toFixed(2) : "0.00") + "%";
  fg.addEventListener("mouseover", (e) => {
    const node = e.target.fgNode;
    if (!node) return;
    const text = node.n + "  [" + node.k + "]  " + node.v + " " + data.unit + ", " + pct(node.v);
    details.textContent = text;
    e.target.title = text;
  });
  fg.addEventListener("click", (e) => {
    const node = e.target.fgNode;
    if (!node) return;
    zoom = node;
    render();
  });
  document.getElementById("reset").addEventListener("click", () => { zoom = root; render(); });
  search.addEventListener("input", () => { term = search.value.toLowerCase(); render(); });
  // "page.html#search=TERM" opens with TERM searched: a link can point at a function.
  if (location.hash.startsWith("#search=")) {
    search.value = decodeURIComponent(location.hash.slice(8));
    term = search.value.toLowerCase();
  }
  render();
})();
</script>
</body>
</html>
)HTML";

// The tree as JSON text, [name, kind, total, [children...]] per node, written with an explicit
// stack: nlohmann's dump recurses twice per tree level, which at kMaxFlameDepth overflows the
// stack of an instrumented (ASan) build. nlohmann still escapes each name.
std::string tree_json(const FlameNode& root) {
  std::string out;
  struct Pending {
    const FlameNode* node;
    size_t next_child;
  };
  std::vector<Pending> stack;
  auto open = [&](const FlameNode& n) {
    out += '[';
    out += nlohmann::json(n.name).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    out += fmt::format(",{},{},[", static_cast<int>(n.kind), n.total);
    stack.push_back({&n, 0});
  };
  open(root);
  while (!stack.empty()) {
    Pending& top = stack.back();
    if (top.next_child < top.node->children.size()) {
      if (top.next_child > 0) out += ',';
      const FlameNode& child = top.node->children[top.next_child++];
      open(child);
    } else {
      out += "]]";
      stack.pop_back();
    }
  }
  return out;
}

void replace_all(std::string* s, const std::string& from, const std::string& to) {
  for (size_t pos = 0; (pos = s->find(from, pos)) != std::string::npos; pos += to.size()) {
    s->replace(pos, from.size(), to);
  }
}

std::string title_of(const profile::Profile& profile) {
  std::string t =
      fmt::format("ljprof flame graph — {} {}", total_samples(profile), profile.count_unit);
  if (profile.period_ns > 0) t += fmt::format(", period {:.3g} ms", profile.period_ns / 1e6);
  return t;
}

bool ends_with_svg(const std::string& path) {
  if (path.size() < 4) return false;
  std::string tail = path.substr(path.size() - 4);
  for (char& c : tail) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
  return tail == ".svg";
}

// The child `name` (kind Root) of `parent`, `count` samples more; `parent` itself for "".
BuildNode* group_node(BuildNode& parent, const std::string& name, int64_t count) {
  if (name.empty()) return &parent;
  BuildNode& child = parent.children[{name, profile::FrameKind::Root}];
  if (child.name.empty()) {
    child.name = name;
    child.kind = profile::FrameKind::Root;
  }
  child.total += count;
  return &child;
}

}  // namespace

FlameNode flame_tree(const profile::Profile& profile, GroupBy group_by) {
  BuildNode root{"all", profile::FrameKind::Root, 0, {}};
  for (const profile::Sample& s : profile.samples) {
    if (s.frames.empty() || s.count <= 0) continue;
    root.total += s.count;
    BuildNode* node = &root;
    if (group_by == GroupBy::Fiber) node = group_node(root, fiber_group_label(s), s.count);
    size_t depth = 0;
    for (auto it = s.frames.rbegin(); it != s.frames.rend(); ++it, ++depth) {
      std::pair<std::string, profile::FrameKind> key{frame_label(*it), it->kind};
      if (depth == kMaxFlameDepth) {
        key = {fmt::format("[{} deeper frames not shown]", s.frames.size() - depth),
               profile::FrameKind::Unknown};
        it = std::prev(s.frames.rend());  // this marker is the last node of the stack
      }
      BuildNode& child = node->children[key];
      if (child.name.empty()) {
        child.name = key.first;
        child.kind = key.second;
      }
      child.total += s.count;
      node = &child;
    }
  }
  return freeze(std::move(root));
}

std::string flamegraph_svg(const profile::Profile& profile, GroupBy group_by) {
  FlameNode root = flame_tree(profile, group_by);
  int depth = depth_of(root);
  double height = depth * kRow + 3 * kSvgPad + kRow;
  double inner = kSvgWidth - 2 * kSvgPad;
  double px = root.total > 0 ? inner / static_cast<double>(root.total) : 0;
  std::string out = fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"{0:.0f}\" "
      "height=\"{1:.0f}\" viewBox=\"0 0 {0:.0f} {1:.0f}\">\n"
      "<style>text {{ font: 11px monospace; fill: #000; pointer-events: none; }} "
      ".frame:hover rect {{ stroke: #000; stroke-width: 0.5; }}</style>\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"#fafafa\"/>\n"
      "<text x=\"{2:.1f}\" y=\"{3:.1f}\" style=\"font: 14px sans-serif\">{4}</text>\n",
      kSvgWidth, height, kSvgPad, kSvgPad + kRow - 2, xml_escape(title_of(profile)));
  if (root.total > 0) {
    svg_node(root, kSvgPad, 0, px, height - kSvgPad, root.total, profile.count_unit, &out);
  }
  out += "</svg>\n";
  return out;
}

std::string flamegraph_html(const profile::Profile& profile, GroupBy group_by) {
  nlohmann::json data;
  data["title"] = title_of(profile);
  nlohmann::json kinds = nlohmann::json::array();
  for (int k = 0; k <= static_cast<int>(profile::FrameKind::Unknown); ++k) {
    kinds.push_back(profile::frame_kind_name(static_cast<profile::FrameKind>(k)));
  }
  data["kinds"] = std::move(kinds);
  data["unit"] = profile.count_unit;
  // The tree is spliced in as text (tree_json); "@TREE@" cannot occur elsewhere in the dump.
  data["tree"] = "@TREE@";
  // The names are printable (frame_label); replace rather than throw (nlohmann's default) is
  // the last line of defence.
  std::string json = data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  const size_t tree_at = json.find("\"@TREE@\"");
  json.replace(tree_at, 8, tree_json(flame_tree(profile, group_by)));
  // '<' only occurs inside JSON strings, where \u003c means the same; with no '<' at all the
  // blob can never contain "</script" or "<!--" and end the script element early.
  replace_all(&json, "<", "\\u003c");
  std::string html = kHtmlTemplate;
  std::string title = title_of(profile);
  replace_all(&title, "&", "&amp;");
  replace_all(&title, "<", "&lt;");
  // The JSON goes in last: it may itself contain the text "@TITLE@".
  replace_all(&html, "@TITLE@", title);
  size_t at = html.find("@DATA@");
  html.replace(at, 6, json);
  return html;
}

Status write_flamegraph(const profile::Profile& profile, const std::string& path,
                        GroupBy group_by) {
  std::string text;
  try {
    text = ends_with_svg(path) ? flamegraph_svg(profile, group_by)
                               : flamegraph_html(profile, group_by);
  } catch (const std::exception& e) {
    return make_error("{}: building the flame graph failed: {}", path, e.what());
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return make_error("{}: cannot create: {}", path, strerror(errno));
  out << text;
  out.close();
  if (!out) return make_error("{}: write failed", path);
  return Ok{};
}

}  // namespace ljprof::report
