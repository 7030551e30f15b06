// report/: the Tarantool fiber a sample ran on (profile::SampleFiber) through every writer and
// reader — pprof labels "fiber"/"fiber_id" checked by `go tool pprof -tags`, the round trip of
// read_pprof(), aggregation, and `ljprof report --group-by fiber` / `--fiber` (report/frames.h:
// the frame "fiber:NAME" at the root end of a stack, none for a sample without a fiber).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cctype>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "report/flamegraph.h"
#include "report/folded.h"
#include "report/frames.h"
#include "report/pprof.h"
#include "report/top.h"
#include "support/test_support.h"

namespace ljprof::report {
namespace {

using test::run;
using test::TempDir;

profile::Frame root_frame() {
  profile::Frame f;
  f.kind = profile::FrameKind::Root;
  f.function = "main";
  f.module = "/usr/bin/tarantool";
  f.address = 0x555555555000;
  f.module_offset = 0x1000;
  return f;
}

profile::Frame native_frame(const std::string& name, uint64_t off) {
  profile::Frame f;
  f.function = name;
  f.module = "/usr/bin/tarantool";
  f.address = 0x555555554000 + off;
  f.module_offset = off;
  return f;
}

profile::Frame lua_frame(const std::string& name, int64_t line) {
  profile::Frame f;
  f.kind = profile::FrameKind::Lua;
  f.function = name;
  f.file = "app.lua";
  f.line = line;
  f.start_line = line - 2;
  return f;
}

// Root first for readability; Sample::frames are leaf first.
profile::Sample fiber_sample(std::vector<profile::Frame> root_first, int64_t count, uint64_t id,
                             const std::string& name) {
  profile::Sample s;
  s.frames.assign(root_first.rbegin(), root_first.rend());
  s.count = count;
  s.pid = 42;
  s.tid = 42;
  s.fiber = {id, name, ""};
  return s;
}

// Fibers "worker" (id 101) and "gc" (id 102) on one stack, a second fiber named "worker" (id
// 103) on another, and samples without a fiber; the recorder's one-event samples included.
profile::Profile two_fiber_profile() {
  const profile::Frame main = root_frame(), pcall = native_frame("lua_pcall", 0x2000);
  const profile::Frame handler = lua_frame("handler", 12), other = lua_frame("other", 50);
  const profile::Frame poll = native_frame("epoll_wait", 0x3000);
  profile::Profile p;
  p.period_ns = 10'000'000;
  p.samples = {
      fiber_sample({main, pcall, handler}, 5, 101, "worker"),
      fiber_sample({main, pcall, handler}, 1, 101, "worker"),
      fiber_sample({main, pcall, handler}, 1, 101, "worker"),
      fiber_sample({main, pcall, handler}, 3, 102, "gc"),
      fiber_sample({main, pcall, other}, 2, 103, "worker"),
      fiber_sample({main, poll}, 4, 0, ""),
  };
  return p;
}

int64_t total_of(const std::vector<profile::Sample>& samples, uint64_t fiber_id) {
  int64_t n = 0;
  for (const profile::Sample& s : samples) {
    if (s.fiber.id == fiber_id) n += s.count;
  }
  return n;
}

TEST(Fiber, AggregationKeepsFibersApart) {
  const profile::Profile p = two_fiber_profile();
  const std::vector<profile::Sample> merged = aggregate_samples(p.samples);
  // worker/101's three events merge; gc/102 has the same stack, pid and tid but stays apart.
  ASSERT_EQ(merged.size(), 4u);
  EXPECT_EQ(total_of(merged, 101), 7);
  EXPECT_EQ(total_of(merged, 102), 3);
  EXPECT_EQ(total_of(merged, 103), 2);
  EXPECT_EQ(total_of(merged, 0), 4);
  profile::Sample a = p.samples[0], b = p.samples[0];
  EXPECT_TRUE(same_sample(a, b));
  b.fiber.id = 102;
  EXPECT_FALSE(same_sample(a, b));
  b = a;
  b.fiber.name = "renamed";
  EXPECT_FALSE(same_sample(a, b));
}

TEST(Fiber, PprofRoundTrip) {
  TempDir dir;
  const std::string path = dir.file("fibers.pb.gz");
  const profile::Profile in = two_fiber_profile();
  ASSERT_TRUE(write_pprof(in, path).ok());
  auto out = read_pprof(path);
  ASSERT_TRUE(out.ok()) << out.message();
  const std::vector<profile::Sample> want = aggregate_samples(in.samples),
                                     got = aggregate_samples(out->samples);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_TRUE(same_sample(got[i], want[i]))
        << "sample " << i << ": fiber " << got[i].fiber.id << " '" << got[i].fiber.name << "'";
  }
  // What the writer wrote is already aggregated: read back, it is the aggregated input itself.
  ASSERT_EQ(out->samples.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(same_sample(out->samples[i], want[i]));

  // A fiber without a name, and the largest id, survive too.
  profile::Profile edge;
  edge.samples = {fiber_sample({root_frame()}, 1, UINT64_MAX, ""),
                  fiber_sample({root_frame()}, 2, 7, "")};
  ASSERT_TRUE(write_pprof(edge, path).ok());
  auto back = read_pprof(path);
  ASSERT_TRUE(back.ok()) << back.message();
  EXPECT_EQ(total_of(back->samples, UINT64_MAX), 1);
  EXPECT_EQ(total_of(back->samples, 7), 2);
  for (const profile::Sample& s : back->samples) EXPECT_EQ(s.fiber.name, "");

  // The same fiber id and name on two cords (a wall profile's): two samples, each its cord back.
  profile::Profile cords;
  cords.samples = {fiber_sample({root_frame()}, 3, 101, "main"),
                   fiber_sample({root_frame()}, 4, 101, "main")};
  cords.samples[0].fiber.cord = "main";
  cords.samples[1].fiber.cord = "wal";
  cords.samples[1].tid = 77;
  ASSERT_TRUE(write_pprof(cords, path).ok());
  auto cords_back = read_pprof(path);
  ASSERT_TRUE(cords_back.ok()) << cords_back.message();
  ASSERT_EQ(cords_back->samples.size(), 2u);
  for (const profile::Sample& s : cords_back->samples) {
    EXPECT_EQ(s.count, s.fiber.cord == "wal" ? 4 : 3) << s.fiber.cord;
    EXPECT_EQ(s.tid, s.fiber.cord == "wal" ? 77u : cords.samples[0].tid) << s.fiber.cord;
  }
}

// The agent's profiles (FiberLabels::NameOnly) carry fiber names and no ids; read back, each
// sample keeps its fiber's name with id 0 (present: grouped and filtered by name).
TEST(Fiber, NameOnlyProfilesKeepNamesWithoutIds) {
  TempDir dir;
  const std::string path = dir.file("agent.pb.gz");
  auto bytes = pprof_gzip_bytes(two_fiber_profile(), FiberLabels::NameOnly);
  ASSERT_TRUE(bytes.ok()) << bytes.message();
  std::ofstream(path, std::ios::binary) << *bytes;
  auto back = read_pprof(path);
  ASSERT_TRUE(back.ok()) << back.message();
  std::map<std::string, int64_t> by_name;
  for (const profile::Sample& s : back->samples) {
    EXPECT_EQ(s.fiber.id, 0u);
    EXPECT_EQ(s.fiber.present(), !s.fiber.name.empty());
    by_name[s.fiber.name] += s.count;
  }
  EXPECT_EQ(by_name, (std::map<std::string, int64_t>{{"", 4}, {"gc", 3}, {"worker", 9}}));
}

// `go tool pprof -tags`: one block per label key ("fiber: Total 12.0"), then "N (P%): VALUE"
// per value; value -> N.
using Counts = std::map<std::string, double>;
Counts tag_block(const std::string& out, const std::string& key) {
  Counts values;
  std::istringstream in(out);
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    const size_t colon = line.find(": Total ");
    if (colon != std::string::npos) {
      const size_t start = line.find_first_not_of(' ');
      inside = line.substr(start, colon - start) == key;
      continue;
    }
    const size_t sep = line.find("): ");
    if (inside && sep != std::string::npos) values[line.substr(sep + 3)] = std::stod(line);
  }
  return values;
}

// `go tool pprof -traces`: blocks between "-----------+---" lines, each its labels ("  fiber:
// worker") and then its stack, the first line of which starts with the count. Returns
// "fiber=NAME fiber_id=ID" (what the block's labels say) -> count.
Counts fiber_traces(const std::string& out) {
  Counts traces;
  std::istringstream in(out);
  std::string line, name, id;
  while (std::getline(in, line)) {
    if (line.starts_with("-----------+")) {
      name.clear();
      id.clear();
      continue;
    }
    const size_t colon = line.find(":  ");
    const size_t start = line.find_first_not_of(' ');
    if (colon != std::string::npos && start < colon) {
      const std::string key = line.substr(start, colon - start), value = line.substr(colon + 3);
      if (key == "fiber") name = value;
      if (key == "fiber_id") id = value;
      continue;
    }
    if (start != std::string::npos && std::isdigit(static_cast<unsigned char>(line[start])) &&
        !id.empty()) {
      traces[fmt::format("fiber={} fiber_id={}", name, id)] += std::stod(line);
    }
  }
  return traces;
}

TEST(Fiber, GoToolPprofShowsFiberLabels) {
  TempDir dir;
  const std::string path = dir.file("fibers.pb.gz");
  ASSERT_TRUE(write_pprof(two_fiber_profile(), path).ok());
  auto tags = test::go_tool_pprof(dir.path(), {"-tags", "-sample_index=samples", path});
  ASSERT_EQ(tags.exit_code, 0) << tags.err;
  // Per name: the two fibers named "worker" add up (7 + 2); the sample without a fiber has no
  // label, which pprof leaves out of the block.
  EXPECT_EQ(tag_block(tags.out, "fiber"), (Counts{{"worker", 9}, {"gc", 3}})) << tags.out;
  EXPECT_EQ(tag_block(tags.out, "fiber_id"), (Counts{{"101", 7}, {"102", 3}, {"103", 2}}))
      << tags.out;
  // pid/tid stay as they were.
  EXPECT_EQ(tag_block(tags.out, "pid"), (Counts{{"42", 16}})) << tags.out;
  EXPECT_EQ(tag_block(tags.out, "tid"), (Counts{{"42", 16}})) << tags.out;

  // -traces prints each sample with its labels: name and id belong to the same samples.
  auto traces = test::go_tool_pprof(dir.path(), {"-traces", "-sample_index=samples", path});
  ASSERT_EQ(traces.exit_code, 0) << traces.err;
  EXPECT_EQ(fiber_traces(traces.out), (Counts{{"fiber=worker fiber_id=101", 7},
                                              {"fiber=gc fiber_id=102", 3},
                                              {"fiber=worker fiber_id=103", 2}}))
      << traces.out;

  // pprof's own filter on the label selects one fiber's samples.
  auto gc = test::go_tool_pprof(dir.path(),
                                {"-tags", "-sample_index=samples", "-tagfocus=fiber=gc", path});
  ASSERT_EQ(gc.exit_code, 0) << gc.err;
  EXPECT_EQ(tag_block(gc.out, "fiber"), (Counts{{"gc", 3}})) << gc.out;
  EXPECT_EQ(tag_block(gc.out, "fiber_id"), (Counts{{"102", 3}})) << gc.out;
}

// The rule of report/frames.h, applied by hand: "fiber:NAME" first on the line of each sample
// that ran on a fiber (';' in a name escaped to ':' like any frame), fibers of one name merged,
// nothing added for a sample without a fiber.
const char* const kGroupedFolded =
    "fiber:gc;main [root];lua_pcall;handler (app.lua:12) 3\n"
    "fiber:worker;main [root];lua_pcall;handler (app.lua:12) 7\n"
    "fiber:worker;main [root];lua_pcall;other (app.lua:50) 2\n"
    "main [root];epoll_wait 4\n";

TEST(Fiber, FoldedGroupedByFiber) {
  const profile::Profile p = two_fiber_profile();
  EXPECT_EQ(folded_text(p, GroupBy::Fiber), kGroupedFolded);
  // Ungrouped: the fibers' samples merge as before.
  EXPECT_EQ(folded_text(p),
            "main [root];epoll_wait 4\n"
            "main [root];lua_pcall;handler (app.lua:12) 10\n"
            "main [root];lua_pcall;other (app.lua:50) 2\n");

  profile::Profile odd;
  odd.samples = {fiber_sample({root_frame()}, 1, 5, "a;b"), fiber_sample({root_frame()}, 2, 6, "")};
  EXPECT_EQ(folded_text(odd, GroupBy::Fiber),
            "fiber:#6;main [root] 2\n"
            "fiber:a:b;main [root] 1\n");
  profile::Sample none, odd_name, other_cord, main_cord;
  odd_name.fiber = {9, "x\ny", ""};
  other_cord.fiber = {101, "main", "wal"};
  main_cord.fiber = {101, "main", "main"};
  EXPECT_EQ(fiber_group_label(none), "");
  EXPECT_EQ(fiber_group_label(odd_name), "fiber:x\\x0ay");
  // Another thread's cord is named: its "main" fiber is not the tx thread's.
  EXPECT_EQ(fiber_group_label(other_cord), "fiber:main (wal)");
  EXPECT_EQ(fiber_group_label(main_cord), "fiber:main");
}

// The top table grouped by fiber: one section per fiber label, most samples first, each a top
// table of its own samples. The counts follow from two_fiber_profile's samples: "worker" (ids
// 101 and 103) 5+1+1+2 = 9, "(no fiber)" 4, "gc" 3; 16 in all.
TEST(Fiber, TopTableGroupedByFiber) {
  std::ostringstream out;
  write_top_by_fiber(two_fiber_profile(), out, 5);
  const std::string text = out.str();
  const size_t worker = text.find("== fiber:worker: 9 samples, 56.25% of all\n");
  const size_t none = text.find("== (no fiber): 4 samples, 25.00% of all\n");
  const size_t gc = text.find("== fiber:gc: 3 samples, 18.75% of all\n");
  ASSERT_NE(worker, std::string::npos) << text;
  ASSERT_NE(none, std::string::npos) << text;
  ASSERT_NE(gc, std::string::npos) << text;
  EXPECT_LT(worker, none);
  EXPECT_LT(none, gc);
  // Each section is a whole top table over its own samples.
  EXPECT_NE(text.find("9 samples total", worker), std::string::npos) << text;
  const std::string gc_section = text.substr(gc);
  EXPECT_NE(gc_section.find("3 samples total"), std::string::npos) << gc_section;
  EXPECT_NE(gc_section.find("handler"), std::string::npos) << gc_section;
  EXPECT_EQ(gc_section.find("other"), std::string::npos) << gc_section;
}

TEST(Fiber, FlameTreeGroupedByFiber) {
  const FlameNode root = flame_tree(two_fiber_profile(), GroupBy::Fiber);
  EXPECT_EQ(root.total, 16);
  std::map<std::string, std::pair<profile::FrameKind, int64_t>> children;
  for (const FlameNode& c : root.children) children[c.name] = {c.kind, c.total};
  using K = profile::FrameKind;
  EXPECT_EQ(children, (std::map<std::string, std::pair<K, int64_t>>{
                          {"fiber:gc", {K::Root, 3}},
                          {"fiber:worker", {K::Root, 9}},
                          {"main [root]", {K::Root, 4}},
                      }));
  for (const FlameNode& c : root.children) {
    if (c.name != "fiber:worker") continue;
    ASSERT_EQ(c.children.size(), 1u);
    EXPECT_EQ(c.children[0].name, "main [root]");
  }
  const std::string html = flamegraph_html(two_fiber_profile(), GroupBy::Fiber);
  EXPECT_NE(html.find("[\"fiber:worker\","), std::string::npos);
  const std::string svg = flamegraph_svg(two_fiber_profile(), GroupBy::Fiber);
  EXPECT_NE(svg.find("<title>fiber:gc (3 samples"), std::string::npos);
  EXPECT_EQ(flamegraph_svg(two_fiber_profile()).find("fiber:"), std::string::npos);
}

TEST(ReportCommand, GroupByFiberAndFiberFilter) {
  TempDir dir;
  const std::string path = dir.file("fibers.pb.gz");
  ASSERT_TRUE(write_pprof(two_fiber_profile(), path).ok());
  auto grouped = run({test::ljprof_bin(), "report", path, "--group-by", "fiber", "--folded", "-"});
  ASSERT_EQ(grouped.exit_code, 0) << grouped.err;
  EXPECT_EQ(grouped.out, kGroupedFolded);
  auto plain = run({test::ljprof_bin(), "report", path, "--group-by", "none", "--folded", "-"});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(plain.out, folded_text(two_fiber_profile()));

  std::string html = dir.file("f.html");
  auto fg = run({test::ljprof_bin(), "report", path, "--group-by=fiber", "--flamegraph", html});
  ASSERT_EQ(fg.exit_code, 0) << fg.err;
  EXPECT_NE(test::read_text(html).find("fiber:worker"), std::string::npos);

  // --fiber: both fibers named "worker", nothing else.
  auto worker = run({test::ljprof_bin(), "report", path, "--fiber", "worker", "--group-by", "fiber",
                     "--folded", "-"});
  ASSERT_EQ(worker.exit_code, 0) << worker.err;
  EXPECT_EQ(worker.out,
            "fiber:worker;main [root];lua_pcall;handler (app.lua:12) 7\n"
            "fiber:worker;main [root];lua_pcall;other (app.lua:50) 2\n");
  auto none = run({test::ljprof_bin(), "report", path, "--fiber", "nope"});
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find("no sample of a fiber named 'nope'"), std::string::npos) << none.err;
  EXPECT_NE(none.err.find("gc, worker"), std::string::npos) << none.err;

  auto bad = run({test::ljprof_bin(), "report", path, "--group-by", "thread"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--group-by thread"), std::string::npos) << bad.err;

  auto help = run({test::ljprof_bin(), "report", "--help"});
  EXPECT_EQ(help.exit_code, 0);
  for (const char* text : {"--group-by", "--fiber", "fiber:NAME", "no extra frame"}) {
    EXPECT_NE(help.out.find(text), std::string::npos) << text << "\n" << help.out;
  }
}

}  // namespace
}  // namespace ljprof::report
