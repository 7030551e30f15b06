// report/: every writer checked against the tool that really reads its format — `go tool
// pprof` for the .pb.gz, headless Chromium for the flame graph — plus the reader's behaviour
// on hostile input and the `ljprof report` command.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "profile/profile_frames.h"
#include "proto/profile.pb.h"
#include "report/flamegraph.h"
#include "report/folded.h"
#include "report/frames.h"
#include "report/heap_report.h"
#include "report/outputs.h"
#include "report/perf_script.h"
#include "report/pprof.h"
#include "report/speedscope.h"
#include "report/top.h"
#include "support/test_support.h"

namespace ljprof::report {
namespace {

namespace pp = perftools::profiles;
using test::run;

using test::TempDir;

void spit(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

constexpr uint64_t kLuajitBase = 0x555555554000, kLibBase = 0x7f0000000000,
                   kFooBase = 0x7f1000000000;

profile::Frame native(const std::string& name, const std::string& module, uint64_t base,
                      uint64_t off, profile::FrameKind kind = profile::FrameKind::Native) {
  profile::Frame f;
  f.kind = kind;
  f.function = name;
  f.module = module;
  f.build_id = module == "/usr/bin/luajit" ? "0123456789abcdef" : "";
  f.address = base + off;
  f.module_offset = off;
  return f;
}

profile::Frame lua(const std::string& name, int64_t line, int64_t start_line) {
  profile::Frame f;
  f.kind = profile::FrameKind::Lua;
  f.function = name;
  f.file = "app.lua";
  f.line = line;
  f.start_line = start_line;
  return f;
}

// Stacks are written root first here for readability and reversed into leaf-first Samples.
profile::Sample sample(std::vector<profile::Frame> root_first, int64_t count, uint32_t tid = 7) {
  profile::Sample s;
  s.frames.assign(root_first.rbegin(), root_first.rend());
  s.count = count;
  s.pid = 42;
  s.tid = tid;
  return s;
}

// A mixed profile: Lua -> C (string.gsub) -> Lua nesting, a JIT trace, an FFI call, an
// unrecovered frame, a native frame without a symbol and a name the folded format must escape.
profile::Profile make_profile() {
  const std::string exe = "/usr/bin/luajit", lib = "/usr/lib/x86_64-linux-gnu/libluajit-5.1.so.2";
  profile::Frame main = native("main", exe, kLuajitBase, 0x1000, profile::FrameKind::Root);
  profile::Frame pcall = native("lua_pcall", lib, kLibBase, 0x2000);
  profile::Frame gsub = native("string.gsub", lib, kLibBase, 0x3000, profile::FrameKind::CFunc);
  profile::Frame crc = native("crc32", "/usr/lib/x86_64-linux-gnu/libz.so.1", 0x7f2000000000, 0x40,
                              profile::FrameKind::Ffi);
  profile::Frame nosym = native("", "/usr/lib/libfoo.so", kFooBase, 0x500);
  profile::Frame odd = native("odd;name\nx", lib, kLibBase, 0x4000);
  profile::Frame trace;
  trace.kind = profile::FrameKind::Trace;
  trace.function = "hot_loop";  // JIT-compiled Lua code: named like a Lua frame
  trace.file = "/srv/app.lua";
  trace.line = 40;
  trace.start_line = 38;
  profile::Frame unknown;
  unknown.kind = profile::FrameKind::Unknown;
  unknown.function = "[unknown: read fault]";

  profile::Profile p;
  p.period_ns = 10'000'000;
  p.start_time_ns = 1'700'000'000'000'000'000;
  p.duration_ns = 2'000'000'000;
  p.counters = {{"read fault", 1}, {"map full", 0}};
  p.samples = {
      sample({main, pcall, lua("handler", 12, 10), gsub, lua("callback", 30, 28)}, 5),
      sample({main, pcall, lua("handler", 12, 10), gsub}, 3),
      sample({main, pcall, trace}, 2),
      sample({main, unknown}, 1),
      sample({main, pcall, lua("handler", 14, 10), nosym}, 4),
      // One event per sample, as the recorder appends them: writers must merge these.
      sample({main, pcall, lua("handler", 12, 10), gsub, lua("callback", 30, 28)}, 1),
      sample({main, pcall, lua("handler", 12, 10), gsub, lua("callback", 30, 28)}, 1),
      sample({main, pcall, lua("handler", 12, 10), crc}, 1, 8),
      sample({main, pcall, odd}, 1),
  };
  return p;
}

// ---------------------------------------------------------------------------------------------

// The heap text report warns when most of a live heap was reached from no root (a read that
// raced a root), and only then: not for a core, not for a heap whose garbage is a minority.
TEST(HeapText, WarnsWhenALiveReadReachedMostObjectsFromNoRoot) {
  heap::Census census;
  census.objects.resize(10);
  heap::Retainers most, some;
  most.unreached_count = 8;
  some.unreached_count = 2;
  const std::string kWarning = "most objects were reached from no root";
  HeapReportOptions live, core;
  live.live = true;
  EXPECT_NE(heap_text(census, most, live).find(kWarning), std::string::npos);
  EXPECT_EQ(heap_text(census, most, core).find(kWarning), std::string::npos);
  EXPECT_EQ(heap_text(census, some, live).find(kWarning), std::string::npos);
}

TEST(Folded, ExactOutput) {
  EXPECT_EQ(folded_text(make_profile()),
            "main [root];[unknown: read fault] 1\n"
            "main [root];lua_pcall;handler (app.lua:12);crc32 [ffi] 1\n"
            "main [root];lua_pcall;handler (app.lua:12);string.gsub [cfunc] 3\n"
            "main [root];lua_pcall;handler (app.lua:12);string.gsub [cfunc];callback "
            "(app.lua:30) 7\n"
            "main [root];lua_pcall;handler (app.lua:14);libfoo.so+0x500 4\n"
            "main [root];lua_pcall;hot_loop (app.lua:40) 2\n"
            "main [root];lua_pcall;odd:name\\x0ax 1\n");  // the line break as printable text
}

TEST(Top, FlatAndCumPerFunction) {
  std::map<std::string, std::pair<int64_t, int64_t>> got;
  for (const TopRow& r : top_rows(make_profile())) got[r.name] = {r.flat, r.cum};
  using P = std::pair<int64_t, int64_t>;
  EXPECT_EQ(got["callback (app.lua:28)"], P(7, 7));
  EXPECT_EQ(got["handler (app.lua:10)"], P(0, 15));  // lines 12 and 14: one function
  EXPECT_EQ(got["string.gsub [cfunc]"], P(3, 10));
  EXPECT_EQ(got["libfoo.so+0x500"], P(4, 4));
  EXPECT_EQ(got["main [root]"], P(0, 19));
  EXPECT_EQ(got["lua_pcall"], P(0, 18));
  EXPECT_EQ(got["hot_loop (app.lua:38)"], P(2, 2));
  EXPECT_EQ(got["[unknown: read fault]"], P(1, 1));

  std::ostringstream out;
  write_top(make_profile(), out, 2);
  std::string text = out.str();
  EXPECT_NE(text.find("Showing top 2 of 10 functions, 19 samples total"), std::string::npos)
      << text;
  EXPECT_NE(
      text.find("         7  36.84%  36.84%          7  36.84%  lua     callback (app.lua:28)"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("         4  21.05%  57.89%          4  21.05%  native  libfoo.so+0x500"),
            std::string::npos)
      << text;
}

// `go tool pprof -top` output: name -> flat column.
std::map<std::string, std::string> pprof_flat(const std::string& out) {
  std::map<std::string, std::string> rows;
  for (const auto& [name, row] : test::parse_pprof_top(out)) rows[name] = row.flat;
  return rows;
}

test::CommandResult go_pprof(const TempDir& dir, const std::vector<std::string>& args) {
  return test::go_tool_pprof(dir.path(), args);
}

TEST(Pprof, GoToolPprofTopListsFlatCounts) {
  TempDir dir;
  std::string path = dir.file("profile.pb.gz");
  Status written = write_pprof(make_profile(), path);
  ASSERT_TRUE(written.ok()) << written.message();

  // The exact command of the brief: default sample type (pprof shows the last one,
  // cpu/nanoseconds = count * 10ms).
  auto cpu = go_pprof(dir, {"-top", "-nodecount=50", path});
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  auto cpu_rows = pprof_flat(cpu.out);
  EXPECT_EQ(cpu_rows["callback"], "70ms") << cpu.out;
  EXPECT_EQ(cpu_rows["string.gsub"], "30ms") << cpu.out;
  EXPECT_EQ(cpu_rows["hot_loop"], "20ms") << cpu.out;
  EXPECT_NE(cpu.out.find("Duration: 2s"), std::string::npos) << cpu.out;

  auto counts = go_pprof(dir, {"-top", "-nodecount=50", "-sample_index=samples", path});
  ASSERT_EQ(counts.exit_code, 0) << counts.err;
  auto rows = pprof_flat(counts.out);
  EXPECT_EQ(rows["callback"], "7") << counts.out;
  EXPECT_EQ(rows["string.gsub"], "3") << counts.out;
  EXPECT_EQ(rows["hot_loop"], "2") << counts.out;
  EXPECT_EQ(rows["[unknown: read fault]"], "1") << counts.out;
  EXPECT_EQ(rows["crc32"], "1") << counts.out;
  EXPECT_EQ(rows["handler"], "0") << counts.out;  // one function over lines 12 and 14
  EXPECT_EQ(rows["main"], "0") << counts.out;
  EXPECT_EQ(rows["lua_pcall"], "0") << counts.out;

  // Counters travel as comments, which `-comments` prints.
  auto comments = go_pprof(dir, {"-comments", path});
  ASSERT_EQ(comments.exit_code, 0) << comments.err;
  EXPECT_NE(comments.out.find("counter read fault=1"), std::string::npos) << comments.out;
}

TEST(Pprof, ReadRoundTripEqualsAggregatedInput) {
  TempDir dir;
  std::string path = dir.file("profile.pb.gz");
  profile::Profile in = make_profile();
  ASSERT_TRUE(write_pprof(in, path).ok());
  auto out = read_pprof(path);
  ASSERT_TRUE(out.ok()) << out.message();
  EXPECT_EQ(out->period_ns, in.period_ns);
  EXPECT_EQ(out->start_time_ns, in.start_time_ns);
  EXPECT_EQ(out->duration_ns, in.duration_ns);
  EXPECT_EQ(out->counters, in.counters);
  // Names are written as printable text (common/printable.h): the one name with a line break
  // comes back with it as \x0a; everything else exactly.
  for (profile::Sample& s : in.samples) {
    for (profile::Frame& f : s.frames) {
      if (f.function == "odd;name\nx") f.function = R"(odd;name\x0ax)";
    }
  }
  std::vector<profile::Sample> want = aggregate_samples(in.samples),
                               got = aggregate_samples(out->samples);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_TRUE(same_sample(got[i], want[i]))
        << "sample " << i << ": " << folded_frame(got[i].frames[0]);
  }
  EXPECT_EQ(folded_text(*out), folded_text(in));
}

// A stall profile (the agent's --loop-stalls): one time value per sample, a CPU sample's count *
// period and an off-CPU one's own length, under a sample type whose name has no "cpu" (Pyroscope
// files those under process_cpu); it reads back as the same profile.
TEST(Pprof, StallProfileWeighsCpuAndOffCpuSamplesByTheirTime) {
  TempDir dir;
  const std::string path = dir.file("stall.pb.gz");
  profile::Profile in;
  in.value_type = profile::ValueType::LoopStall;
  in.period_ns = 10'000'000;
  const profile::Frame main = native("main", "/usr/bin/luajit", kLuajitBase, 0x1000);
  in.samples = {sample({main, lua("busy", 5, 4)}, 3), sample({main, lua("blocks", 9, 8)}, 1)};
  in.samples[1].off_cpu_ns = 250'000'000;
  in.samples[1].state = "blocked";
  ASSERT_TRUE(write_pprof(in, path).ok());
  auto raw = go_pprof(dir, {"-raw", path});
  ASSERT_EQ(raw.exit_code, 0) << raw.err;
  EXPECT_NE(raw.out.find("PeriodType: loop_stall nanoseconds"), std::string::npos) << raw.out;
  EXPECT_NE(raw.out.find("samples/count loop_stall/nanoseconds"), std::string::npos) << raw.out;
  EXPECT_EQ(raw.out.find("cpu"), std::string::npos) << raw.out;
  auto top = go_pprof(dir, {"-top", "-nodecount=10", path});
  ASSERT_EQ(top.exit_code, 0) << top.err;
  auto rows = pprof_flat(top.out);
  EXPECT_EQ(rows["busy"], "30ms") << top.out;
  EXPECT_EQ(rows["blocks"], "250ms") << top.out;
  auto out = read_pprof(path);
  ASSERT_TRUE(out.ok()) << out.message();
  EXPECT_EQ(out->value_type, profile::ValueType::LoopStall);
  std::map<std::string, int64_t> off_cpu;
  for (const profile::Sample& s : out->samples) off_cpu[s.frames[0].function] += s.off_cpu_ns;
  EXPECT_EQ(off_cpu["busy"], 0);
  EXPECT_EQ(off_cpu["blocks"], 250'000'000);
}

// The speedscope timeline follows report/speedscope.h's rules: a track per (pid, tid, fiber),
// frames opened root first and closed leaf first (never a close of a frame that is not the
// innermost open one), shared frames kept open from one sample to the next, an overlapping
// sample moved later with its length kept, and a gap of over half a period closing everything.
TEST(Speedscope, EventsNestAndFollowTheTimelineRules) {
  const profile::Frame main = native("main", "/usr/bin/luajit", kLuajitBase, 0x1000);
  profile::Profile p;
  p.period_ns = 10;
  p.timeline.stacks = {sample({main, lua("a", 5, 4)}, 1), sample({main, lua("b", 9, 8)}, 1)};
  p.timeline.stacks[1].fiber = {7, "worker", ""};
  using Point = profile::Timeline::Point;
  p.timeline.points = {Point{110, 0, 7, 0}, Point{120, 0, 7, 0}, Point{125, 0, 7, 0},
                       Point{200, 0, 7, 0}, Point{150, 40, 7, 1}};
  auto text = speedscope_json(p, "t.json");
  ASSERT_TRUE(text.ok()) << text.message();
  const nlohmann::json doc = nlohmann::json::parse(*text);
  ASSERT_EQ(doc["profiles"].size(), 2u);
  EXPECT_EQ(doc["profiles"][0]["name"], "pid 42 tid 7");
  EXPECT_EQ(doc["profiles"][1]["name"], "pid 42 tid 7 fiber worker");
  std::vector<std::string> names;
  for (const auto& f : doc["shared"]["frames"]) names.push_back(f["name"]);
  std::string events;
  for (const auto& e : doc["profiles"][0]["events"]) {
    events += fmt::format("{}{}@{} ", e["type"].get<std::string>(), names[e["frame"].get<size_t>()],
                          e["at"].get<int64_t>());
  }
  // Times from the first interval's start (100): [100,110) [110,120) [120,130) (moved from
  // [115,125)), a gap, [190,200).
  EXPECT_EQ(events,
            "Omain@0 Oa (app.lua:4)@0 Ca (app.lua:4)@30 Cmain@30 Omain@90 Oa (app.lua:4)@90 "
            "Ca (app.lua:4)@100 Cmain@100 ");
  EXPECT_EQ(doc["profiles"][1]["events"].size(), 4u) << "the off-CPU interval [110,150)";
  EXPECT_EQ(doc["profiles"][1]["events"][0]["at"], 10);
  EXPECT_EQ(doc["profiles"][1]["events"][3]["at"], 50);
  EXPECT_FALSE(speedscope_json(profile::Profile{}, "empty").ok());
}

// perf script text keeps one frame to a line whatever a target's names hold, and each line
// reads back as the Firefox Profiler importer reads it (linux-perf.ts): the header's thread and
// time, a frame's "PC FUNCTION (MODULE)"; an off-CPU interval is one sample per period.
TEST(PerfScript, HostileNamesStayOneFrameALineAndOffCpuIsSampledPerPeriod) {
  profile::Frame odd = native("f)\n(g+0x10", "/opt/a (b)/libodd.so", kFooBase, 0x10);
  profile::Frame main = native("main", "/usr/bin/luajit", kLuajitBase, 0x1000);
  profile::Profile p;
  p.period_ns = 10'000'000;
  p.timeline.stacks = {sample({main, odd}, 1)};
  using Point = profile::Timeline::Point;
  p.timeline.points = {Point{1'000'000'000, 0, 7, 0}, Point{2'000'000'000, 30'000'000, 7, 0}};
  auto text = perf_script_text(p);
  ASSERT_TRUE(text.ok()) << text.message();
  static const std::regex kHeader(R"(^(.*)\s+([\d.]+):)"),
      kFrame(R"(^\s*(\w+)\s*(.+) \(([^)]*)\))");
  std::istringstream in(*text);
  std::string line;
  std::vector<std::string> times, functions, modules;
  bool in_sample = false;
  while (std::getline(in, line)) {
    std::smatch m;
    if (line.empty()) {
      in_sample = false;
    } else if (!in_sample) {
      ASSERT_TRUE(std::regex_search(line, m, kHeader)) << line;
      times.push_back(m[2]);
      in_sample = true;
    } else {
      ASSERT_TRUE(std::regex_search(line, m, kFrame)) << line;
      functions.push_back(m[2]);
      modules.push_back(m[3]);
    }
  }
  EXPECT_EQ(times, (std::vector<std::string>{"1.000000", "1.980000", "1.990000", "2.000000"}));
  ASSERT_EQ(functions.size(), 8u) << *text;
  // frames.h: a label is printable text (the line break as \x0a); not cut as a symbol offset.
  EXPECT_EQ(functions[0], "f)\\x0a(g+0x10 ");
  EXPECT_EQ(modules[0], "libodd.so");
  EXPECT_EQ(functions[1], "main");
  EXPECT_FALSE(perf_script_text(profile::Profile{}).ok());
}

// Runs headless Chromium on `url` and returns the DOM after the page's scripts ran.
std::string chromium_dom(const TempDir& dir, const std::string& url) {
  auto r = run({"/usr/bin/timeout", "100", "/usr/bin/chromium", "--headless", "--no-sandbox",
                "--disable-gpu", "--no-first-run", "--user-data-dir=" + dir.file("chromium"),
                "--dump-dom", url});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.out;
}

size_t occurrences(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (size_t pos = haystack.find(needle); pos != std::string::npos;
       pos = haystack.find(needle, pos + needle.size())) {
    ++n;
  }
  return n;
}

TEST(FlameGraph, HtmlRenderedByHeadlessChromium) {
  TempDir dir;
  std::string path = dir.file("flame.html");
  profile::Profile p = make_profile();
  // A name that would end the <script> element if the JSON were embedded naively.
  p.samples.push_back(sample({native("evil</script><b>x", "", 0, 0x10)}, 1));
  ASSERT_TRUE(write_flamegraph(p, path).ok());
  std::string html = test::read_text(path);
  EXPECT_EQ(html.find("evil</script>"), std::string::npos);
  EXPECT_EQ(html.find("http://"), std::string::npos);  // self-contained: no network
  EXPECT_EQ(html.find("https://"), std::string::npos);

  std::string dom = chromium_dom(dir, "file://" + path);
  // Elements the script created (the JSON blob holds no data-name attributes).
  EXPECT_EQ(occurrences(dom, "<div class=\"frame "), 13u) << dom.substr(0, 4000);
  for (const char* expect : {
           R"x(data-name="all" data-kind="root")x",
           R"x(data-name="main [root]" data-kind="root")x",
           R"x(data-name="callback (app.lua:30)" data-kind="lua")x",
           R"x(data-name="string.gsub [cfunc]" data-kind="cfunc")x",
           R"x(data-name="crc32 [ffi]" data-kind="ffi")x",
           R"x(data-name="hot_loop (app.lua:40)" data-kind="trace")x",
           R"x(data-name="[unknown: read fault]" data-kind="unknown")x",
           R"x(data-name="libfoo.so+0x500" data-kind="native")x",
           R"x(data-name="evil&lt;/script&gt;&lt;b&gt;x" data-kind="native")x",
       }) {
    EXPECT_NE(dom.find(expect), std::string::npos) << expect;
  }
  EXPECT_NE(dom.find("<div class=\"frame k-lua\""), std::string::npos);
  EXPECT_EQ(dom.find("frame k-lua match"), std::string::npos);

  // The search box, driven through the page's #search= link form, highlights matches.
  std::string searched = chromium_dom(dir, "file://" + path + "#search=handler");
  EXPECT_EQ(occurrences(searched, "frame k-lua match"), 2u);      // handler at lines 12 and 14
  EXPECT_NE(searched.find("matched 75.00%"), std::string::npos);  // 15 of 20 samples
}

TEST(FlameGraph, SvgHasFramesAndTitles) {
  TempDir dir;
  std::string path = dir.file("flame.svg");
  ASSERT_TRUE(write_flamegraph(make_profile(), path).ok());
  std::string svg = test::read_text(path);
  EXPECT_NE(svg.find("<svg"), std::string::npos);
  EXPECT_NE(svg.find("<title>callback (app.lua:30) (7 samples, 36.84%)</title>"),
            std::string::npos);
  EXPECT_NE(svg.find("<title>all (19 samples, 100.00%)</title>"), std::string::npos);
  EXPECT_NE(svg.find("<title>hot_loop (app.lua:40) (2 samples, 10.53%)</title>"),
            std::string::npos);
  EXPECT_EQ(occurrences(svg, "<g class=\"frame\">"), 12u);
  EXPECT_EQ(occurrences(svg, "<g"), occurrences(svg, "</g>"));
  // Chromium parses it as XML: a well-formedness error would replace the SVG with an error
  // page.
  std::string dom = chromium_dom(dir, "file://" + path);
  EXPECT_NE(dom.find("<svg"), std::string::npos);
  EXPECT_EQ(dom.find("error"), std::string::npos) << dom.substr(0, 2000);
}

TEST(Outputs, WritesEveryRequestedOutput) {
  TempDir dir;
  OutputOptions o;
  o.pprof_path = dir.file("p.pb.gz");
  o.folded_path = dir.file("p.folded");
  o.flamegraph_path = dir.file("p.html");
  o.top = 3;
  std::ostringstream top;
  o.top_out = &top;
  Status s = write_outputs(make_profile(), o);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(read_pprof(o.pprof_path).ok());
  EXPECT_EQ(test::read_text(o.folded_path), folded_text(make_profile()));
  EXPECT_NE(test::read_text(o.flamegraph_path).find("<html"), std::string::npos);
  EXPECT_NE(top.str().find("Showing top 3 of"), std::string::npos);

  o.folded_path = dir.file("no/such/dir/p.folded");
  Status bad = write_outputs(make_profile(), o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("no/such/dir/p.folded"), std::string::npos) << bad.message();
}

// ---------------------------------------------------------------------------------------------
// Hostile input: an error naming the file, never a crash or an unbounded allocation.

std::string gzip_bytes(const std::string& raw) {
  uLongf n = compressBound(raw.size()) + 64;
  std::string out(n, '\0');
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(raw.data()));
  z.avail_in = static_cast<uInt>(raw.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(out.size() - z.avail_out);
  deflateEnd(&z);
  return out;
}

// A minimal valid profile.proto, for tests to break one field of.
pp::Profile minimal_proto() {
  pp::Profile p;
  for (const char* s : {"", "samples", "count", "f", "app.lua", "lua:f"}) p.add_string_table(s);
  auto* st = p.add_sample_type();
  st->set_type(1);
  st->set_unit(2);
  auto* fn = p.add_function();
  fn->set_id(1);
  fn->set_name(3);
  fn->set_system_name(5);
  fn->set_filename(4);
  auto* loc = p.add_location();
  loc->set_id(1);
  auto* line = loc->add_line();
  line->set_function_id(1);
  line->set_line(3);
  auto* s = p.add_sample();
  s->add_location_id(1);
  s->add_value(9);
  return p;
}

Result<profile::Profile> read_proto(const TempDir& dir, const pp::Profile& p) {
  std::string path = dir.file("crafted.pb.gz");
  spit(path, gzip_bytes(p.SerializeAsString()));
  return read_pprof(path);
}

TEST(Malformed, MinimalProtoIsAccepted) {
  TempDir dir;
  auto r = read_proto(dir, minimal_proto());
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_EQ(r->samples.size(), 1u);
  EXPECT_EQ(r->samples[0].count, 9);
  EXPECT_EQ(r->samples[0].frames[0].kind, profile::FrameKind::Lua);
  EXPECT_EQ(folded_text(*r), "f (app.lua:3) 9\n");
}

TEST(Pprof, ForeignProfileTolerated) {
  // What another profiler writes: a mangled system_name (no "KIND:"), an inlined call (two
  // Lines in one Location, innermost first), "samples" not the first sample type, a mapping.
  pp::Profile p;
  for (const char* s : {"", "alloc", "bytes", "samples", "count", "inner", "_Z5innerv", "outer",
                        "x.cc", "/usr/bin/app"}) {
    p.add_string_table(s);
  }
  auto add_type = [&](int64_t type, int64_t unit) {
    auto* st = p.add_sample_type();
    st->set_type(type);
    st->set_unit(unit);
  };
  add_type(1, 2);
  add_type(3, 4);
  auto* m = p.add_mapping();
  m->set_id(9);
  m->set_memory_start(0x400000);
  m->set_memory_limit(0x500000);
  m->set_file_offset(0x1000);
  m->set_filename(9);
  auto add_fn = [&](uint64_t id, int64_t name, int64_t system_name) {
    auto* fn = p.add_function();
    fn->set_id(id);
    fn->set_name(name);
    fn->set_system_name(system_name);
    fn->set_filename(8);
  };
  add_fn(3, 5, 6);
  add_fn(4, 7, 7);
  auto* loc = p.add_location();
  loc->set_id(20);
  loc->set_mapping_id(9);
  loc->set_address(0x400123);
  auto* inner = loc->add_line();
  inner->set_function_id(3);
  inner->set_line(5);
  auto* outer = loc->add_line();
  outer->set_function_id(4);
  outer->set_line(50);
  auto* s = p.add_sample();
  s->add_location_id(20);
  s->add_value(4096);
  s->add_value(6);

  TempDir dir;
  std::string path = dir.file("foreign.pb");  // raw profile.proto: pprof accepts it too
  spit(path, p.SerializeAsString());
  auto r = read_pprof(path);
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_EQ(r->samples.size(), 1u);
  const profile::Sample& got = r->samples[0];
  EXPECT_EQ(got.count, 6);
  ASSERT_EQ(got.frames.size(), 2u);
  EXPECT_EQ(got.frames[0].function, "inner");
  EXPECT_EQ(got.frames[0].kind, profile::FrameKind::Native);
  EXPECT_EQ(got.frames[0].line, 5);
  EXPECT_EQ(got.frames[1].function, "outer");
  EXPECT_EQ(got.frames[1].module, "/usr/bin/app");
  EXPECT_EQ(got.frames[1].module_offset, 0x1123u);
  EXPECT_EQ(folded_text(*r), "outer;inner 6\n");
}

TEST(Pprof, NonUtf8NamesStayReadable) {
  // A Lua chunk name in Latin-1: protobuf would refuse the whole file if it were written raw.
  // Each byte that is not UTF-8 is written as \xNN (common/printable.h).
  profile::Profile p;
  profile::Frame f = lua("caf\xe9", 3, 1);
  f.file = "x\xff.lua";
  p.samples.push_back(sample({f}, 2));
  TempDir dir;
  std::string path = dir.file("latin1.pb.gz");
  ASSERT_TRUE(write_pprof(p, path).ok());
  auto r = read_pprof(path);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->samples[0].frames[0].function, "caf\\xe9");
  EXPECT_EQ(r->samples[0].frames[0].kind, profile::FrameKind::Lua);
  EXPECT_EQ(r->samples[0].frames[0].file, "x\\xff.lua");
  auto go = go_pprof(dir, {"-top", "-sample_index=samples", path});
  EXPECT_EQ(go.exit_code, 0) << go.err;
  EXPECT_NE(go.out.find("caf\\xe9"), std::string::npos) << go.out;
}

TEST(FlameGraph, DeepStackIsCutNotFatal) {
  profile::Profile p;
  profile::Sample s;
  for (int i = 0; i < 100'000; ++i) s.frames.push_back(native(fmt::format("f{}", i), "", 0, i));
  p.samples.push_back(s);
  FlameNode root = flame_tree(p);
  size_t depth = 0;
  const FlameNode* n = &root;
  while (!n->children.empty()) {
    n = &n->children[0];
    ++depth;
  }
  EXPECT_EQ(depth, 2049u);
  EXPECT_EQ(n->name, "[97952 deeper frames not shown]");
  TempDir dir;
  EXPECT_TRUE(write_flamegraph(p, dir.file("deep.html")).ok());
  EXPECT_TRUE(write_flamegraph(p, dir.file("deep.svg")).ok());
}

TEST(Malformed, TruncatedGzip) {
  TempDir dir;
  std::string path = dir.file("p.pb.gz");
  ASSERT_TRUE(write_pprof(make_profile(), path).ok());
  std::string bytes = test::read_text(path);
  spit(path, bytes.substr(0, bytes.size() / 2));
  auto r = read_pprof(path);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find(path), std::string::npos) << r.message();
  EXPECT_NE(r.message().find("truncated"), std::string::npos) << r.message();
}

TEST(Malformed, GarbageBytes) {
  TempDir dir;
  std::mt19937 rng(12345);  // fixed seed: the same bytes every run
  std::string garbage(4096, '\0');
  for (char& c : garbage) c = static_cast<char>(rng());
  std::string path = dir.file("garbage.pb.gz");
  spit(path, garbage);
  auto raw = read_pprof(path);
  ASSERT_FALSE(raw.ok());
  EXPECT_NE(raw.message().find(path), std::string::npos) << raw.message();

  spit(path, "\x1f\x8b" + garbage);  // gzip magic, then nonsense
  auto gz = read_pprof(path);
  ASSERT_FALSE(gz.ok());
  EXPECT_NE(gz.message().find("gzip"), std::string::npos) << gz.message();

  spit(path, gzip_bytes(garbage));  // valid gzip of nonsense
  EXPECT_FALSE(read_pprof(path).ok());

  spit(path, "");
  EXPECT_FALSE(read_pprof(path).ok());
  auto missing = read_pprof(dir.file("missing.pb.gz"));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("missing.pb.gz"), std::string::npos);
}

TEST(Malformed, OutOfRangeStringIndexes) {
  TempDir dir;
  {
    pp::Profile p = minimal_proto();
    p.mutable_function(0)->set_name(99);
    auto r = read_proto(dir, p);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.message().find("function.name string index 99 out of range"), std::string::npos)
        << r.message();
  }
  {
    pp::Profile p = minimal_proto();
    p.mutable_sample_type(0)->set_type(-1);
    EXPECT_FALSE(read_proto(dir, p).ok());
  }
  {
    pp::Profile p = minimal_proto();
    p.add_comment(1000);
    EXPECT_FALSE(read_proto(dir, p).ok());
  }
  {
    pp::Profile p = minimal_proto();
    p.mutable_string_table(0)->assign("x");  // pprof requires string_table[0] == ""
    EXPECT_FALSE(read_proto(dir, p).ok());
  }
}

TEST(Malformed, DanglingIdsAndValueCounts) {
  TempDir dir;
  {
    pp::Profile p = minimal_proto();
    p.mutable_sample(0)->add_location_id(77);
    auto r = read_proto(dir, p);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.message().find("unknown location 77"), std::string::npos) << r.message();
  }
  {
    pp::Profile p = minimal_proto();
    p.mutable_location(0)->mutable_line(0)->set_function_id(5);
    EXPECT_FALSE(read_proto(dir, p).ok());
  }
  {
    pp::Profile p = minimal_proto();
    p.mutable_location(0)->set_mapping_id(3);
    EXPECT_FALSE(read_proto(dir, p).ok());
  }
  {
    pp::Profile p = minimal_proto();
    p.mutable_sample(0)->add_value(1);  // two values, one sample type
    EXPECT_FALSE(read_proto(dir, p).ok());
  }
}

TEST(Malformed, CapsBoundAllocation) {
  TempDir dir;
  std::string path = dir.file("p.pb.gz");
  ASSERT_TRUE(write_pprof(make_profile(), path).ok());
  PprofReadLimits tiny;
  tiny.max_decompressed_bytes = 64;
  auto r = read_pprof(path, tiny);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("limit"), std::string::npos) << r.message();

  PprofReadLimits few_frames;
  few_frames.max_total_frames = 10;
  EXPECT_FALSE(read_pprof(path, few_frames).ok());

  // One location of many inlined lines, referenced by many samples: the frame cap stops the
  // expansion before it allocates.
  pp::Profile p = minimal_proto();
  for (int i = 0; i < 1000; ++i) p.mutable_location(0)->add_line()->set_function_id(1);
  for (int i = 0; i < 2000; ++i) {
    auto* s = p.add_sample();
    s->add_location_id(1);
    s->add_value(1);
  }
  std::string big = dir.file("big.pb.gz");
  spit(big, gzip_bytes(p.SerializeAsString()));
  PprofReadLimits limits;
  limits.max_total_frames = 100'000;
  auto capped = read_pprof(big, limits);
  ASSERT_FALSE(capped.ok());
  EXPECT_NE(capped.message().find("frames"), std::string::npos) << capped.message();
}

// ---------------------------------------------------------------------------------------------
// `ljprof report`

TEST(ReportCommand, DefaultTopAndOutputs) {
  TempDir dir;
  std::string path = dir.file("p.pb.gz");
  ASSERT_TRUE(write_pprof(make_profile(), path).ok());

  auto def = run({test::ljprof_bin(), "report", path});
  ASSERT_EQ(def.exit_code, 0) << def.err;
  EXPECT_NE(def.out.find("Showing top 10 of 10 functions, 19 samples total"), std::string::npos)
      << def.out;
  EXPECT_NE(def.out.find("callback (app.lua:28)"), std::string::npos) << def.out;

  auto top = run({test::ljprof_bin(), "report", "--top=2", path});
  ASSERT_EQ(top.exit_code, 0) << top.err;
  EXPECT_NE(top.out.find("Showing top 2 of 10"), std::string::npos) << top.out;

  auto bare_top = run({test::ljprof_bin(), "report", "--top", path});  // FILE is not taken as N
  ASSERT_EQ(bare_top.exit_code, 0) << bare_top.err;

  auto folded = run({test::ljprof_bin(), "report", path, "--folded", "-"});
  ASSERT_EQ(folded.exit_code, 0) << folded.err;
  EXPECT_EQ(folded.out, folded_text(make_profile()));

  std::string html = dir.file("f.html"), svg = dir.file("f.svg");
  auto fg = run({test::ljprof_bin(), "report", path, "--flamegraph", html});
  ASSERT_EQ(fg.exit_code, 0) << fg.err;
  EXPECT_TRUE(fg.out.empty()) << fg.out;  // an output option replaces the default table
  EXPECT_NE(test::read_text(html).find("<script"), std::string::npos);
  ASSERT_EQ(run({test::ljprof_bin(), "report", path, "--flamegraph", svg}).exit_code, 0);
  EXPECT_NE(test::read_text(svg).find("<svg"), std::string::npos);
}

// A profile of two processes: --pid writes the stacks of one, exactly those of a profile of its
// samples alone; a pid with no sample is an error that names the processes there are.
TEST(ReportCommand, PidSelectsOneProcessOfSeveral) {
  TempDir dir;
  profile::Profile one = make_profile(), two = make_profile(), both = make_profile();
  for (profile::Sample& s : one.samples) s.pid = 101;
  for (profile::Sample& s : two.samples) {
    s.pid = 202;
    s.count *= 3;
  }
  two.samples.pop_back();
  both.samples = one.samples;
  both.samples.insert(both.samples.end(), two.samples.begin(), two.samples.end());
  std::string path = dir.file("both.pb.gz");
  ASSERT_TRUE(write_pprof(both, path).ok());
  auto first = run({test::ljprof_bin(), "report", path, "--pid", "101", "--folded", "-"});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_EQ(first.out, folded_text(one));
  auto second = run({test::ljprof_bin(), "report", path, "--pid", "202", "--folded", "-"});
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_EQ(second.out, folded_text(two));
  EXPECT_NE(first.out, second.out);
  auto none = run({test::ljprof_bin(), "report", path, "--pid", "303"});
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find("no sample of process 303"), std::string::npos) << none.err;
  EXPECT_NE(none.err.find("101, 202"), std::string::npos) << none.err;
}

TEST(ReportCommand, HelpAndBadInput) {
  auto help = run({test::ljprof_bin(), "report", "--help"});
  EXPECT_EQ(help.exit_code, 0);
  for (const char* opt : {"--top", "--folded", "--flamegraph", "--pid", "FILE"}) {
    EXPECT_NE(help.out.find(opt), std::string::npos) << opt << "\n" << help.out;
  }
  TempDir dir;
  std::string path = dir.file("bad.pb.gz");
  spit(path, "this is not a profile");
  auto bad = run({test::ljprof_bin(), "report", path});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find(path), std::string::npos) << bad.err;
  EXPECT_EQ(run({test::ljprof_bin(), "report", dir.file("missing.pb.gz")}).exit_code, 2);
  EXPECT_EQ(run({test::ljprof_bin(), "report"}).exit_code, 2);
}

}  // namespace
}  // namespace ljprof::report

namespace ljprof::report {
namespace {

symbolize::Frame lua_walk_frame(uint64_t proto, const char* chunk, int32_t firstline, int32_t line,
                                const char* call_name) {
  symbolize::Frame f;
  f.kind = profile::FrameKind::Lua;
  symbolize::LuaLocation loc;
  loc.proto = proto;
  loc.chunk = chunk;
  loc.short_src = symbolize::short_source(chunk);
  loc.firstline = firstline;
  loc.line = line;
  loc.main_chunk = firstline == 0;
  f.lua = loc;
  if (call_name != nullptr) f.call_name = symbolize::CallSiteName{"local", call_name};
  return f;
}

symbolize::Frame trace_walk_frame(uint32_t traceno, const symbolize::LuaLocation& start) {
  symbolize::Frame f;
  f.kind = profile::FrameKind::Trace;
  symbolize::TraceInfo info;
  info.traceno = traceno;
  info.start = start;
  info.start.line = start.firstline + 1;
  f.trace = info;
  return f;
}

// Profiles name Lua functions by their call site, keep only a file's last path component in
// labels (the whole path in `file`, pprof's Function.filename), and show a trace's machine
// code as the Lua function it runs: folded into the next frame out when the trace starts in
// that function's prototype, else as the trace's start function.
TEST(ProfileFrames, LuaNamesShortLabelsAndTracesAsTheirFunction) {
  const symbolize::Frame alpha = lua_walk_frame(0x1000, "@/srv/app/split.lua", 12, 14, "alpha");
  const symbolize::Frame main = lua_walk_frame(0x2000, "@/srv/app/split.lua", 0, 40, nullptr);
  std::vector<profile::Frame> folded =
      profile::profile_frames({trace_walk_frame(3, *alpha.lua), alpha, main});
  ASSERT_EQ(folded.size(), 2u);
  EXPECT_EQ(folded[0].kind, profile::FrameKind::Trace);
  EXPECT_EQ(folded[0].function, "alpha");
  EXPECT_EQ(folded[0].file, "/srv/app/split.lua");
  EXPECT_EQ(folded[0].line, 13);
  EXPECT_EQ(folded[0].start_line, 12);
  EXPECT_EQ(frame_label(folded[0]), "alpha (split.lua:13)");
  EXPECT_EQ(frame_label(folded[1]), "main chunk (split.lua:40)");

  const symbolize::Frame other = lua_walk_frame(0x3000, "=stdin", 5, 6, nullptr);
  std::vector<profile::Frame> apart =
      profile::profile_frames({trace_walk_frame(4, *other.lua), alpha});
  ASSERT_EQ(apart.size(), 2u);
  EXPECT_EQ(frame_label(apart[0]), "function <stdin:5> (stdin:6)");
  EXPECT_EQ(apart[0].kind, profile::FrameKind::Trace);
  EXPECT_EQ(frame_label(apart[1]), "alpha (split.lua:14)");
}

// A trace resolved through its snapshot: the trace frame itself is not shown, the Lua frames
// it runs (an inlined callee, then the base frame) are, as JIT-compiled frames of that trace.
TEST(ProfileFrames, ResolvedTraceShowsTheLuaFramesItRuns) {
  symbolize::Frame trace =
      trace_walk_frame(7, *lua_walk_frame(0x1000, "@a.lua", 3, 4, nullptr).lua);
  trace.trace->snapshot = 2;
  symbolize::Frame beta = lua_walk_frame(0x4000, "@/srv/app/split.lua", 20, 21, "beta");
  beta.jit_trace = 7;
  symbolize::Frame alpha = lua_walk_frame(0x1000, "@/srv/app/split.lua", 12, 14, "alpha");
  alpha.jit_trace = 7;
  const symbolize::Frame main = lua_walk_frame(0x2000, "@/srv/app/split.lua", 0, 40, nullptr);
  std::vector<profile::Frame> frames = profile::profile_frames({trace, beta, alpha, main});
  ASSERT_EQ(frames.size(), 3u);
  EXPECT_EQ(frames[0].kind, profile::FrameKind::Trace);
  EXPECT_EQ(frames[0].trace, 7u);
  EXPECT_EQ(frame_label(frames[0]), "beta (split.lua:21)");
  EXPECT_EQ(frames[1].kind, profile::FrameKind::Trace);
  EXPECT_EQ(frame_label(frames[1]), "alpha (split.lua:14)");
  EXPECT_EQ(frames[2].kind, profile::FrameKind::Lua);
  EXPECT_EQ(frames[2].trace, 0u);
}

}  // namespace
}  // namespace ljprof::report
