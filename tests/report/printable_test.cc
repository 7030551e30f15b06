// The one rule for target strings (common/printable.h) and every writer fed hostile names:
// invalid UTF-8, terminal escape sequences, NUL, overlong encodings, UTF-8-encoded surrogates,
// C1 and bidirectional controls. Expected texts are derived from the rule by hand; whether an
// output is clean is judged by an oracle of this file that does not use the rule (raw bytes,
// and nlohmann's strict UTF-8 check), and whether it parses by the reader of its format
// (nlohmann for JSON, read_pprof for pprof, Python's expat for SVG).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "common/printable.h"
#include "profile/profile_frames.h"
#include "report/backtrace.h"
#include "report/flamegraph.h"
#include "report/folded.h"
#include "report/frames.h"
#include "report/json_text.h"
#include "report/pprof.h"
#include "report/top.h"
#include "support/test_support.h"
#include "symbolize/walk_frames.h"

#include "proto/profile.pb.h"

extern "C" {
#include "abi/walk_types.h"
}

namespace ljprof::report {
namespace {

using namespace std::string_literals;
using test::TempDir;

// One of each kind of byte the rule escapes, between letters it keeps: a stray 0xff, an ESC
// sequence that clears the screen and one that sets the window title (ended by BEL), CR, LF, DEL,
// an overlong '/', a UTF-8-encoded surrogate U+D800, the C1 control CSI U+009B, RIGHT-TO-LEFT
// OVERRIDE U+202E, the noncharacter U+FFFF and a NUL.
const std::string kHostile =
    "A\xff"
    "B\x1b[2J\x1b]0;t\x07"
    "C\r\nD\x7f"
    "E\xc0\xaf"
    "F\xed\xa0\x80"
    "G\xc2\x9b"
    "H\xe2\x80\xae"
    "I\xef\xbf\xbf"
    "J\0K"s;
// The same by the rule: every escaped byte as \xNN, the letters and the printable ASCII kept.
const std::string kShown =
    R"(A\xffB\x1b[2J\x1b]0;t\x07C\x0d\x0aD\x7fE\xc0\xafF\xed\xa0\x80G\xc2\x9bH\xe2\x80\xaeI\xef\xbf\xbfJ\x00K)";

// What the oracle rejects, independently of printable.h: C0 bytes (but '\n' when `lines`, the
// writer's own line breaks), DEL, the UTF-8 encodings of the C1 controls, of U+061C, U+200E,
// U+200F, U+2028-U+202E, U+2066-U+2069, U+FFFE and U+FFFF; and anything nlohmann's strict
// serializer refuses as not UTF-8. Returns "" when `text` is clean, else what was found.
std::string unclean(const std::string& text, bool lines) {
  for (size_t i = 0; i < text.size(); ++i) {
    const auto b = static_cast<unsigned char>(text[i]);
    if ((b < 0x20 && !(lines && b == '\n')) || b == 0x7f) {
      return fmt::format("control byte {:#04x} at {}", b, i);
    }
    const auto next = i + 1 < text.size() ? static_cast<unsigned char>(text[i + 1]) : 0;
    if (b == 0xc2 && next >= 0x80 && next <= 0x9f) return fmt::format("C1 control at {}", i);
  }
  for (const char* seq :
       {"\xd8\x9c", "\xe2\x80\x8e", "\xe2\x80\x8f", "\xe2\x80\xa8", "\xe2\x80\xa9", "\xe2\x80\xaa",
        "\xe2\x80\xab", "\xe2\x80\xac", "\xe2\x80\xad", "\xe2\x80\xae", "\xe2\x81\xa6",
        "\xe2\x81\xa7", "\xe2\x81\xa8", "\xe2\x81\xa9", "\xef\xbf\xbe", "\xef\xbf\xbf"}) {
    if (text.find(seq) != std::string::npos) return "format control or noncharacter";
  }
  try {
    (void)nlohmann::json(text).dump();
  } catch (const nlohmann::json::exception& e) {
    return e.what();
  }
  return "";
}

// ---------------------------------------------------------------------------------------------
// The rule

TEST(PrintableText, KeepsPrintableUtf8) {
  const std::vector<std::string> kept = {
      "plain ascii ~!@#$%^&*()_+{}|:\"<>?`-=[]\\;',./",
      "caf\xc3\xa9 \xf0\x9f\x94\xa5",
      "\xc2\xa0 (U+00A0, the first character after the C1 controls)",
      "\xed\x9f\xbf \xee\x80\x80 (U+D7FF and U+E000, either side of the surrogates)",
      "\xef\xbf\xbd (U+FFFD) \xf4\x8f\xbf\xbf (U+10FFFF)",
      "\xe2\x80\xa7 \xe2\x80\xaf \xe2\x81\xa5 (U+2027, U+202F, U+2065: next to the controls)",
      R"(a\x1b stays: the rule does not escape backslashes)",
  };
  for (const std::string& s : kept) {
    EXPECT_EQ(printable_text(s), s);
    EXPECT_TRUE(is_printable_text(s)) << s;
  }
}

TEST(PrintableText, EscapesControlCharacters) {
  EXPECT_EQ(printable_text("\x1b[31mred\x1b[0m"), R"(\x1b[31mred\x1b[0m)");  // ESC
  EXPECT_EQ(printable_text("a\0b"s), R"(a\x00b)");                           // NUL
  EXPECT_EQ(printable_text("\r\n\t\x07\x08"), R"(\x0d\x0a\x09\x07\x08)");    // CR LF TAB BEL BS
  EXPECT_EQ(printable_text("\x1f \x7f"), R"(\x1f \x7f)");                    // US, DEL
  EXPECT_EQ(printable_text("\xc2\x80\xc2\x85\xc2\x9b\xc2\x9f"),              // C1: PAD NEL CSI APC
            R"(\xc2\x80\xc2\x85\xc2\x9b\xc2\x9f)");
  EXPECT_EQ(printable_text("x\xe2\x80\xaey"), R"(x\xe2\x80\xaey)");  // RLO U+202E
  EXPECT_EQ(printable_text("\xe2\x81\xa6\xe2\x81\xa9"), R"(\xe2\x81\xa6\xe2\x81\xa9)");  // LRI PDI
  EXPECT_EQ(printable_text("\xd8\x9c\xe2\x80\x8e\xe2\x80\x8f"),  // ALM LRM RLM
            R"(\xd8\x9c\xe2\x80\x8e\xe2\x80\x8f)");
  EXPECT_EQ(printable_text("\xe2\x80\xa8\xe2\x80\xa9"), R"(\xe2\x80\xa8\xe2\x80\xa9)");  // LS PS
  EXPECT_EQ(printable_text("\xef\xbf\xbe\xef\xbf\xbf"), R"(\xef\xbf\xbe\xef\xbf\xbf)");  // U+FFFE/F
}

TEST(PrintableText, EscapesMalformedUtf8ByteByByte) {
  EXPECT_EQ(printable_text("caf\xe9"), R"(caf\xe9)");  // Latin-1
  EXPECT_EQ(printable_text("a\xc0\xaf"
                           "b"),
            R"(a\xc0\xafb)");                                            // overlong '/'
  EXPECT_EQ(printable_text("\xc0\x80"), R"(\xc0\x80)");                  // overlong NUL
  EXPECT_EQ(printable_text("\xe0\x80\xaf"), R"(\xe0\x80\xaf)");          // overlong, 3 bytes
  EXPECT_EQ(printable_text("\xf0\x80\x80\xaf"), R"(\xf0\x80\x80\xaf)");  // overlong, 4 bytes
  EXPECT_EQ(printable_text("\xed\xa0\x80"), R"(\xed\xa0\x80)");          // lone surrogate U+D800
  EXPECT_EQ(printable_text("\xed\xbf\xbf"), R"(\xed\xbf\xbf)");          // lone surrogate U+DFFF
  EXPECT_EQ(printable_text("\xed\xa0\xbd\xed\xb2\xa9"),                  // CESU-8 pair for U+1F4A9
            R"(\xed\xa0\xbd\xed\xb2\xa9)");
  EXPECT_EQ(printable_text("\xf4\x90\x80\x80"), R"(\xf4\x90\x80\x80)");          // > U+10FFFF
  EXPECT_EQ(printable_text("\xf8\x88\x80\x80\x80"), R"(\xf8\x88\x80\x80\x80)");  // 5-byte form
  EXPECT_EQ(printable_text("x\xe2\x82"), R"(x\xe2\x82)");  // cut short at the end
  EXPECT_EQ(printable_text("\x80\xbf"), R"(\x80\xbf)");    // stray continuations
  // Resynchronized at the next byte: the character after a bad byte is kept.
  EXPECT_EQ(printable_text("\xe2\x82"
                           "caf\xc3\xa9"),
            R"(\xe2\x82caf)"
            "\xc3\xa9");
  EXPECT_EQ(printable_text("\xc3\xc3\xa9"), R"(\xc3)"
                                            "\xc3\xa9");
}

// Every string of up to two bytes, every three-byte one with a three-byte lead, and random
// longer ones: the result is clean by the oracle, passes the rule unchanged (idempotent) and
// is_printable_text() agrees with printable_text().
TEST(PrintableText, EveryOutputIsCleanAndStable) {
  std::vector<std::string> inputs;
  for (int a = 0; a < 256; ++a) {
    inputs.push_back(std::string(1, static_cast<char>(a)));
    for (int b = 0; b < 256; ++b) inputs.push_back({static_cast<char>(a), static_cast<char>(b)});
  }
  for (int a = 0xe0; a <= 0xef; ++a) {
    for (int b = 0x80; b <= 0xbf; ++b) {
      for (int c = 0; c < 256; c += 5) {
        inputs.push_back({static_cast<char>(a), static_cast<char>(b), static_cast<char>(c)});
      }
    }
  }
  std::mt19937_64 rng(20261205);
  for (int i = 0; i < 20000; ++i) {
    std::string s(rng() % 12, '\0');
    for (char& c : s) c = static_cast<char>(rng());
    inputs.push_back(s);
  }
  for (const std::string& in : inputs) {
    const std::string out = printable_text(in);
    ASSERT_EQ(unclean(out, false), "") << "input " << nlohmann::json(out).dump();
    ASSERT_EQ(printable_text(out), out);
    ASSERT_EQ(is_printable_text(in), out == in) << nlohmann::json(out).dump();
    std::string in_place = in;
    make_printable(in_place);
    ASSERT_EQ(in_place, out);
  }
}

// ---------------------------------------------------------------------------------------------
// The frame model: a walk whose every name comes from the target is hostile

constexpr uint64_t kUnreadableFunction = 0x6000;

// A target whose module path, build-id, ELF symbol, DWARF file, Lua chunk, call-site name, JIT
// trace chunk and error messages all hold kHostile.
class HostileSource final : public symbolize::FrameSource {
 public:
  void symbolize_native(symbolize::Frame& f, bool) override {
    f.module = "/lib/" + kHostile + ".so";
    f.build_id = kHostile;
    f.module_offset = f.pc - 0x1000;
    f.symbol = "sym" + kHostile;
    f.symbol_offset = 4;
    f.source = symbolize::SourceLine{"src/" + kHostile + ".c", 7};
  }
  bool in_ffi_call_trampoline(const symbolize::Frame&) override { return false; }
  Result<symbolize::LuaLocation> lua_location(size_t, const symbolize::WalkedFrame& f) override {
    if (f.pc == kUnreadableFunction) return make_error("prototype unreadable: {}", kHostile);
    return location(f.pc + 0x10, "@" + kHostile + ".lua");
  }
  Result<std::optional<symbolize::CallSiteName>> call_site_name(
      size_t, const symbolize::WalkedFrame&) override {
    return std::optional<symbolize::CallSiteName>(
        symbolize::CallSiteName{"global", "fn" + kHostile});
  }
  Result<symbolize::TraceInfo> trace_info(size_t, const symbolize::WalkedFrame&) override {
    symbolize::TraceInfo t;
    t.traceno = 9;
    t.start = location(0x9990, "=" + kHostile);
    return t;
  }
  Result<symbolize::JitLuaFrames> jit_frames(size_t, const symbolize::Frame&, uint64_t,
                                             const symbolize::Frame&) override {
    return make_error("no snapshot: {}", kHostile);
  }
  std::string no_luajit_reason() const override { return "no LuaJIT in " + kHostile; }

 private:
  static symbolize::LuaLocation location(uint64_t proto, const std::string& chunk) {
    symbolize::LuaLocation l;
    l.proto = proto;
    l.chunk = chunk;
    l.short_src = chunk.substr(1);
    l.firstline = 3;
    l.line = 5;
    return l;
  }
};

// Leaf first: native, a C function named by its Lua caller, that Lua caller, a JIT trace whose
// snapshot cannot be read over its base Lua frame (named by the next), a Lua frame whose
// prototype is unreadable, a root; the walk ends for want of a LuaJIT layout.
std::vector<symbolize::Frame> hostile_walk() {
  const std::vector<symbolize::WalkedFrame> walk = {
      {LJ_FRAME_NATIVE, 0x1010, 0, 0},   {LJ_FRAME_CFUNC, 0x2000, 0x1020, 0},
      {LJ_FRAME_LUA, 0x3000, 0x3100, 0}, {LJ_FRAME_TRACE, 0x4000, 0x4100, 0},
      {LJ_FRAME_LUA, 0x5000, 0, 0},      {LJ_FRAME_LUA, kUnreadableFunction, 0x6100, 0},
      {LJ_FRAME_ROOT, 0x1030, 0, 0},
  };
  HostileSource source;
  return symbolize::frames_of_walk(walk, {LJ_END_NO_LUAJIT, 0x7000}, source);
}

// Every string a writer can read from the model, with where it is.
std::vector<std::pair<std::string, std::string>> model_strings(const symbolize::Frame& f) {
  std::vector<std::pair<std::string, std::string>> out = {
      {"module", f.module}, {"build_id", f.build_id},     {"symbol", f.symbol},
      {"reason", f.reason}, {"name_error", f.name_error},
  };
  if (f.source) out.emplace_back("source", f.source->file);
  if (f.lua) {
    out.emplace_back("chunk", f.lua->chunk);
    out.emplace_back("short_src", f.lua->short_src);
  }
  if (f.call_name) out.emplace_back("call name", f.call_name->name);
  if (f.trace) {
    out.emplace_back("trace chunk", f.trace->start.chunk);
    out.emplace_back("snapshot_error", f.trace->snapshot_error);
  }
  return out;
}

TEST(HostileNames, EnterTheFrameModelAsPrintableText) {
  const std::vector<symbolize::Frame> frames = hostile_walk();
  ASSERT_EQ(frames.size(), 8u);  // the seven walked and the end of the walk
  for (size_t i = 0; i < frames.size(); ++i) {
    for (const auto& [what, s] : model_strings(frames[i])) {
      EXPECT_EQ(unclean(s, false), "") << "frame " << i << " " << what;
    }
  }
  EXPECT_EQ(frames[0].module, "/lib/" + kShown + ".so");
  EXPECT_EQ(frames[0].build_id, kShown);
  EXPECT_EQ(frames[0].symbol, "sym" + kShown);
  EXPECT_EQ(frames[0].source->file, "src/" + kShown + ".c");
  ASSERT_TRUE(frames[1].call_name);
  EXPECT_EQ(frames[1].call_name->name, "fn" + kShown);
  ASSERT_TRUE(frames[2].lua);
  EXPECT_EQ(frames[2].lua->chunk, "@" + kShown + ".lua");
  EXPECT_EQ(frames[2].lua->short_src, kShown + ".lua");
  ASSERT_TRUE(frames[3].trace);
  EXPECT_EQ(frames[3].trace->start.chunk, "=" + kShown);
  EXPECT_EQ(frames[3].trace->snapshot_error, "no snapshot: " + kShown);
  EXPECT_EQ(frames[5].reason, "prototype unreadable: " + kShown);
  EXPECT_EQ(frames[7].reason.substr(frames[7].reason.find(": no LuaJIT in ")),
            ": no LuaJIT in " + kShown);
}

TEST(HostileNames, BacktraceTextAndJson) {
  for (const symbolize::Frame& f : hostile_walk()) {
    const std::string text = backtrace_frame_text(f);
    EXPECT_EQ(unclean(text, false), "") << text;
    const nlohmann::ordered_json j = backtrace_frame_json(f);
    std::string strict;
    EXPECT_NO_THROW(strict = j.dump(2)) << text;  // nlohmann's default: throw on bad UTF-8
    EXPECT_EQ(json_text(j), strict);
    const auto parsed = nlohmann::json::parse(strict);
    if (f.kind == profile::FrameKind::Native) {
      EXPECT_EQ(parsed["symbol"], "sym" + kShown);
      EXPECT_EQ(parsed["module"], "/lib/" + kShown + ".so");
      EXPECT_EQ(parsed["file"], "src/" + kShown + ".c");
      EXPECT_NE(text.find("sym" + kShown + "+0x4"), std::string::npos) << text;
    }
    if (f.kind == profile::FrameKind::Lua && f.lua) {
      EXPECT_EQ(parsed["chunk"], "@" + kShown + ".lua");
    }
  }
}

profile::Profile profile_of(std::vector<profile::Frame> frames) {
  profile::Profile p;
  p.period_ns = 1'000'000;
  profile::Sample s;
  s.frames = std::move(frames);
  s.count = 3;
  s.pid = 11;
  s.tid = 12;
  p.samples.push_back(std::move(s));
  return p;
}

// The folded, top, flame graph (HTML and SVG) and pprof writers on `p`: every output clean,
// each parsed by its format's reader; returns the profile read back from the pprof file.
profile::Profile expect_every_writer_clean(const profile::Profile& p) {
  const std::string folded = folded_text(p);
  EXPECT_EQ(unclean(folded, true), "") << folded;
  EXPECT_EQ(std::count(folded.begin(), folded.end(), '\n'), 1) << folded;  // one stack, one line
  EXPECT_TRUE(folded.ends_with(" 3\n")) << folded;

  std::ostringstream top_out;
  write_top(p, top_out, 100);
  const std::string top = top_out.str();
  EXPECT_EQ(unclean(top, true), "") << top;
  const size_t rows = top_rows(p).size();
  EXPECT_EQ(std::count(top.begin(), top.end(), '\n'), 2 + static_cast<long>(rows));  // + header

  const std::string html = flamegraph_html(p);
  EXPECT_EQ(unclean(html, true), "");
  const std::string open = "<script type=\"application/json\" id=\"fg-data\">";
  const size_t from = html.find(open) + open.size();
  nlohmann::json data;
  EXPECT_NO_THROW(
      data = nlohmann::json::parse(html.substr(from, html.find("</script>", from) - from)));
  EXPECT_EQ(data["tree"][2], 3) << "the root's total";

  TempDir dir;
  const std::string svg_path = dir.file("flame.svg");
  EXPECT_TRUE(write_flamegraph(p, svg_path).ok());
  EXPECT_EQ(unclean(test::read_text(svg_path), true), "");
  const test::CommandResult xml =
      test::run({"python3", "-c", "import sys, xml.dom.minidom; xml.dom.minidom.parse(sys.argv[1])",
                 svg_path});
  EXPECT_EQ(xml.exit_code, 0) << xml.err;

  const std::string pb = dir.file("p.pb.gz");
  const Status written = write_pprof(p, pb);
  EXPECT_TRUE(written.ok()) << written.message();
  auto back = read_pprof(pb);
  EXPECT_TRUE(back.ok()) << back.message();
  return back.ok() ? *back : profile::Profile{};
}

TEST(HostileNames, FromTheWalkThroughEveryProfileWriter) {
  const profile::Profile p = profile_of(profile::profile_frames(hostile_walk()));
  const profile::Profile back = expect_every_writer_clean(p);
  // Printable text is written unchanged, so the profile round-trips exactly.
  ASSERT_EQ(back.samples.size(), 1u);
  EXPECT_EQ(back.samples[0].frames, p.samples[0].frames);
  EXPECT_EQ(folded_text(back), folded_text(p));
  // The folded format's own escape on top: its frame separator ';' becomes ':'.
  std::string folded_shown = "sym" + kShown;
  std::replace(folded_shown.begin(), folded_shown.end(), ';', ':');
  EXPECT_NE(folded_text(p).find(folded_shown), std::string::npos) << folded_text(p);
}

// A Profile assembled elsewhere (a test, a future producer) with raw bytes in every field: the
// writers' labels and pprof's string table apply the same rule.
TEST(HostileNames, ProfileBuiltElsewhereStillWritesClean) {
  std::vector<profile::Frame> frames;
  for (profile::FrameKind kind :
       {profile::FrameKind::Native, profile::FrameKind::Lua, profile::FrameKind::CFunc,
        profile::FrameKind::Trace, profile::FrameKind::Unknown, profile::FrameKind::Root}) {
    profile::Frame f;
    f.kind = kind;
    f.function = kHostile;
    f.file = "/srv/" + kHostile;
    f.module = "/lib/" + kHostile;
    f.build_id = kHostile;
    f.line = 4;
    f.address = 0x1000 + frames.size();
    frames.push_back(f);
  }
  profile::Frame bare;  // no symbol: shown by module
  bare.module = kHostile;
  bare.address = 0x2000;
  frames.push_back(bare);
  const profile::Profile p = profile_of(frames);
  EXPECT_EQ(frame_label(frames[1]), kShown + " (" + kShown + ":4)");
  EXPECT_EQ(frame_label(bare), kShown + "+0x0");
  const profile::Profile back = expect_every_writer_clean(p);
  ASSERT_EQ(back.samples.size(), 1u);
  ASSERT_EQ(back.samples[0].frames.size(), frames.size());
  EXPECT_EQ(back.samples[0].frames[1].function, kShown);
  EXPECT_EQ(back.samples[0].frames[1].file, "/srv/" + kShown);
  EXPECT_EQ(back.samples[0].frames[0].module, "/lib/" + kShown);
}

// A fiber name is the target's bytes too (fiber.name()): every writer, grouped by fiber or not,
// stays clean, and the pprof label comes back as printable text.
TEST(HostileNames, FiberNameThroughEveryWriter) {
  profile::Frame root;
  root.kind = profile::FrameKind::Root;
  root.function = "main";
  root.address = 0x1000;
  profile::Profile p = profile_of({root});
  p.samples[0].fiber = {77, kHostile, ""};
  const profile::Profile back = expect_every_writer_clean(p);
  ASSERT_EQ(back.samples.size(), 1u);
  EXPECT_EQ(back.samples[0].fiber, (profile::SampleFiber{77, kShown, ""}));

  std::string shown = "fiber:" + kShown;
  EXPECT_EQ(fiber_group_label(p.samples[0]), shown);
  std::replace(shown.begin(), shown.end(), ';', ':');  // the folded format's own escape
  const std::string folded = folded_text(p, GroupBy::Fiber);
  EXPECT_EQ(unclean(folded, true), "") << folded;
  EXPECT_EQ(folded, shown + ";main [root] 3\n");

  const std::string html = flamegraph_html(p, GroupBy::Fiber);
  EXPECT_EQ(unclean(html, true), "");
  const std::string open = "<script type=\"application/json\" id=\"fg-data\">";
  const size_t from = html.find(open) + open.size();
  nlohmann::json data;
  ASSERT_NO_THROW(
      data = nlohmann::json::parse(html.substr(from, html.find("</script>", from) - from)));
  EXPECT_EQ(data["tree"][3][0][0], "fiber:" + kShown);  // the first child of "all"
  const std::string svg = flamegraph_svg(p, GroupBy::Fiber);
  EXPECT_EQ(unclean(svg, true), "");
  TempDir dir;
  const std::string svg_path = dir.file("fiber.svg");
  ASSERT_TRUE(write_flamegraph(p, svg_path, GroupBy::Fiber).ok());
  const test::CommandResult xml =
      test::run({"python3", "-c", "import sys, xml.dom.minidom; xml.dom.minidom.parse(sys.argv[1])",
                 svg_path});
  EXPECT_EQ(xml.exit_code, 0) << xml.err;

  // A profile read back (`ljprof report`) through the same writers.
  EXPECT_EQ(folded_text(back, GroupBy::Fiber), folded);
  std::ostringstream top;
  write_top(back, top, 10);
  EXPECT_EQ(unclean(top.str(), true), "") << top.str();
}

// Another program's profile: protobuf has checked its strings are UTF-8, not that they are
// printable; they enter the report model through the rule.
TEST(HostileNames, PprofFromAnotherProgramIsReadAsPrintableText) {
  namespace pp = perftools::profiles;
  pp::Profile in;
  for (const std::string& s : {""s, "samples"s, "count"s, "\x1b]0;pwned\x07\xc2\x9b"s,
                               "src\r\n.lua"s, "lua:\x1b]0;pwned\x07\xc2\x9b"s}) {
    in.add_string_table(s);
  }
  auto* st = in.add_sample_type();
  st->set_type(1);
  st->set_unit(2);
  auto* fn = in.add_function();
  fn->set_id(1);
  fn->set_name(3);
  fn->set_filename(4);
  fn->set_system_name(5);
  auto* loc = in.add_location();
  loc->set_id(1);
  auto* line = loc->add_line();
  line->set_function_id(1);
  line->set_line(2);
  auto* s = in.add_sample();
  s->add_location_id(1);
  s->add_value(5);
  TempDir dir;
  const std::string path = dir.file("foreign.pb");
  {
    std::ofstream out(path, std::ios::binary);
    out << in.SerializeAsString();
  }
  auto r = read_pprof(path);
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_EQ(r->samples.size(), 1u);
  const profile::Frame& f = r->samples[0].frames[0];
  EXPECT_EQ(f.kind, profile::FrameKind::Lua);  // "lua:NAME" still matches NAME, both escaped alike
  EXPECT_EQ(f.function, R"(\x1b]0;pwned\x07\xc2\x9b)");
  EXPECT_EQ(f.file, R"(src\x0d\x0a.lua)");
  // (The folded format's ';' -> ':' on top.)
  EXPECT_EQ(folded_text(*r), R"(\x1b]0:pwned\x07\xc2\x9b (src\x0d\x0a.lua:2) 5)"
                             "\n");
}

// ---------------------------------------------------------------------------------------------
// JSON documents

TEST(JsonText, EveryStringAndKeyIsPrintable) {
  nlohmann::ordered_json doc;
  doc["path"] = kHostile;
  doc["files"] = nlohmann::ordered_json::array({kHostile, "ok", 5, nullptr});
  doc["nested"]["deeper"] = {{"why", "bad \xff byte"}};
  doc[kHostile] = true;  // a key from the target
  doc["z"] = "last";
  EXPECT_THROW((void)doc.dump(), nlohmann::json::type_error);  // what `core --json` hit

  const std::string text = json_text(doc, 2);
  EXPECT_EQ(unclean(text, true), "") << text;
  const auto parsed = nlohmann::ordered_json::parse(text);
  EXPECT_EQ(parsed["path"], kShown);
  EXPECT_EQ(parsed["files"], nlohmann::ordered_json::array({kShown, "ok", 5, nullptr}));
  EXPECT_EQ(parsed["nested"]["deeper"]["why"], R"(bad \xff byte)");
  EXPECT_EQ(parsed[kShown], true);
  // Rebuilding an object for its keys keeps their order.
  std::vector<std::string> keys;
  for (const auto& [key, value] : parsed.items()) keys.push_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{"path", "files", "nested", kShown, "z"}));

  nlohmann::ordered_json in_place = doc;
  make_json_printable(in_place);
  EXPECT_EQ(in_place, parsed);
  EXPECT_EQ(json_text(parsed, 2), text);  // printable documents pass unchanged
}

}  // namespace
}  // namespace ljprof::report
