// The agent's metrics page: the exposition text against Prometheus' own parser and linter
// (`promtool check metrics`, extracted by scripts/bootstrap) and against text derived by hand
// from the format's specification; the HTTP server with a real client over 127.0.0.1.
#include "export/metrics.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <thread>

#include "support/test_support.h"

namespace ljprof::exporter {
namespace {

using Point = MetricFamily::Point;

constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";

// `promtool check metrics` reads the page on stdin; exit 0 with no output means it parsed and
// passed every lint rule (3: lint problems, 1: parse error).
test::CommandResult promtool_check(const std::string& page) {
  test::TempDir dir;
  std::string file = dir.file("metrics.txt");
  std::ofstream(file, std::ios::binary) << page;
  std::string promtool = test::fixture("prometheus/usr/bin/promtool");
  return test::run({"/bin/sh", "-c", "'" + promtool + "' check metrics < '" + file + "'"});
}

// The value as the page prints it (one unlabelled gauge point).
std::string rendered_value(double value) {
  std::string page = render_prometheus({{"v", "", MetricType::Gauge, {{{}, value}}}});
  std::string prefix = "# TYPE v gauge\nv ";
  EXPECT_TRUE(page.starts_with(prefix)) << page;
  return page.substr(prefix.size(), page.size() - prefix.size() - 1);
}

// Derived by hand from the text format 0.0.4 ("Exposition formats", Prometheus docs): HELP
// escapes \ as \\ and a newline as \n; label values also escape " as \"; lines of one family
// are contiguous, HELP then TYPE then the samples.
TEST(RenderPrometheus, MatchesTheSpecificationByHand) {
  std::vector<MetricFamily> families = {
      {"ljprof_samples_total", "Samples taken.", MetricType::Counter, {{{}, 42}}},
      {"ljprof_dropped_total",
       "Samples dropped.\nSee C:\\docs.",
       MetricType::Counter,
       {{{{"reason", "ring \"full\""}}, 3}, {{{"reason", "other"}, {"cpu", "0"}}, 0}}},
      {"ljprof_processes", "LuaJIT processes followed.", MetricType::Gauge, {{{}, 2.5}}},
  };
  EXPECT_EQ(render_prometheus(families),
            "# HELP ljprof_samples_total Samples taken.\n"
            "# TYPE ljprof_samples_total counter\n"
            "ljprof_samples_total 42\n"
            "# HELP ljprof_dropped_total Samples dropped.\\nSee C:\\\\docs.\n"
            "# TYPE ljprof_dropped_total counter\n"
            "ljprof_dropped_total{reason=\"ring \\\"full\\\"\"} 3\n"
            "ljprof_dropped_total{reason=\"other\",cpu=\"0\"} 0\n"
            "# HELP ljprof_processes LuaJIT processes followed.\n"
            "# TYPE ljprof_processes gauge\n"
            "ljprof_processes 2.5\n");
}

TEST(RenderPrometheus, PassesPromtool) {
  std::vector<MetricFamily> families = {
      {"ljprof_samples_total", "Samples taken.", MetricType::Counter, {{{}, 1e15}}},
      {"ljprof_process_samples_total",
       "Samples per process; a \\ and a\nnewline in help.",
       MetricType::Counter,
       {{{{"pid", "12"}, {"comm", "tarantool"}}, 18446744073709549568.0},
        {{{"pid", "13"}, {"comm", "say \"hi\"\\ \n twice"}}, 7},
        {{{"pid", "14"}, {"comm", "caf\xC3\xA9 \xFF\xC0\xAF\xED\xA0\x80 \xE2\x82"}}, 1}}},
      {"ljprof_queue_depth",
       "Profiles waiting for the backend.",
       MetricType::Gauge,
       {{{{"sink", "pyroscope"}}, 0.125}, {{{"sink", "files"}}, -3}}},
      {"ljprof_odd_values",
       "Values Prometheus spells specially.",
       MetricType::Gauge,
       {{{{"k", "nan"}}, std::nan("")},
        {{{"k", "inf"}}, std::numeric_limits<double>::infinity()},
        {{{"k", "-inf"}}, -std::numeric_limits<double>::infinity()},
        {{{"k", "tiny"}}, 1e-9}}},
      {"ljprof_empty", "No points: left out.", MetricType::Gauge, {}},
  };
  std::string page = render_prometheus(families);
  test::CommandResult check = promtool_check(page);
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err << "\n" << page;
  EXPECT_EQ(check.out + check.err, "") << page;
  EXPECT_NE(page.find("ljprof_samples_total 1000000000000000\n"), std::string::npos) << page;
  EXPECT_NE(page.find("} 18446744073709549568\n"), std::string::npos) << page;
  EXPECT_EQ(page.find("ljprof_empty"), std::string::npos) << page;
}

TEST(RenderPrometheus, FormatsValues) {
  EXPECT_EQ(rendered_value(0), "0");
  EXPECT_EQ(rendered_value(1e6), "1000000");
  EXPECT_EQ(rendered_value(-42), "-42");
  EXPECT_EQ(rendered_value(1e17), "100000000000000000");
  EXPECT_EQ(rendered_value(0.1), "0.1");
  EXPECT_EQ(rendered_value(2.5e-7), "2.5e-07");
  EXPECT_EQ(rendered_value(1e300), "1e+300");  // beyond 2^64: not a counter, exponent is fine
  EXPECT_EQ(rendered_value(std::nan("")), "NaN");
  EXPECT_EQ(rendered_value(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(rendered_value(-std::numeric_limits<double>::infinity()), "-Inf");
}

// Label values come from other processes; a byte that is not UTF-8 would make Prometheus
// reject the whole page and a control byte would reach whoever reads it, so each is written as
// \xNN (common/printable.h), whose backslash the format then escapes like any other; the valid
// characters around it stay.
TEST(RenderPrometheus, WritesBadBytesAsPrintableText) {
  std::string page = render_prometheus(
      {{"m",
        "h\xFFh",
        MetricType::Gauge,
        {{{{"comm", "caf\xC3\xA9-\xFF-\xC0\xAF"}}, 1}, {{{"comm", "a\x1b[2Jb\xc2\x9b"}}, 2}}}});
  EXPECT_EQ(page,
            "# HELP m h\\\\xffh\n"
            "# TYPE m gauge\n"
            "m{comm=\"caf\xC3\xA9-\\\\xff-\\\\xc0\\\\xaf\"} 1\n"
            "m{comm=\"a\\\\x1b[2Jb\\\\xc2\\\\x9b\"} 2\n");
}

// Bad names are programming errors: debug builds assert, release builds leave out the bad
// family or point and keep the page valid.
TEST(RenderPrometheus, LeavesOutInvalidNames) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const MetricFamily good = {"good_total", "Good.", MetricType::Counter, {{{}, 1}}};
  std::string page;
  EXPECT_DEBUG_DEATH(page = render_prometheus({{"9bad", "", MetricType::Gauge, {{{}, 1}}}, good}),
                     "invalid metric name '9bad'");
  EXPECT_DEBUG_DEATH(page = render_prometheus({good, good}), "repeated metric family 'good_total'");
  EXPECT_DEBUG_DEATH(
      page = render_prometheus(
          {{"m", "", MetricType::Gauge, {{{{"bad-label", "x"}}, 1}, {{{"ok", "y"}}, 2}}}}),
      "invalid label name 'bad-label'");
#ifdef NDEBUG
  EXPECT_EQ(page, "# TYPE m gauge\nm{ok=\"y\"} 2\n");
  EXPECT_EQ(render_prometheus({{"9bad", "", MetricType::Gauge, {{{}, 1}}}, good}),
            render_prometheus({good}));
  EXPECT_EQ(render_prometheus({good, good}), render_prometheus({good}));
  EXPECT_EQ(render_prometheus({{"m", "", MetricType::Gauge, {{{{"__name__", "x"}}, 1}}}}),
            "# TYPE m gauge\n");
#endif
}

httplib::Result get(uint16_t port, const std::string& path) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(2);
  client.set_read_timeout(2);
  return client.Get(path.c_str());
}

std::unique_ptr<MetricsServer> start_or_fail(const std::string& address,
                                             std::function<std::string()> render) {
  auto server = MetricsServer::start(address, std::move(render));
  EXPECT_TRUE(server.ok()) << server.message();
  return server.ok() ? std::move(server).value() : nullptr;
}

// A TCP connection to the server that sends nothing (or only `data`) and stays open.
class IdleConnection {
 public:
  IdleConnection(uint16_t port, const std::string& data = "") {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                 send(fd_, data.data(), data.size(), MSG_NOSIGNAL) == ssize_t(data.size());
  }
  ~IdleConnection() { close(fd_); }
  IdleConnection(const IdleConnection&) = delete;
  IdleConnection& operator=(const IdleConnection&) = delete;
  bool connected() const { return connected_; }
  // Whether the server closed the connection within `seconds` (a read returns 0 or an error).
  bool closed_within(double seconds) const {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(seconds * 1000)) <= 0) return false;
    char byte;
    return recv(fd_, &byte, 1, MSG_DONTWAIT) <= 0;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

size_t thread_count() {
  auto tasks = std::filesystem::directory_iterator("/proc/self/task");
  return static_cast<size_t>(std::distance(begin(tasks), end(tasks)));
}

// The listener starts its workers just after start() returns: wait for them (up to 2 s).
size_t wait_for_thread_count(size_t expected) {
  auto start = std::chrono::steady_clock::now();
  while (thread_count() != expected && seconds_since(start) < 2.0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return thread_count();
}

TEST(MetricsServer, ServesTheRenderedPage) {
  std::atomic<int> renders = 0;
  auto render = [&renders] {
    int n = ++renders;
    return render_prometheus({{"ljprof_scrapes_total",
                               "Scrapes.",
                               MetricType::Counter,
                               {{{}, static_cast<double>(n)}}}});
  };
  auto server = start_or_fail("127.0.0.1:0", render);
  ASSERT_TRUE(server);
  ASSERT_NE(server->port(), 0);
  for (int scrape = 1; scrape <= 2; ++scrape) {
    auto res = get(server->port(), "/metrics");
    ASSERT_TRUE(res) << httplib::to_string(res.error());
    EXPECT_EQ(res->status, 200);
    EXPECT_EQ(res->get_header_value("Content-Type"), kContentType);
    EXPECT_EQ(res->body,
              "# HELP ljprof_scrapes_total Scrapes.\n"
              "# TYPE ljprof_scrapes_total counter\n"
              "ljprof_scrapes_total " +
                  std::to_string(scrape) + "\n");
  }
}

TEST(MetricsServer, OtherPathsAreNotFound) {
  auto server = start_or_fail("127.0.0.1:0", [] { return std::string("x 1\n"); });
  ASSERT_TRUE(server);
  for (const char* path : {"/", "/metricsx", "/metrics/x", "/favicon.ico"}) {
    auto res = get(server->port(), path);
    ASSERT_TRUE(res) << path << ": " << httplib::to_string(res.error());
    EXPECT_EQ(res->status, 404) << path;
    EXPECT_NE(res->body.find("/metrics"), std::string::npos) << res->body;
  }
}

TEST(MetricsServer, RenderFailureIsAServerError) {
  auto server = start_or_fail("127.0.0.1:0",
                              []() -> std::string { throw std::runtime_error("registry locked"); });
  ASSERT_TRUE(server);
  auto res = get(server->port(), "/metrics");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 500);
  EXPECT_NE(res->body.find("registry locked"), std::string::npos) << res->body;
}

TEST(MetricsServer, PortInUseFailsClearly) {
  auto first = start_or_fail("127.0.0.1:0", [] { return std::string(); });
  ASSERT_TRUE(first);
  std::string address = "127.0.0.1:" + std::to_string(first->port());
  auto second = MetricsServer::start(address, [] { return std::string(); });
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.message().find(address), std::string::npos) << second.message();
  EXPECT_NE(second.message().find("already in use"), std::string::npos) << second.message();
  // The first server is unaffected.
  auto res = get(first->port(), "/metrics");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
}

TEST(MetricsServer, BadAddressesAreErrors) {
  struct Case {
    const char* address;
    const char* why;
  };
  for (const Case& c : std::vector<Case>{
           {"9100", "expected HOST:PORT"},
           {":9100", "HOST is empty"},
           {"127.0.0.1:", "is not a number"},
           {"127.0.0.1:http", "is not a number"},
           {"127.0.0.1:-1", "is not a number"},
           {"127.0.0.1:65536", "out of range"},
           {"127.0.0.1:99999999999999999999", "out of range"},
           {"::1:9100", "needs brackets"},
           {"[::1:9100", "unbalanced brackets"},
           {"192.0.2.1:0", "no local interface"},  // TEST-NET-1: never a local address
       }) {
    auto server = MetricsServer::start(c.address, [] { return std::string(); });
    ASSERT_FALSE(server.ok()) << c.address;
    EXPECT_NE(server.message().find(std::string("'") + c.address + "'"), std::string::npos)
        << server.message();
    EXPECT_NE(server.message().find(c.why), std::string::npos) << server.message();
  }
}

// Clients that connect and send nothing, or half a request, start no thread and do not delay
// a scrape; the server drops each after its 1 s timeout.
TEST(MetricsServer, IdleClientsNeitherAddThreadsNorDelayScrapes) {
  size_t before = thread_count();
  auto server = start_or_fail("127.0.0.1:0", [] { return std::string("x 1\n"); });
  ASSERT_TRUE(server);
  EXPECT_EQ(wait_for_thread_count(before + 1), before + 1);  // the server's one thread
  std::vector<std::unique_ptr<IdleConnection>> idle;
  for (int i = 0; i < 16; ++i) {
    idle.push_back(std::make_unique<IdleConnection>(server->port(), i % 2 ? "GET /met" : ""));
    ASSERT_TRUE(idle.back()->connected());
  }
  auto res = get(server->port(), "/metrics");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "x 1\n");
  EXPECT_EQ(thread_count(), before + 1);
  for (const auto& connection : idle) EXPECT_TRUE(connection->closed_within(3.0));
}

// HEAD gets GET's headers, its Content-Length included, and no body: the next request on the
// same connection is read as a response of its own.
TEST(MetricsServer, HeadHasTheHeadersOfGetWithoutTheBody) {
  auto server = start_or_fail("127.0.0.1:0", [] { return std::string("x 1\n"); });
  ASSERT_TRUE(server);
  httplib::Client client("127.0.0.1", server->port());
  client.set_keep_alive(true);
  client.set_read_timeout(2);
  auto head = client.Head("/metrics");
  ASSERT_TRUE(head) << httplib::to_string(head.error());
  EXPECT_EQ(head->status, 200);
  EXPECT_EQ(head->get_header_value("Content-Length"), "4");
  EXPECT_EQ(head->body, "");
  auto get = client.Get("/metrics");
  ASSERT_TRUE(get) << httplib::to_string(get.error());
  EXPECT_EQ(get->body, "x 1\n");
}

// A body on GET /metrics is refused, not read on; other methods are told what is allowed.
TEST(MetricsServer, RequestBodiesAndOtherMethodsAreRefused) {
  auto server = start_or_fail("127.0.0.1:0", [] { return std::string("x 1\n"); });
  ASSERT_TRUE(server);
  httplib::Client client("127.0.0.1", server->port());
  client.set_read_timeout(2);
  auto big = client.Post("/metrics", std::string(64 * 1024, 'x'), "text/plain");
  ASSERT_TRUE(big) << httplib::to_string(big.error());
  EXPECT_EQ(big->status, 413);
  auto post = httplib::Client("127.0.0.1", server->port()).Post("/metrics", "", "text/plain");
  ASSERT_TRUE(post) << httplib::to_string(post.error());
  EXPECT_EQ(post->status, 405);
  EXPECT_EQ(post->get_header_value("Allow"), "GET, HEAD");
}

TEST(MetricsServer, StopsPromptlyWhileClientsAreConnected) {
  auto server = start_or_fail("127.0.0.1:0", [] { return std::string("x 1\n"); });
  ASSERT_TRUE(server);
  // A keep-alive client after a scrape (its worker waits for the next request) and a client
  // stuck in the middle of its request line.
  httplib::Client keep_alive("127.0.0.1", server->port());
  keep_alive.set_keep_alive(true);
  auto res = keep_alive.Get("/metrics");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  IdleConnection half_request(server->port(), "GET /metr");
  ASSERT_TRUE(half_request.connected());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto start = std::chrono::steady_clock::now();
  server.reset();
  EXPECT_LT(seconds_since(start), 2.0);
}

}  // namespace
}  // namespace ljprof::exporter
