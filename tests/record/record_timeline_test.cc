// `ljprof record --speedscope` and `--firefox` against a real process. Oracles: the workload's
// own CPU clock per phase (tests/record/workloads/phases.lua), speedscope's published schema
// (python3-jsonschema), speedscope itself (its npm release, fetched by scripts/bootstrap) loading
// the file in headless Chromium, and the Firefox Profiler importer's documented parsing rules.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "split_oracle.h"
#include "support/test_support.h"

namespace ljprof {
namespace {

using Json = nlohmann::json;

// Per frame name: how long it was open in `profile`'s events (ns), and its first open and last
// close.
struct OpenTime {
  int64_t total = 0;
  int64_t first_open = INT64_MAX;
  int64_t last_close = 0;
};
std::map<std::string, OpenTime> open_times(const Json& frames, const Json& profile) {
  std::map<std::string, OpenTime> out;
  std::map<std::string, int64_t> opened;
  for (const Json& e : profile["events"]) {
    const std::string name = frames.at(e["frame"].get<size_t>())["name"];
    const int64_t at = e["at"];
    OpenTime& t = out[name];
    if (e["type"] == "O") {
      opened[name] = at;
      t.first_open = std::min(t.first_open, at);
    } else {
      t.total += at - opened[name];
      t.last_close = std::max(t.last_close, at);
    }
  }
  return out;
}

// The frame whose name starts with `function` ("phase_a (phases.lua:13)").
const OpenTime* frame_starting(const std::map<std::string, OpenTime>& times,
                               const std::string& function) {
  for (const auto& [name, t] : times) {
    if (name.rfind(function + " ", 0) == 0) return &t;
  }
  return nullptr;
}

// Speedscope's own page, served over HTTP with `file` beside it, in headless Chromium: the DOM
// once it has loaded the file.
std::string speedscope_dom(const test::TempDir& dir, const std::string& file) {
  const std::string site = dir.file("site");
  std::filesystem::create_directories(site);
  std::filesystem::create_directory_symlink(test::fixture("speedscope/dist/release"),
                                            site + "/app");
  std::filesystem::copy_file(file, site + "/profile.json");
  test::Background server({"/usr/bin/python3", "-u", "-m", "http.server", "0", "--bind",
                           "127.0.0.1", "--directory", site},
                          dir.file("server.log"));
  if (!test::wait_for_text(dir.file("server.log"), "port ", 30)) return "";
  std::smatch m;
  const std::string log = test::read_text(dir.file("server.log"));
  if (!std::regex_search(log, m, std::regex(R"(port (\d+))"))) return "";
  const std::string base = "http://127.0.0.1:" + m[1].str();
  test::CommandResult r =
      test::run({"/usr/bin/timeout", "100", "/usr/bin/chromium", "--headless", "--no-sandbox",
                 "--disable-gpu", "--no-first-run", "--user-data-dir=" + dir.file("chromium"),
                 "--virtual-time-budget=10000", "--dump-dom",
                 base + "/app/index.html#profileURL=" + base + "/profile.json"});
  EXPECT_EQ(r.exit_code, 0) << r.err.substr(0, 2000);
  return r.out;
}

// Per sample of `perf script` text, parsed with the Firefox Profiler importer's own rules
// (src/profile-logic/import/linux-perf.ts: a header "NAME [PID/]TID [..] SECONDS:", frame lines
// "PC FUNCTION (MODULE)" leaf first, an empty line after each sample): its tid, its time in
// seconds and its functions. A line that fits neither rule fails the test.
struct PerfSample {
  uint32_t tid = 0;
  double seconds = 0;
  std::vector<std::string> functions;
};
std::vector<PerfSample> parse_perf_script(const std::string& text) {
  static const std::regex kHeader(R"(^(.*)\s+([\d.]+):)"), kThread(R"(^(.*)\s+(?:(\d+)/)?(\d+)\b)"),
      kFrame(R"(^\s*(\w+)\s*(.+) \(([^)]*)\))");
  std::vector<PerfSample> out;
  std::istringstream in(text);
  std::string line;
  bool in_sample = false;
  while (std::getline(in, line)) {
    std::smatch m;
    if (line.empty()) {
      in_sample = false;
    } else if (in_sample) {
      EXPECT_TRUE(std::regex_search(line, m, kFrame)) << line;
      out.back().functions.push_back(m[2]);
    } else {
      EXPECT_TRUE(std::regex_search(line, m, kHeader)) << line;
      const std::string before = m[1], seconds = m[2];
      std::smatch t;
      EXPECT_TRUE(std::regex_search(before, t, kThread)) << line;
      out.push_back({static_cast<uint32_t>(std::stoul(t[3])), std::stod(seconds), {}});
      in_sample = true;
    }
  }
  return out;
}

// The samples of `perf` that have a function starting with `function`: how many, the first and
// the last time.
struct PerfSpan {
  int count = 0;
  double first = 1e18, last = 0;
};
PerfSpan span_of(const std::vector<PerfSample>& perf, const std::string& function) {
  PerfSpan span;
  for (const PerfSample& s : perf) {
    for (const std::string& f : s.functions) {
      if (f.rfind(function + " ", 0) != 0) continue;
      ++span.count;
      span.first = std::min(span.first, s.seconds);
      span.last = std::max(span.last, s.seconds);
      break;
    }
  }
  return span;
}

// Phase a's share of both phases (percent) and their sum, as measured and as sampled: the share
// within 10 points, the sum within 30%, each widened by the share of the CPU time the recorder
// counted as unsampled (`what` holds its summary): on a loaded host the kernel was seen to deliver
// no sample for ~100 ms of a running thread's CPU time (812 samples in most runs, 712 in one of
// eight), which a timeline shows as it is.
void expect_phases(double a, double b, double a_s, double b_s, const std::string& what) {
  const double unsampled = record_oracle::unsampled_share(what);
  EXPECT_NEAR(100 * a / (a + b), 100 * a_s / (a_s + b_s), 10 + unsampled) << what;
  EXPECT_NEAR(a + b, a_s + b_s, (0.3 + unsampled / 100) * (a_s + b_s)) << what;
}

// A luajit burns its CPU clock in phase_a, then in phase_b. The speedscope timeline has one
// track, its thread, where each phase is open for its share of the time the workload measured,
// and phase_a closes before phase_b opens; speedscope opens the file. The Firefox Profiler's
// input (perf script text) of the same recording says the same: one thread, times increasing,
// each phase's samples worth its share, phase_a's all before phase_b's.
TEST(RecordTimeline, SpeedscopeAndFirefoxShowEachPhaseWhenItRanForItsOwnTime) {
  ASSERT_EQ(geteuid(), 0u) << "ljprof record needs root";
  test::TempDir dir;
  const std::string timeline = dir.file("timeline.json"), firefox = dir.file("firefox.txt");
  const test::CommandResult rec = test::run(
      {test::ljprof_bin(), "record", "-F", "999", "-q", "--speedscope", timeline, "--firefox",
       firefox, "--", "/usr/bin/luajit", test::record_workloads_dir() + "/phases.lua", "0.4"});
  ASSERT_EQ(rec.exit_code, 0) << rec.out << rec.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(rec.out, m, std::regex(R"(phases a=([0-9.]+) b=([0-9.]+))")))
      << rec.out;
  const double a_s = std::stod(m[1]), b_s = std::stod(m[2]);
  const Json doc = Json::parse(test::read_text(timeline));
  ASSERT_EQ(doc["profiles"].size(), 1u) << "one thread";
  const Json& track = doc["profiles"][0];
  EXPECT_EQ(track["type"], "evented");
  EXPECT_EQ(track["unit"], "nanoseconds");
  EXPECT_TRUE(std::regex_match(track["name"].get<std::string>(), std::regex(R"(pid (\d+) tid \1)")))
      << track["name"];
  const auto times = open_times(doc["shared"]["frames"], track);
  const OpenTime* a = frame_starting(times, "phase_a");
  const OpenTime* b = frame_starting(times, "phase_b");
  ASSERT_NE(a, nullptr) << track.dump().substr(0, 2000);
  ASSERT_NE(b, nullptr) << track.dump().substr(0, 2000);
  std::cout << "timeline: phase_a " << a->total / 1e9 << " s, phase_b " << b->total / 1e9
            << " s; the workload measured " << a_s << " s and " << b_s << " s\n";
  // About 400 samples a phase at 999 Hz.
  expect_phases(a->total / 1e9, b->total / 1e9, a_s, b_s, "speedscope\n" + rec.err);
  // In time order: a period or two of slack where the last samples of phase_a move later.
  EXPECT_LE(a->last_close, b->first_open + 2'002'002) << "phase_a ends before phase_b starts";

  const std::vector<PerfSample> perf = parse_perf_script(test::read_text(firefox));
  ASSERT_FALSE(perf.empty());
  for (size_t i = 1; i < perf.size(); ++i) {
    EXPECT_EQ(perf[i].tid, perf[0].tid) << "one thread";
    EXPECT_GE(perf[i].seconds, perf[i - 1].seconds) << "sample " << i;
  }
  const PerfSpan pa = span_of(perf, "phase_a"), pb = span_of(perf, "phase_b");
  expect_phases(pa.count / 999.0, pb.count / 999.0, a_s, b_s, "firefox\n" + rec.err);
  EXPECT_LE(pa.last, pb.first) << "phase_a's samples before phase_b's";

  // The file is what speedscope's published schema describes.
  const test::CommandResult schema =
      test::run({"/usr/bin/python3", "-c",
                 "import json, sys, jsonschema\n"
                 "jsonschema.validate(json.load(open(sys.argv[1])), json.load(open(sys.argv[2])))",
                 timeline, test::fixture("speedscope/dist/release/file-format-schema.json")});
  EXPECT_EQ(schema.exit_code, 0) << schema.err.substr(0, 2000);

  const std::string dom = speedscope_dom(dir, timeline);
  EXPECT_NE(dom.find("<title>timeline.json - speedscope</title>"), std::string::npos)
      << dom.substr(0, 3000);
  EXPECT_NE(dom.find(track["name"].get<std::string>()), std::string::npos) << dom.substr(0, 3000);
}

}  // namespace
}  // namespace ljprof
