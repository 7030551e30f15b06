#include "export/metrics.h"

#include "common/printable.h"

#include <fmt/format.h>
#include <httplib.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cassert>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <iterator>
#include <set>
#include <string_view>
#include <system_error>
#include <thread>

namespace ljprof::exporter {

namespace {

// ---- Text exposition format 0.0.4 ----

bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_name_char(char c) {
  return is_name_start(c) || (c >= '0' && c <= '9');
}

// [a-zA-Z_:][a-zA-Z0-9_:]*
bool valid_metric_name(std::string_view name) {
  if (name.empty() || !(is_name_start(name[0]) || name[0] == ':')) return false;
  for (char c : name) {
    if (!is_name_char(c) && c != ':') return false;
  }
  return true;
}

// [a-zA-Z_][a-zA-Z0-9_]*, and not "__..." (reserved for Prometheus' own labels).
bool valid_label_name(std::string_view name) {
  if (name.empty() || !is_name_start(name[0]) || name.starts_with("__")) return false;
  for (char c : name) {
    if (!is_name_char(c)) return false;
  }
  return true;
}

// The caller built a family wrong. Release builds drop the offending part so that the page
// still parses (one bad metric must not cost every other metric); debug builds stop here so
// the mistake is found by the tests.
void invalid_input([[maybe_unused]] std::string_view what, [[maybe_unused]] std::string_view name) {
#ifndef NDEBUG
  std::fprintf(stderr, "render_prometheus: %.*s '%.*s'\n", static_cast<int>(what.size()),
               what.data(), static_cast<int>(name.size()), name.data());
  assert(false && "render_prometheus: invalid metric family");
#endif
}

// Appends `text` escaped for a HELP line (\ and newline) or, with `quote`, for a label value
// (also "). A line break keeps the format's own escape, \n; every other byte goes through the
// printable-text rule (common/printable.h): label values come from other processes, and a byte
// that is not UTF-8 would make Prometheus reject the whole page.
void append_escaped(std::string& out, std::string_view text, bool quote) {
  for (size_t start = 0;;) {
    const size_t line_break = text.find('\n', start);
    for (char c : printable_text(text.substr(start, line_break - start))) {
      if (c == '\\') {
        out += "\\\\";
      } else if (c == '"' && quote) {
        out += "\\\"";
      } else {
        out += c;
      }
    }
    if (line_break == std::string_view::npos) return;
    out += "\\n";
    start = line_break + 1;
  }
}

// Go's strconv.ParseFloat reads what Prometheus reads: NaN, +Inf, -Inf, and decimal numbers.
// Integral values (counters) print as plain integers, never as 1e+06; other values print in
// the shortest form that reads back as the same double.
std::string format_value(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (value == std::trunc(value) && std::fabs(value) < 0x1p64) return fmt::format("{:.0f}", value);
  return fmt::format("{}", value);
}

bool valid_labels(const MetricFamily::Point& point) {
  for (const auto& [name, value] : point.labels) {
    if (!valid_label_name(name)) {
      invalid_input("invalid label name", name);
      return false;
    }
  }
  return true;
}

void append_point(std::string& out, const std::string& name, const MetricFamily::Point& point) {
  out += name;
  if (!point.labels.empty()) {
    out += '{';
    for (size_t i = 0; i < point.labels.size(); ++i) {
      if (i > 0) out += ',';
      out += point.labels[i].first;
      out += "=\"";
      append_escaped(out, point.labels[i].second, /*quote=*/true);
      out += '"';
    }
    out += '}';
  }
  out += ' ';
  out += format_value(point.value);
  out += '\n';
}

const char* type_name(MetricType type) {
  return type == MetricType::Counter ? "counter" : "gauge";
}

void append_family(std::string& out, const MetricFamily& family) {
  if (!family.help.empty()) {
    fmt::format_to(std::back_inserter(out), "# HELP {} ", family.name);
    append_escaped(out, family.help, /*quote=*/false);
    out += '\n';
  }
  fmt::format_to(std::back_inserter(out), "# TYPE {} {}\n", family.name, type_name(family.type));
  for (const MetricFamily::Point& point : family.points) {
    if (valid_labels(point)) append_point(out, family.name, point);
  }
}

// ---- The HTTP server ----

constexpr const char* kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";
constexpr const char* kTextContentType = "text/plain; charset=utf-8";
// Two workers: Prometheus scrapes one page at a time; the second keeps a person's curl (or a
// second Prometheus) from waiting behind it. httplib's default is max(8, cores - 1).
constexpr size_t kWorkerThreads = 2;
// Per read/write call and for an idle keep-alive connection (httplib's default is 5 s): what a
// slow or idle client can hold a worker for, and what it can add to ~MetricsServer.
constexpr time_t kTimeoutSeconds = 1;
// GET /metrics carries no body; a client sending one gets 413 instead of being read on.
constexpr size_t kMaxRequestBody = 4096;

struct ListenAddress {
  std::string host;
  uint16_t port = 0;
};

Result<std::string> parse_host(const std::string& address, std::string host) {
  if (host.empty()) {
    return make_error(
        "metrics address '{}': HOST is empty (0.0.0.0:PORT or [::]:PORT listens "
        "on every interface)",
        address);
  }
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') {
      return make_error("metrics address '{}': unbalanced brackets in HOST", address);
    }
    return host.substr(1, host.size() - 2);
  }
  if (host.find(':') != std::string::npos) {
    return make_error("metrics address '{}': an IPv6 HOST needs brackets, e.g. [::1]:9100",
                      address);
  }
  return host;
}

Result<uint16_t> parse_port(const std::string& address, std::string_view text) {
  bool digits = !text.empty() && text.find_first_not_of("0123456789") == std::string_view::npos;
  if (!digits) return make_error("metrics address '{}': PORT '{}' is not a number", address, text);
  uint32_t port = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), port);
  if (ec != std::errc() || end != text.data() + text.size() || port > 65535) {
    return make_error("metrics address '{}': PORT {} is out of range 0-65535", address, text);
  }
  return static_cast<uint16_t>(port);
}

// "HOST:PORT", split at the last colon (a bracketed IPv6 host has colons of its own).
Result<ListenAddress> parse_address(const std::string& address) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return make_error("metrics address '{}': expected HOST:PORT, e.g. 127.0.0.1:9100", address);
  }
  ListenAddress parsed;
  LJ_ASSIGN_OR_RETURN(parsed.host, parse_host(address, address.substr(0, colon)));
  LJ_ASSIGN_OR_RETURN(parsed.port,
                      parse_port(address, std::string_view(address).substr(colon + 1)));
  return parsed;
}

// Replaces httplib's default socket options, which set SO_REUSEPORT: with it a second agent
// would bind the same port and the kernel would split the scrapes between the two. SO_REUSEADDR
// alone still lets a restarted agent bind while old connections sit in TIME_WAIT.
void exclusive_bind_options(int sock) {
  int yes = 1;
  setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
}

// errno of binding one resolved address the way httplib does (0 when it binds now).
int probe_bind(const addrinfo& ai) {
  int sock = socket(ai.ai_family, ai.ai_socktype | SOCK_CLOEXEC, ai.ai_protocol);
  if (sock < 0) return errno;
  exclusive_bind_options(sock);
  if (ai.ai_family == AF_INET6) {
    int no = 0;
    setsockopt(sock, IPPROTO_IPV6, IPV6_V6ONLY, &no, sizeof(no));
  }
  int err = ::bind(sock, ai.ai_addr, ai.ai_addrlen) == 0 ? 0 : errno;
  close(sock);
  return err;
}

std::string describe_bind_errno(int err, uint16_t port) {
  std::string text = std::system_category().message(err);
  switch (err) {
    case EADDRINUSE:
      return fmt::format("port {} is already in use ({})", port, text);
    case EADDRNOTAVAIL:
      return fmt::format("no local interface has this address ({})", text);
    case EACCES:
      return fmt::format("{} (ports below 1024 need CAP_NET_BIND_SERVICE)", text);
    default:
      return text;
  }
}

// httplib reports only that binding failed; bind once more ourselves to learn why.
std::string bind_failure_reason(const ListenAddress& where) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  std::string service = std::to_string(where.port);
  int rc = getaddrinfo(where.host.c_str(), service.c_str(), &hints, &list);
  if (rc != 0) return fmt::format("cannot resolve '{}': {}", where.host, gai_strerror(rc));
  std::string reason = "bind failed";
  for (const addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
    int err = probe_bind(*ai);
    if (err == 0) {
      reason = "bind failed, and the address was free again right after";
      break;
    }
    reason = describe_bind_errno(err, where.port);
  }
  freeaddrinfo(list);
  return reason;
}

// httplib::Server with access to its listening socket: its destructor does not close a socket
// that bind_to_port() opened if listening never started.
class HttpServer : public httplib::Server {
 public:
  void close_unused_socket() {
    int sock = svr_sock_.exchange(-1);
    if (sock >= 0) close(sock);
  }
};

void serve_metrics(const std::function<std::string()>& render, httplib::Response& res) {
  try {
    res.set_content(render(), kMetricsContentType);
  } catch (const std::exception& e) {
    res.status = 500;
    res.set_content(fmt::format("rendering the metrics failed: {}\n", e.what()), kTextContentType);
  } catch (...) {
    res.status = 500;
    res.set_content("rendering the metrics failed\n", kTextContentType);
  }
}

// A 404 with a body that tells a person with curl where the page is.
httplib::Server::HandlerResponse explain_not_found(const httplib::Request&,
                                                   httplib::Response& res) {
  if (res.status != 404) return httplib::Server::HandlerResponse::Unhandled;
  res.set_content("not found: ljprof agent serves only /metrics\n", kTextContentType);
  return httplib::Server::HandlerResponse::Handled;
}

void configure(HttpServer& server, std::function<std::string()> render) {
  server.new_task_queue = [] { return new httplib::ThreadPool(kWorkerThreads); };
  server.set_socket_options(exclusive_bind_options);
  server.set_read_timeout(kTimeoutSeconds, 0);
  server.set_write_timeout(kTimeoutSeconds, 0);
  server.set_keep_alive_timeout(kTimeoutSeconds);
  server.set_payload_max_length(kMaxRequestBody);
  server.Get("/metrics",
             [render = std::move(render)](const httplib::Request&, httplib::Response& res) {
               serve_metrics(render, res);
             });
  server.set_error_handler(httplib::Server::HandlerWithResponse(explain_not_found));
}

// The bound port, or -1 when binding failed.
int bind_server(HttpServer& server, const ListenAddress& where) {
  if (where.port == 0) return server.bind_to_any_port(where.host);
  return server.bind_to_port(where.host, where.port) ? where.port : -1;
}

}  // namespace

std::string render_prometheus(const std::vector<MetricFamily>& families) {
  std::string out;
  std::set<std::string_view> seen;
  for (const MetricFamily& family : families) {
    if (!valid_metric_name(family.name)) {
      invalid_input("invalid metric name", family.name);
      continue;
    }
    // A second # TYPE line for a name makes Prometheus reject the whole page.
    if (!seen.insert(family.name).second) {
      invalid_input("repeated metric family", family.name);
      continue;
    }
    if (!family.points.empty()) append_family(out, family);
  }
  return out;
}

void Histogram::observe(double value) {
  if (buckets.size() != bounds.size()) buckets.assign(bounds.size(), 0);
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (value <= bounds[i]) ++buckets[i];
  }
  sum += value;
  ++count;
}

std::string render_prometheus(const std::vector<MetricFamily>& families,
                              const std::vector<Histogram>& histograms) {
  std::string out = render_prometheus(families);
  for (const Histogram& h : histograms) {
    bool repeated = !valid_metric_name(h.name);
    for (const MetricFamily& f : families) repeated = repeated || f.name == h.name;
    if (repeated) {
      invalid_input("invalid or repeated histogram", h.name);
      continue;
    }
    if (!h.help.empty()) {
      fmt::format_to(std::back_inserter(out), "# HELP {} ", h.name);
      append_escaped(out, h.help, /*quote=*/false);
      out += '\n';
    }
    fmt::format_to(std::back_inserter(out), "# TYPE {} histogram\n", h.name);
    for (size_t i = 0; i < h.bounds.size(); ++i) {
      const uint64_t n = i < h.buckets.size() ? h.buckets[i] : 0;
      fmt::format_to(std::back_inserter(out), "{}_bucket{{le=\"{}\"}} {}\n", h.name, h.bounds[i],
                     n);
    }
    fmt::format_to(std::back_inserter(out), "{}_bucket{{le=\"+Inf\"}} {}\n", h.name, h.count);
    fmt::format_to(std::back_inserter(out), "{}_sum {}\n{}_count {}\n", h.name, h.sum, h.name,
                   h.count);
  }
  return out;
}

struct MetricsServer::Impl {
  HttpServer server;
  std::thread thread;
  std::atomic<bool> listen_returned{false};
  uint16_t port = 0;

  ~Impl() {
    if (!thread.joinable()) server.close_unused_socket();
  }

  void listen() {
    try {
      server.listen_after_bind();
    } catch (...) {
      // httplib could not start its workers: the agent goes on without its metrics page.
    }
    listen_returned = true;
  }

  // httplib's stop() does nothing before the listener has marked itself running, so
  // ~MetricsServer could otherwise miss a listener that had not started yet and wait forever.
  void wait_until_listening() const {
    while (!server.is_running() && !listen_returned) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
};

MetricsServer::MetricsServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<MetricsServer>> MetricsServer::start(const std::string& address,
                                                            std::function<std::string()> render) {
  try {
    LJ_ASSIGN_OR_RETURN(ListenAddress where, parse_address(address));
    std::unique_ptr<MetricsServer> server(new MetricsServer(std::make_unique<Impl>()));
    Impl& impl = *server->impl_;
    configure(impl.server, std::move(render));
    int port = bind_server(impl.server, where);
    if (port < 0) {
      return make_error("metrics server on '{}': cannot listen: {}", address,
                        bind_failure_reason(where));
    }
    impl.port = static_cast<uint16_t>(port);
    impl.thread = std::thread([&impl] { impl.listen(); });
    impl.wait_until_listening();
    return server;
  } catch (const std::exception& e) {
    return make_error("metrics server on '{}': {}", address, e.what());
  }
}

uint16_t MetricsServer::port() const {
  return impl_->port;
}

MetricsServer::~MetricsServer() {
  if (!impl_->thread.joinable()) return;  // start() failed before listening: ~Impl cleans up
  if (!impl_->listen_returned) impl_->server.stop();
  impl_->thread.join();
}

}  // namespace ljprof::exporter
