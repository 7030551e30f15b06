// A stand-in for Pyroscope's HTTP ingest endpoint (POST /ingest) on 127.0.0.1, for tests of
// ljprof's exporter and agent: it records every request, checks each against the ingest
// contract (violations() lists every breach), and can be switched at run time between
// answering, failing, hanging and being down.
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ljprof::test {

class PyroscopeReceiver {
 public:
  enum class Mode {
    Up,         // 200
    Refuse5xx,  // 503
    Reject4xx,  // 400
    Hang,       // accepts, reads the request, never answers (until the mode changes or stop())
  };

  struct Request {
    std::string method;
    std::string path;
    std::string target;                              // path and query as sent (still URL-encoded)
    std::multimap<std::string, std::string> params;  // the query, decoded
    std::map<std::string, std::string> headers;      // names in lower case
    std::string body;
    std::chrono::steady_clock::time_point arrived;
    int status = 0;  // the answer given (0: none, Hang)

    std::string param(const std::string& key) const;    // "" if absent
    std::string header(const std::string& name) const;  // case-insensitive, "" if absent
  };

  // The `name` parameter split up: "APP.cpu{k=v,...}" -> APP, "cpu" and the labels.
  struct Name {
    std::string app;   // without ".cpu" / ".wall"
    std::string kind;  // "cpu" or "wall"
    std::map<std::string, std::string> labels;
  };

  // Starts listening (mode Up) on an ephemeral port. A failure to bind is a violation.
  PyroscopeReceiver();
  ~PyroscopeReceiver();  // stop()
  PyroscopeReceiver(const PyroscopeReceiver&) = delete;
  PyroscopeReceiver& operator=(const PyroscopeReceiver&) = delete;

  // Down: the port is closed (connection refused); hanging requests are released first.
  void stop();
  // Up again on the same port; false (and a violation) if it cannot be bound.
  bool start();
  bool running() const;

  void set_mode(Mode mode);
  Mode mode() const;

  std::string url() const;  // "http://127.0.0.1:PORT"
  int port() const;

  // At most kMaxStoredRequests are kept (the count goes on); violations likewise.
  static constexpr size_t kMaxStoredRequests = 10000;
  std::vector<Request> requests() const;
  size_t request_count() const;  // every request, stored or not
  std::vector<std::string> violations() const;
  // Waits until at least `n` requests arrived: false on timeout.
  bool wait_for_requests(size_t n, double timeout_s) const;

  // The labels of an ingest `name`, or nullopt when it does not follow the syntax (the reason
  // in *why when given): app [A-Za-z0-9_.-]+, then ".cpu{", then k=v pairs separated by ',',
  // keys [A-Za-z_][A-Za-z0-9_.]* sorted and unique, values non-empty without '{', '}', ',',
  // '=', whitespace or control characters, then '}'.
  static std::optional<Name> parse_name(const std::string& name, std::string* why = nullptr);
  static std::map<std::string, std::string> name_labels(const std::string& name);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ljprof::test
