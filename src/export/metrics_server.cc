// The HTTP server of the metrics page, on Boost.Beast over Boost.Asio: header-only, so the
// agent carries no HTTP library of its own (cpp-httplib's Debian build pulled OpenSSL's
// libcrypto, 3 MiB of the agent's memory, for a plain-text page) and a static build needs no
// archive Debian does not ship.
#include "export/metrics.h"

#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <charconv>
#include <chrono>
#include <exception>
#include <optional>
#include <string_view>
#include <system_error>
#include <thread>

namespace ljprof::exporter {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

constexpr const char* kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";
constexpr const char* kTextContentType = "text/plain; charset=utf-8";
// Per read and write, and for an idle keep-alive connection: what a slow or idle client can
// hold its connection for, and all it can add to ~MetricsServer.
constexpr std::chrono::seconds kTimeout{1};
// GET /metrics carries no body; a client sending one gets 413 instead of being read on.
constexpr uint64_t kMaxRequestBody = 4096;
constexpr uint32_t kMaxRequestHeader = 8192;
constexpr int kListenBacklog = 64;

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

struct ListeningSocket {
  int fd = -1;
  int family = AF_INET;
  uint16_t port = 0;
};

// A listening socket on one resolved address, or its errno. SO_REUSEADDR lets a restarted agent
// bind while old connections sit in TIME_WAIT; SO_REUSEPORT is left off, so that a second agent
// on the same port fails instead of the kernel splitting the scrapes between the two.
int listen_on(const addrinfo& ai, ListeningSocket& out) {
  int sock = socket(ai.ai_family, ai.ai_socktype | SOCK_CLOEXEC, ai.ai_protocol);
  if (sock < 0) return errno;
  int yes = 1;
  setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  if (ai.ai_family == AF_INET6) {
    int no = 0;
    setsockopt(sock, IPPROTO_IPV6, IPV6_V6ONLY, &no, sizeof(no));
  }
  sockaddr_storage bound{};
  socklen_t bound_len = sizeof(bound);
  if (::bind(sock, ai.ai_addr, ai.ai_addrlen) != 0 || ::listen(sock, kListenBacklog) != 0 ||
      getsockname(sock, reinterpret_cast<sockaddr*>(&bound), &bound_len) != 0) {
    int err = errno;
    close(sock);
    return err;
  }
  out.fd = sock;
  out.family = ai.ai_family;
  out.port = ntohs(ai.ai_family == AF_INET6 ? reinterpret_cast<sockaddr_in6&>(bound).sin6_port
                                            : reinterpret_cast<sockaddr_in&>(bound).sin_port);
  return 0;
}

// The first address HOST resolves to that can be bound; the error says why none could.
Result<ListeningSocket> listen_socket(const std::string& address, const ListenAddress& where) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* list = nullptr;
  std::string service = std::to_string(where.port);
  int rc = getaddrinfo(where.host.c_str(), service.c_str(), &hints, &list);
  if (rc != 0) {
    return make_error("metrics server on '{}': cannot listen: cannot resolve '{}': {}", address,
                      where.host, gai_strerror(rc));
  }
  ListeningSocket socket;
  int err = 0;
  for (const addrinfo* ai = list; ai != nullptr && socket.fd < 0; ai = ai->ai_next) {
    err = listen_on(*ai, socket);
  }
  freeaddrinfo(list);
  if (socket.fd < 0) {
    return make_error("metrics server on '{}': cannot listen: {}", address,
                      describe_bind_errno(err, where.port));
  }
  return socket;
}

using Request = http::request<http::string_body>;
using Response = http::response<http::string_body>;

Response text_response(const Request& request, http::status status, std::string body,
                       const char* content_type = kTextContentType) {
  Response response(status, request.version());
  response.set(http::field::content_type, content_type);
  response.keep_alive(request.keep_alive());
  response.body() = std::move(body);
  response.prepare_payload();
  return response;
}

// GET (or HEAD) /metrics renders the page; every other path is a 404 that tells a person with
// curl where the page is.
Response respond(const Request& request, const std::function<std::string()>& render) {
  if (request.target() != "/metrics") {
    return text_response(request, http::status::not_found,
                         "not found: ljprof agent serves only /metrics\n");
  }
  if (request.method() != http::verb::get && request.method() != http::verb::head) {
    Response response =
        text_response(request, http::status::method_not_allowed, "only GET /metrics\n");
    response.set(http::field::allow, "GET, HEAD");
    return response;
  }
  try {
    Response response = text_response(request, http::status::ok, render(), kMetricsContentType);
    // HEAD: the headers GET would send, Content-Length included, and no body (RFC 9110 9.3.2).
    if (request.method() == http::verb::head) response.body().clear();
    return response;
  } catch (const std::exception& e) {
    return text_response(request, http::status::internal_server_error,
                         fmt::format("rendering the metrics failed: {}\n", e.what()));
  } catch (...) {
    return text_response(request, http::status::internal_server_error,
                         "rendering the metrics failed\n");
  }
}

// One client connection: requests read and answered in turn (keep-alive), each step bounded
// by kTimeout. Owned by the handler it waits in; gone when the connection is.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, const std::function<std::string()>& render)
      : stream_(std::move(socket)), render_(render) {}

  void read_request() {
    parser_.emplace();
    parser_->header_limit(kMaxRequestHeader);
    parser_->body_limit(kMaxRequestBody);
    stream_.expires_after(kTimeout);
    http::async_read(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->on_request(ec); });
  }

 private:
  void on_request(beast::error_code ec) {
    if (ec == http::error::body_limit) {
      Request request;
      request.keep_alive(false);
      return write(text_response(request, http::status::payload_too_large,
                                 "a request to the metrics page carries no body\n"));
    }
    if (ec == http::error::end_of_stream || ec == beast::error::timeout || ec == asio::error::eof) {
      return close();
    }
    if (ec) {
      Request request;
      request.keep_alive(false);
      return write(text_response(request, http::status::bad_request, "bad request\n"));
    }
    write(respond(parser_->get(), render_));
  }

  void write(Response response) {
    response_ = std::move(response);
    stream_.expires_after(kTimeout);
    http::async_write(stream_, response_,
                      [self = shared_from_this()](beast::error_code ec, size_t) {
                        if (ec) return self->close();
                        if (!self->response_.keep_alive()) return self->drain_and_close();
                        self->read_request();
                      });
  }

  void close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
  }

  // Closing with unread request bytes makes the kernel reset the connection, and the client
  // may then lose the response it was sent: end our side, read what the client still sends
  // until it closes too or the timeout ends it.
  void drain_and_close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.expires_after(kTimeout);
    drain();
  }

  void drain() {
    buffer_.clear();
    stream_.async_read_some(buffer_.prepare(kMaxRequestHeader),
                            [self = shared_from_this()](beast::error_code ec, size_t) {
                              if (ec) return self->close();
                              self->drain();
                            });
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  Response response_;
  const std::function<std::string()>& render_;
};

}  // namespace

// One thread runs every connection's handlers: Prometheus scrapes a page at a time, and an idle
// or slow client only holds a pending read, never a thread.
struct MetricsServer::Impl {
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  std::function<std::string()> render;
  std::thread thread;
  uint16_t port = 0;

  void accept() {
    acceptor.async_accept([this](beast::error_code ec, tcp::socket socket) {
      if (!acceptor.is_open()) return;
      if (!ec) std::make_shared<Connection>(std::move(socket), render)->read_request();
      accept();
    });
  }
};

MetricsServer::MetricsServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<MetricsServer>> MetricsServer::start(const std::string& address,
                                                            std::function<std::string()> render) {
  LJ_ASSIGN_OR_RETURN(ListenAddress where, parse_address(address));
  LJ_ASSIGN_OR_RETURN(ListeningSocket socket, listen_socket(address, where));
  bool socket_owned = false;  // by the acceptor, which closes it
  try {
    std::unique_ptr<MetricsServer> server(new MetricsServer(std::make_unique<Impl>()));
    Impl& impl = *server->impl_;
    impl.render = std::move(render);
    impl.port = socket.port;
    impl.acceptor.assign(socket.family == AF_INET6 ? tcp::v6() : tcp::v4(), socket.fd);
    socket_owned = true;
    impl.accept();
    impl.thread = std::thread([&impl] { impl.io.run(); });
    return server;
  } catch (const std::exception& e) {
    if (!socket_owned) close(socket.fd);
    return make_error("metrics server on '{}': {}", address, e.what());
  }
}

uint16_t MetricsServer::port() const {
  return impl_->port;
}

MetricsServer::~MetricsServer() {
  impl_->io.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

}  // namespace ljprof::exporter
