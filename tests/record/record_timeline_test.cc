// `ljprof record --speedscope` against a real process. Oracles: the workload's own CPU clock per
// phase (tests/record/workloads/phases.lua), speedscope's published schema (python3-jsonschema),
// and speedscope itself (its npm release, fetched by scripts/bootstrap) loading the file in
// headless Chromium.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>

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

// A luajit burns its CPU clock in phase_a, then in phase_b: the speedscope timeline has one
// track, its thread, where phase_a is open about as long as the workload measured, and closes
// before phase_b opens; speedscope opens the file.
TEST(RecordTimeline, SpeedscopeShowsEachPhaseWhenItRanForItsOwnTime) {
  ASSERT_EQ(geteuid(), 0u) << "ljprof record needs root";
  test::TempDir dir;
  const std::string timeline = dir.file("timeline.json");
  const test::CommandResult rec =
      test::run({test::ljprof_bin(), "record", "-F", "999", "-q", "--speedscope", timeline, "--",
                 "/usr/bin/luajit", test::record_workloads_dir() + "/phases.lua", "0.4"});
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
  // About 400 samples a phase at 999 Hz: the sampled time is its CPU time within 15%.
  EXPECT_NEAR(a->total / 1e9, a_s, 0.15 * a_s) << rec.err;
  EXPECT_NEAR(b->total / 1e9, b_s, 0.15 * b_s) << rec.err;
  // In time order: a period or two of slack where the last samples of phase_a move later.
  EXPECT_LE(a->last_close, b->first_open + 2'002'002) << "phase_a ends before phase_b starts";

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
