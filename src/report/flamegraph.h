// report/flamegraph.h: a flame graph a person opens directly — a static SVG, or a
// self-contained interactive HTML page (inline CSS + JS, no network, no other files).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "profile/profile.h"
#include "report/frames.h"

namespace ljprof::report {

// The merged call tree both formats draw: children of a node are the distinct frame_label()s
// called from it, sorted by label (flamegraph.pl's order, so the picture is deterministic).
struct FlameNode {
  std::string name;
  profile::FrameKind kind = profile::FrameKind::Root;
  int64_t total = 0;  // samples in this subtree
  std::vector<FlameNode> children;
};
// Root is "all". Stacks deeper than 2048 frames end in one "[N deeper frames not shown]"
// node (kind Unknown) so nothing recursing over the tree can exhaust the stack. GroupBy::Fiber
// puts a node fiber_group_label() (report/frames.h; kind Root) between "all" and the stack of
// each sample that ran on a fiber.
FlameNode flame_tree(const profile::Profile& profile, GroupBy group_by = GroupBy::None);

// `path` ending in ".svg" (any case): SVG, root at the bottom, one <g> per frame holding a
// <rect>, a <text> and a <title> tooltip "label (N samples, P%)".
// Anything else: HTML icicle (root on top). The tree is embedded as JSON in a
// <script type="application/json"> ('<' written as \u003c so no "</script>" can occur); the
// inline script draws every frame as <div class="frame k-KIND" data-name=... data-kind=...>.
// Click zooms into a frame (the ancestors stay as full-width bars; click "all" to reset),
// hover shows frame, kind, count and percent, the search box highlights matching frames
// and reports the share of samples they cover ("FILE.html#search=TERM" opens with TERM
// searched); colour is by frame kind. Frames narrower than
// 1/2000 of the zoomed width are not drawn (they would be sub-pixel).
Status write_flamegraph(const profile::Profile& profile, const std::string& path,
                        GroupBy group_by = GroupBy::None);

std::string flamegraph_svg(const profile::Profile& profile, GroupBy group_by = GroupBy::None);
std::string flamegraph_html(const profile::Profile& profile, GroupBy group_by = GroupBy::None);

}  // namespace ljprof::report
