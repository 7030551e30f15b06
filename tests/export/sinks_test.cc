// export/: the Pyroscope sink, the output-directory sink and the upload queue, against a real
// HTTP server on 127.0.0.1 (support/pyroscope_receiver.h), which also checks every request
// against the ingest contract. Backoffs and timeouts are short so each test takes well under a
// few seconds; waits poll for the awaited state instead of sleeping a fixed time.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "export/interval_profile.h"
#include "export/out_dir.h"
#include "export/pyroscope.h"
#include "export/upload_queue.h"
#include "profile/profile.h"
#include "report/pprof.h"
#include "support/pyroscope_receiver.h"
#include "support/test_support.h"

namespace ljprof::exporter {
namespace {

using test::PyroscopeReceiver;
using test::TempDir;
using Clock = std::chrono::steady_clock;

constexpr int64_t kFrom = 1700000000;  // 2023-11-14T22:13:20Z

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Polls `done` every 2 ms until it holds or `timeout_s` passes.
bool eventually(const std::function<bool()>& done, double timeout_s = 5) {
  Clock::time_point start = Clock::now();
  while (!done()) {
    if (seconds_since(start) > timeout_s) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

profile::Profile small_profile() {
  profile::Profile p;
  p.period_ns = 10'000'000;
  p.start_time_ns = kFrom * 1'000'000'000;
  p.duration_ns = 10'000'000'000;
  profile::Frame lua;
  lua.kind = profile::FrameKind::Lua;
  lua.function = "handle_request";
  lua.file = "app.lua";
  lua.line = 12;
  lua.start_line = 10;
  profile::Frame native;
  native.kind = profile::FrameKind::Native;
  native.function = "lj_vm_call";
  native.module = "/usr/bin/luajit";
  native.address = 0x401000;
  native.module_offset = 0x1000;
  auto sample = [](std::vector<profile::Frame> frames, int64_t count, uint32_t tid) {
    profile::Sample s;
    s.frames = std::move(frames);
    s.count = count;
    s.pid = 4242;
    s.tid = tid;
    return s;
  };
  p.samples.push_back(sample({lua, native}, 7, 4242));
  p.samples.push_back(sample({native}, 3, 4243));
  return p;
}

const std::string& small_pprof() {
  static const std::string bytes = [] {
    Result<std::string> gz = report::pprof_gzip_bytes(small_profile());
    return gz.ok() ? *gz : std::string();
  }();
  return bytes;
}

IntervalProfile interval(int64_t from, uint32_t pid = 4242, const std::string& app = "tarantool") {
  IntervalProfile p;
  p.app_name = app;
  p.labels = {{"service_name", app},
              {"host_name", "db-1"},
              {"pid", std::to_string(pid)},
              {"runtime", "tarantool"}};
  p.pid = pid;
  p.from_unix_s = from;
  p.until_unix_s = from + 10;
  p.sample_rate_hz = 99;
  p.pprof_gz = small_pprof();
  return p;
}

std::unique_ptr<Sink> pyroscope_sink(const PyroscopeReceiver& receiver, double timeout_s = 2) {
  PyroscopeOptions o;
  o.url = receiver.url();
  o.timeout_s = timeout_s;
  o.connect_timeout_s = timeout_s;
  auto sink = make_pyroscope_sink(o);
  EXPECT_TRUE(sink.ok()) << sink.message();
  return sink.ok() ? std::move(*sink) : nullptr;
}

QueueOptions fast_queue(size_t capacity = 64) {
  QueueOptions o;
  o.capacity = capacity;
  o.initial_backoff_s = 0.05;
  o.max_backoff_s = 0.2;
  return o;
}

// The `from` of every request the receiver answered 200, in arrival order.
std::vector<int64_t> delivered_froms(const PyroscopeReceiver& receiver) {
  std::vector<int64_t> out;
  for (const auto& r : receiver.requests()) {
    if (r.status == 200) out.push_back(std::stoll(r.param("from")));
  }
  return out;
}

void expect_no_violations(const PyroscopeReceiver& receiver) {
  for (const std::string& v : receiver.violations()) ADD_FAILURE() << v;
}

// ---------------------------------------------------------------------------------------------
// pyroscope_name

TEST(PyroscopeName, SortsKeysAndSanitizes) {
  IntervalProfile p;
  p.app_name = "my app{prod}";
  p.labels = {{"service_name", "svc"},
              {"host name", "h 1"},
              {"9key", "v=1,2"},
              {"pid", "42"},
              {"__name__", "x"},
              {"empty", ""},
              {"zone", "M\xc3\xbcnchen\t"},
              {"path", "{a}/b"}};
  std::string name = pyroscope_name(p);
  EXPECT_EQ(name,
            "my_app_prod_.cpu{_9key=v_1_2,host_name=h_1,path=_a_/b,pid=42,service_name=svc,"
            "zone=M__nchen_}");
  std::string why;
  EXPECT_TRUE(PyroscopeReceiver::parse_name(name, &why)) << why;
}

TEST(PyroscopeName, EdgeCases) {
  IntervalProfile p;
  p.app_name = "tarantool";
  EXPECT_EQ(pyroscope_name(p), "tarantool.cpu{}");
  // Keys that sanitize alike: the first in sorted order wins.
  p.labels = {{"a b", "1"}, {"a_b", "2"}, {".x", "3"}, {"k", "a\nb"}};
  EXPECT_EQ(pyroscope_name(p), "tarantool.cpu{_.x=3,a_b=1,k=a_b}");
  p.app_name = "app.with-dots_1";
  p.labels = {{"env", "prod"}};
  EXPECT_EQ(pyroscope_name(p), "app.with-dots_1.cpu{env=prod}");
  EXPECT_EQ(PyroscopeReceiver::name_labels(pyroscope_name(p)),
            (std::map<std::string, std::string>{{"env", "prod"}}));
}

TEST(PyroscopeReceiverSyntax, RejectsMalformedNames) {
  for (const char* bad :
       {"app{}", "app.cpu", "app.cpu{a=1,a=2}", "app.cpu{b=1,a=2}", "app.cpu{a=}", "app.cpu{1a=b}",
        "app.cpu{a=b c}", "ap p.cpu{}", "app.cpu{a=b=c}", "app.cpu{a=1,}", ".cpu{}"}) {
    EXPECT_FALSE(PyroscopeReceiver::parse_name(bad)) << bad;
  }
  EXPECT_TRUE(PyroscopeReceiver::parse_name("a.cpu{a=1,b.c=x/y:z}"));
}

// ---------------------------------------------------------------------------------------------
// The Pyroscope sink

TEST(PyroscopeSink, SendsTheIngestRequest) {
  ASSERT_FALSE(small_pprof().empty());
  PyroscopeReceiver receiver;
  PyroscopeOptions o;
  o.url = receiver.url() + "/";  // a trailing slash is not doubled
  o.bearer_token = "secret-token";
  o.tenant_id = "team-a";
  auto sink = make_pyroscope_sink(o);
  ASSERT_TRUE(sink.ok()) << sink.message();
  EXPECT_EQ((*sink)->name(), "pyroscope " + receiver.url());

  IntervalProfile p = interval(kFrom);
  p.labels["user label"] = "x y";
  Delivery d = (*sink)->deliver(p);
  ASSERT_TRUE(d.ok) << d.error;

  auto requests = receiver.requests();
  ASSERT_EQ(requests.size(), 1u);
  const auto& r = requests[0];
  expect_no_violations(receiver);
  EXPECT_EQ(r.param("from"), std::to_string(kFrom));
  EXPECT_EQ(r.param("until"), std::to_string(kFrom + 10));
  EXPECT_EQ(r.param("sampleRate"), "99");
  EXPECT_EQ(r.param("format"), "pprof");
  EXPECT_EQ(r.param("spyName"), "ljprof");
  auto name = PyroscopeReceiver::parse_name(r.param("name"));
  ASSERT_TRUE(name) << r.param("name");
  EXPECT_EQ(name->app, "tarantool");
  EXPECT_EQ(name->labels, (std::map<std::string, std::string>{{"host_name", "db-1"},
                                                              {"pid", "4242"},
                                                              {"runtime", "tarantool"},
                                                              {"service_name", "tarantool"},
                                                              {"user_label", "x_y"}}));
  // Braces and commas are percent-encoded in the query as sent.
  EXPECT_NE(r.target.find("name=tarantool.cpu%7Bhost_name%3Ddb-1%2C"), std::string::npos)
      << r.target;
  EXPECT_EQ(r.header("Authorization"), "Bearer secret-token");
  EXPECT_EQ(r.header("X-Scope-OrgID"), "team-a");
  EXPECT_EQ(r.header("Content-Type"), "application/octet-stream");
  EXPECT_EQ(r.header("User-Agent").rfind("ljprof/", 0), 0u) << r.header("User-Agent");
  EXPECT_EQ(r.header("Content-Encoding"), "");
  EXPECT_EQ(r.body, small_pprof());

  // What arrived is a profile pprof's own reader parses, Lua frames included.
  TempDir dir;
  std::string file = dir.file("received.pb.gz");
  std::ofstream(file, std::ios::binary) << r.body;
  test::CommandResult raw = test::go_tool_pprof(dir.path(), {"-raw", file});
  ASSERT_EQ(raw.exit_code, 0) << raw.err;
  EXPECT_NE(raw.out.find("handle_request"), std::string::npos) << raw.out;
  Result<profile::Profile> back = report::read_pprof(file);
  ASSERT_TRUE(back.ok()) << back.message();
  EXPECT_EQ(back->samples.size(), 2u);
}

TEST(PyroscopeSink, BasicAuth) {
  PyroscopeReceiver receiver;
  PyroscopeOptions o;
  o.url = receiver.url();
  o.basic_user = "user";
  o.basic_password = "pa:ss";
  auto sink = make_pyroscope_sink(o);
  ASSERT_TRUE(sink.ok()) << sink.message();
  Delivery d = (*sink)->deliver(interval(kFrom));
  ASSERT_TRUE(d.ok) << d.error;
  ASSERT_EQ(receiver.request_count(), 1u);
  EXPECT_EQ(receiver.requests()[0].header("Authorization"), "Basic dXNlcjpwYTpzcw==");
  EXPECT_EQ(receiver.requests()[0].header("X-Scope-OrgID"), "");
  expect_no_violations(receiver);
}

TEST(PyroscopeSink, RejectsBadOptions) {
  auto error_of = [](PyroscopeOptions o) {
    auto sink = make_pyroscope_sink(std::move(o));
    return sink.ok() ? std::string("(accepted)") : sink.message();
  };
  auto with_url = [](std::string url) {
    PyroscopeOptions o;
    o.url = std::move(url);
    return o;
  };
  EXPECT_NE(error_of(with_url("ftp://host/")).find("http or https"), std::string::npos);
  EXPECT_NE(error_of(with_url("host:4040")).find("host:4040"), std::string::npos);
  EXPECT_NE(error_of(with_url("")).find("pyroscope URL"), std::string::npos);
  EXPECT_NE(error_of(with_url("http://h:4040/?x=1")).find("query"), std::string::npos);
  EXPECT_NE(error_of(with_url("http://h:4040/#f")).find("fragment"), std::string::npos);
  PyroscopeOptions both = with_url("http://h:4040");
  both.bearer_token = "t";
  both.basic_user = "u";
  EXPECT_NE(error_of(both).find("mutually exclusive"), std::string::npos);
  PyroscopeOptions header_injection = with_url("http://h:4040");
  header_injection.tenant_id = "a\r\nX-Evil: 1";
  EXPECT_NE(error_of(header_injection).find("control characters"), std::string::npos);
  PyroscopeOptions zero = with_url("http://h:4040");
  zero.timeout_s = 0;
  EXPECT_NE(error_of(zero).find("timeouts"), std::string::npos);
  EXPECT_EQ(error_of(with_url("https://user:pw@h:4040/prefix")), "(accepted)");
  auto sink = make_pyroscope_sink(with_url("https://user:pw@h:4040/prefix"));
  ASSERT_TRUE(sink.ok());
  EXPECT_EQ((*sink)->name(), "pyroscope https://h:4040/prefix");  // no password in messages
}

TEST(PyroscopeSink, ClassifiesFailures) {
  PyroscopeReceiver receiver;
  auto sink = pyroscope_sink(receiver);
  ASSERT_TRUE(sink);
  const std::string where = "POST " + receiver.url() + "/ingest";

  receiver.set_mode(PyroscopeReceiver::Mode::Refuse5xx);
  Delivery d = sink->deliver(interval(kFrom));
  EXPECT_FALSE(d.ok);
  EXPECT_TRUE(d.retryable);
  EXPECT_EQ(d.error, where + ": HTTP 503: receiver: unavailable (test mode)");

  receiver.set_mode(PyroscopeReceiver::Mode::Reject4xx);
  d = sink->deliver(interval(kFrom));
  EXPECT_FALSE(d.ok);
  EXPECT_FALSE(d.retryable);
  EXPECT_EQ(d.error, where + ": HTTP 400: receiver: bad profile (test mode)");

  receiver.stop();
  d = sink->deliver(interval(kFrom));
  EXPECT_FALSE(d.ok);
  EXPECT_TRUE(d.retryable);
  EXPECT_EQ(d.error.rfind(where + ": Couldn't connect to server (curl error 7", 0), 0u) << d.error;

  // A profile the server could never accept is refused before any request.
  IntervalProfile no_rate = interval(kFrom);
  no_rate.sample_rate_hz = 0;
  d = sink->deliver(no_rate);
  EXPECT_FALSE(d.retryable);
  EXPECT_NE(d.error.find("no sample rate"), std::string::npos) << d.error;
  EXPECT_EQ(receiver.request_count(), 2u);
  expect_no_violations(receiver);
}

// ---------------------------------------------------------------------------------------------
// The upload queue

TEST(UploadQueue, RetriesAfter5xxInOrder) {
  PyroscopeReceiver receiver;
  receiver.set_mode(PyroscopeReceiver::Mode::Refuse5xx);
  UploadQueue queue(pyroscope_sink(receiver), fast_queue());
  for (int i = 0; i < 3; ++i) queue.push(interval(kFrom + 10 * i));
  ASSERT_TRUE(eventually([&] { return queue.counts().failed_attempts >= 2; }));
  EXPECT_EQ(queue.counts().depth, 3u);
  EXPECT_NE(queue.counts().last_error.find("HTTP 503"), std::string::npos);
  receiver.set_mode(PyroscopeReceiver::Mode::Up);
  ASSERT_TRUE(eventually([&] { return queue.counts().delivered == 3; }));
  QueueCounts c = queue.counts();
  EXPECT_EQ(c.depth, 0u);
  EXPECT_EQ(c.dropped_full + c.dropped_rejected + c.dropped_stopped, 0u);
  EXPECT_EQ(c.failed_attempts, receiver.request_count() - 3);
  EXPECT_EQ(c.last_error, "");
  EXPECT_EQ(delivered_froms(receiver), (std::vector<int64_t>{kFrom, kFrom + 10, kFrom + 20}));
  // Only the head was ever retried: every 503 was for the first profile.
  for (const auto& r : receiver.requests()) {
    if (r.status == 503) {
      EXPECT_EQ(r.param("from"), std::to_string(kFrom));
    }
  }
  expect_no_violations(receiver);
}

TEST(UploadQueue, BacksOffExponentially) {
  PyroscopeReceiver receiver;
  receiver.set_mode(PyroscopeReceiver::Mode::Refuse5xx);
  QueueOptions o = fast_queue();
  o.initial_backoff_s = 0.04;
  o.max_backoff_s = 0.16;
  UploadQueue queue(pyroscope_sink(receiver), o);
  queue.push(interval(kFrom));
  ASSERT_TRUE(receiver.wait_for_requests(5, 5));
  queue.stop(0);
  auto r = receiver.requests();
  std::vector<double> gaps;
  for (size_t i = 1; i < 5; ++i)
    gaps.push_back(std::chrono::duration<double>(r[i].arrived - r[i - 1].arrived).count());
  // 0.04, 0.08, 0.16, 0.16 (capped); scheduling only ever adds.
  const double expected[] = {0.04, 0.08, 0.16, 0.16};
  for (size_t i = 0; i < gaps.size(); ++i) {
    EXPECT_GE(gaps[i], expected[i] * 0.95) << i;
    EXPECT_LT(gaps[i], expected[i] + 0.1) << i;
  }
}

TEST(UploadQueue, DeliversAfterTheServerComesBack) {
  PyroscopeReceiver receiver;
  receiver.stop();
  UploadQueue queue(pyroscope_sink(receiver), fast_queue());
  for (int i = 0; i < 3; ++i) queue.push(interval(kFrom + 10 * i));
  ASSERT_TRUE(eventually([&] { return queue.counts().failed_attempts >= 2; }));
  EXPECT_NE(queue.counts().last_error.find("Couldn't connect"), std::string::npos);
  ASSERT_TRUE(receiver.start());
  ASSERT_TRUE(eventually([&] { return queue.counts().delivered == 3; }));
  EXPECT_EQ(delivered_froms(receiver), (std::vector<int64_t>{kFrom, kFrom + 10, kFrom + 20}));
  EXPECT_EQ(receiver.request_count(), 3u);
  QueueCounts c = queue.counts();
  EXPECT_EQ(c.depth, 0u);
  EXPECT_EQ(c.dropped_full + c.dropped_rejected, 0u);
  expect_no_violations(receiver);
}

TEST(UploadQueue, FullQueueDropsTheOldest) {
  PyroscopeReceiver receiver;
  receiver.stop();
  UploadQueue queue(pyroscope_sink(receiver), fast_queue(3));
  for (int i = 0; i < 5; ++i) queue.push(interval(kFrom + 10 * i));
  // The first profile may be in flight while the others arrive; it is dropped when its attempt
  // fails and the queue is full.
  ASSERT_TRUE(eventually([&] { return queue.counts().dropped_full == 2; }));
  ASSERT_TRUE(receiver.start());
  ASSERT_TRUE(eventually([&] { return queue.counts().delivered == 3; }));
  EXPECT_EQ(delivered_froms(receiver), (std::vector<int64_t>{kFrom + 20, kFrom + 30, kFrom + 40}));
  QueueCounts c = queue.counts();
  EXPECT_EQ(c.dropped_full, 2u);
  EXPECT_EQ(c.depth, 0u);
  expect_no_violations(receiver);
}

TEST(UploadQueue, HangingServerNeverBlocks) {
  PyroscopeReceiver receiver;
  receiver.set_mode(PyroscopeReceiver::Mode::Hang);
  UploadQueue queue(pyroscope_sink(receiver, 0.3), fast_queue(4));
  Clock::time_point start = Clock::now();
  for (int i = 0; i < 100; ++i) queue.push(interval(kFrom + 10 * i));
  EXPECT_LT(seconds_since(start), 0.1);
  ASSERT_TRUE(eventually([&] { return queue.counts().failed_attempts >= 2; }));
  QueueCounts c = queue.counts();
  // Memory stays bounded: at most `capacity` waiting plus the one being sent.
  EXPECT_LE(c.depth, 5u);
  EXPECT_EQ(c.dropped_full + c.depth, 100u);
  EXPECT_NE(c.last_error.find("Timeout was reached (curl error 28"), std::string::npos)
      << c.last_error;

  start = Clock::now();
  queue.stop(0.5);
  double stop_s = seconds_since(start);
  EXPECT_GE(stop_s, 0.45);  // it did try to drain until the deadline
  EXPECT_LT(stop_s, 1.0);
  EXPECT_EQ(queue.counts().delivered, 0u);
  EXPECT_GT(queue.counts().depth, 0u);  // still queued, reported
  queue.push(interval(kFrom));
  EXPECT_EQ(queue.counts().dropped_stopped, 1u);
  expect_no_violations(receiver);
}

TEST(UploadQueue, StopCancelsAnAttemptInFlight) {
  PyroscopeReceiver receiver;
  receiver.set_mode(PyroscopeReceiver::Mode::Hang);
  // The request timeout is far beyond the drain deadline: stop() must not wait for it.
  UploadQueue queue(pyroscope_sink(receiver, 30), fast_queue());
  queue.push(interval(kFrom));
  ASSERT_TRUE(receiver.wait_for_requests(1, 5));
  Clock::time_point start = Clock::now();
  queue.stop(0.2);
  EXPECT_LT(seconds_since(start), 0.6);
  QueueCounts c = queue.counts();
  EXPECT_EQ(c.depth, 1u);
  EXPECT_NE(c.last_error.find("cancelled"), std::string::npos) << c.last_error;
}

TEST(UploadQueue, RejectedProfileIsDroppedWithoutRetry) {
  PyroscopeReceiver receiver;
  receiver.set_mode(PyroscopeReceiver::Mode::Reject4xx);
  std::vector<std::string> errors;
  std::mutex errors_mutex;
  QueueOptions o = fast_queue();
  o.on_attempt = [&](const IntervalProfile&, const Delivery& d) {
    std::lock_guard lock(errors_mutex);
    if (!d.ok) errors.push_back(d.error);
  };
  UploadQueue queue(pyroscope_sink(receiver), o);
  queue.push(interval(kFrom));
  ASSERT_TRUE(eventually([&] { return queue.counts().dropped_rejected == 1; }));
  EXPECT_EQ(queue.counts().depth, 0u);
  EXPECT_EQ(queue.counts().failed_attempts, 0u);
  EXPECT_NE(queue.counts().last_error.find(receiver.url() + "/ingest: HTTP 400"),
            std::string::npos);
  // The next profile goes at once (no backoff after an answer) and succeeds.
  receiver.set_mode(PyroscopeReceiver::Mode::Up);
  Clock::time_point start = Clock::now();
  queue.push(interval(kFrom + 10));
  ASSERT_TRUE(eventually([&] { return queue.counts().delivered == 1; }));
  EXPECT_LT(seconds_since(start), 0.5);
  EXPECT_EQ(receiver.request_count(), 2u);  // the rejected one was never sent again
  std::lock_guard lock(errors_mutex);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("HTTP 400"), std::string::npos);
  expect_no_violations(receiver);
}

TEST(UploadQueue, StopDrainsWhatIsQueued) {
  PyroscopeReceiver receiver;
  UploadQueue queue(pyroscope_sink(receiver), fast_queue());
  for (int i = 0; i < 10; ++i) queue.push(interval(kFrom + 10 * i));
  queue.stop(5);
  EXPECT_EQ(queue.counts().delivered, 10u);
  EXPECT_EQ(queue.counts().depth, 0u);
  EXPECT_EQ(receiver.request_count(), 10u);
  queue.stop(0);  // idempotent
  expect_no_violations(receiver);
}

TEST(UploadQueue, StopZeroAbandonsTheQueueAtOnce) {
  PyroscopeReceiver receiver;
  receiver.stop();
  QueueOptions o = fast_queue();
  o.initial_backoff_s = 10;  // the worker sleeps in backoff: stop() must wake it
  o.max_backoff_s = 10;
  UploadQueue queue(pyroscope_sink(receiver), o);
  queue.push(interval(kFrom));
  ASSERT_TRUE(eventually([&] { return queue.counts().failed_attempts == 1; }));
  Clock::time_point start = Clock::now();
  queue.stop(0);
  EXPECT_LT(seconds_since(start), 0.2);
  EXPECT_EQ(queue.counts().depth, 1u);
}

// ---------------------------------------------------------------------------------------------
// The output directory

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (!d) return names;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

std::unique_ptr<Sink> out_dir_sink(const std::string& dir, size_t keep_files = 1000,
                                   uint64_t keep_bytes = 1ull << 30) {
  auto sink = make_out_dir_sink({dir, keep_files, keep_bytes});
  EXPECT_TRUE(sink.ok()) << sink.message();
  return sink.ok() ? std::move(*sink) : nullptr;
}

TEST(OutDir, NamesSortByTimeAndFilesAreProfiles) {
  TempDir tmp;
  std::string dir = tmp.file("a/b");  // parents are created
  auto sink = out_dir_sink(dir);
  ASSERT_TRUE(sink);
  EXPECT_EQ(sink->name(), "out-dir " + dir);
  for (int64_t offset : {100, 0, 10}) {
    Delivery d = sink->deliver(interval(kFrom + offset, 7, "open resty/1"));
    ASSERT_TRUE(d.ok) << d.error;
    EXPECT_EQ(d.warning, "");
  }
  EXPECT_EQ(list_dir(dir), (std::vector<std::string>{
                               "20231114T221320Z-open_resty_1-7.pb.gz",
                               "20231114T221330Z-open_resty_1-7.pb.gz",
                               "20231114T221500Z-open_resty_1-7.pb.gz",
                           }));
  Result<profile::Profile> back =
      report::read_pprof(dir + "/20231114T221330Z-open_resty_1-7.pb.gz");
  ASSERT_TRUE(back.ok()) << back.message();
  ASSERT_EQ(back->samples.size(), 2u);
  EXPECT_EQ(back->samples[0].frames[0].function, "handle_request");
  EXPECT_EQ(back->period_ns, 10'000'000);
  // Profiles name other users' processes: not world-readable (with any umask, at most this).
  struct stat st {};
  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777 & ~0750, 0u) << std::oct << (st.st_mode & 07777);
  ASSERT_EQ(::stat((dir + "/20231114T221330Z-open_resty_1-7.pb.gz").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777 & ~0640, 0u) << std::oct << (st.st_mode & 07777);
}

TEST(OutDir, SameNameGetsASuffix) {
  TempDir tmp;
  auto sink = out_dir_sink(tmp.path());
  ASSERT_TRUE(sink);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(sink->deliver(interval(kFrom)).ok);
  EXPECT_EQ(list_dir(tmp.path()), (std::vector<std::string>{
                                      "20231114T221320Z-tarantool-4242.1.pb.gz",
                                      "20231114T221320Z-tarantool-4242.2.pb.gz",
                                      "20231114T221320Z-tarantool-4242.pb.gz",
                                  }));
  for (const std::string& n : list_dir(tmp.path())) EXPECT_TRUE(is_out_dir_file_name(n)) << n;
}

TEST(OutDir, RetentionByCountDeletesTheOldest) {
  TempDir tmp;
  // Not ours: retention never touches it.
  std::ofstream(tmp.file("notes.txt")) << "keep me";
  auto sink = out_dir_sink(tmp.path(), 3);
  ASSERT_TRUE(sink);
  for (int64_t offset : {0, 10, 20, 30, 40})
    ASSERT_TRUE(sink->deliver(interval(kFrom + offset)).ok);
  EXPECT_EQ(list_dir(tmp.path()), (std::vector<std::string>{
                                      "20231114T221340Z-tarantool-4242.pb.gz",
                                      "20231114T221350Z-tarantool-4242.pb.gz",
                                      "20231114T221400Z-tarantool-4242.pb.gz",
                                      "notes.txt",
                                  }));
  // A late file older than all others: the file just written is kept, the oldest other goes.
  ASSERT_TRUE(sink->deliver(interval(kFrom + 5)).ok);
  EXPECT_EQ(list_dir(tmp.path()), (std::vector<std::string>{
                                      "20231114T221325Z-tarantool-4242.pb.gz",
                                      "20231114T221350Z-tarantool-4242.pb.gz",
                                      "20231114T221400Z-tarantool-4242.pb.gz",
                                      "notes.txt",
                                  }));
  ASSERT_TRUE(sink->deliver(interval(kFrom + 50)).ok);
  EXPECT_EQ(list_dir(tmp.path()), (std::vector<std::string>{
                                      "20231114T221350Z-tarantool-4242.pb.gz",
                                      "20231114T221400Z-tarantool-4242.pb.gz",
                                      "20231114T221410Z-tarantool-4242.pb.gz",
                                      "notes.txt",
                                  }));
}

TEST(OutDir, RetentionByBytesDeletesTheOldest) {
  TempDir tmp;
  const uint64_t size = small_pprof().size();
  auto sink = out_dir_sink(tmp.path(), 0, 2 * size + size / 2);
  ASSERT_TRUE(sink);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(sink->deliver(interval(kFrom + 10 * i)).ok);
  EXPECT_EQ(list_dir(tmp.path()), (std::vector<std::string>{
                                      "20231114T221350Z-tarantool-4242.pb.gz",
                                      "20231114T221400Z-tarantool-4242.pb.gz",
                                  }));
  // A single file over the limit is still written and kept.
  auto tiny = out_dir_sink(tmp.path(), 0, 1);
  ASSERT_TRUE(tiny);
  ASSERT_TRUE(tiny->deliver(interval(kFrom + 100)).ok);
  EXPECT_EQ(list_dir(tmp.path()),
            (std::vector<std::string>{"20231114T221500Z-tarantool-4242.pb.gz"}));
}

TEST(OutDir, NoTemporaryFilesStay) {
  TempDir tmp;
  // A temporary file of a writer that is gone (no such pid) is removed when a sink starts; one
  // of a running writer (this process) is left alone.
  std::ofstream(tmp.file(".ljprof-tmp-999999999-0-x.pb.gz")) << "partial";
  std::string live = ".ljprof-tmp-" + std::to_string(getpid()) + "-0-y.pb.gz";
  std::ofstream(tmp.file(live)) << "partial";
  auto sink = out_dir_sink(tmp.path(), 2);
  ASSERT_TRUE(sink);
  EXPECT_EQ(list_dir(tmp.path()), (std::vector<std::string>{live}));
  unlink(tmp.file(live).c_str());
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(sink->deliver(interval(kFrom + i)).ok);
  for (const std::string& n : list_dir(tmp.path())) EXPECT_NE(n[0], '.') << n;
  EXPECT_EQ(list_dir(tmp.path()).size(), 2u);
}

TEST(OutDir, WriteFailures) {
  TempDir tmp;
  std::string dir = tmp.file("out");
  auto sink = out_dir_sink(dir);
  ASSERT_TRUE(sink);
  // The directory removed under the sink is made again.
  ASSERT_EQ(rmdir(dir.c_str()), 0);
  Delivery d = sink->deliver(interval(kFrom));
  EXPECT_TRUE(d.ok) << d.error;
  EXPECT_EQ(list_dir(dir).size(), 1u);
  // Replaced by a file: refused, not retried, and the message names the path.
  for (const std::string& n : list_dir(dir)) unlink((dir + "/" + n).c_str());
  ASSERT_EQ(rmdir(dir.c_str()), 0);
  std::ofstream(dir) << "not a directory";
  d = sink->deliver(interval(kFrom));
  EXPECT_FALSE(d.ok);
  EXPECT_FALSE(d.retryable);
  EXPECT_NE(d.error.find(dir + "/"), std::string::npos) << d.error;
  EXPECT_NE(d.error.find("Not a directory"), std::string::npos) << d.error;

  auto bad = make_out_dir_sink({dir + "/sub", 10, 10});
  EXPECT_FALSE(bad.ok());
  EXPECT_FALSE(make_out_dir_sink({"", 10, 10}).ok());
}

TEST(OutDir, FileNames) {
  IntervalProfile p = interval(0, 1, "");
  EXPECT_EQ(out_dir_file_name(p), "19700101T000000Z-unknown-1.pb.gz");
  p.app_name = std::string(100, 'a');
  EXPECT_EQ(out_dir_file_name(p), "19700101T000000Z-" + std::string(64, 'a') + "-1.pb.gz");
  EXPECT_TRUE(is_out_dir_file_name("20231114T221320Z-x-1.pb.gz"));
  EXPECT_FALSE(is_out_dir_file_name("20231114T221320Z-.pb.gz"));
  EXPECT_FALSE(is_out_dir_file_name("2023111XT221320Z-x-1.pb.gz"));
  EXPECT_FALSE(is_out_dir_file_name("20231114T221320Z-x-1.pb"));
  EXPECT_FALSE(is_out_dir_file_name(".ljprof-tmp-1-0-20231114T221320Z-x-1.pb.gz"));
}

// The queue in front of the directory: the same retry/drop machinery for any sink.
TEST(OutDir, BehindAQueue) {
  TempDir tmp;
  UploadQueue queue(out_dir_sink(tmp.path()), fast_queue());
  for (int i = 0; i < 5; ++i) queue.push(interval(kFrom + 10 * i));
  queue.stop(5);
  EXPECT_EQ(queue.counts().delivered, 5u);
  EXPECT_EQ(list_dir(tmp.path()).size(), 5u);
}

}  // namespace
}  // namespace ljprof::exporter
