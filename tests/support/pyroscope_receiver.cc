#include "support/pyroscope_receiver.h"

#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <set>
#include <thread>
#include <utility>

namespace ljprof::test {

namespace {

constexpr size_t kMaxViolations = 1000;
// Bodies above this are refused by the server (413): a bound on what one request can hold.
constexpr size_t kMaxBodyBytes = 64u << 20;
// Hung requests each hold a worker thread; enough that a test's retries never queue behind them.
constexpr size_t kServerThreads = 32;

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_alpha(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

bool is_unsigned_int(const std::string& s) {
  return !s.empty() && s.size() <= 18 && std::all_of(s.begin(), s.end(), is_digit);
}

bool valid_app(const std::string& app) {
  return !app.empty() && std::all_of(app.begin(), app.end(), [](char c) {
    return is_alpha(c) || is_digit(c) || c == '_' || c == '.' || c == '-';
  });
}

bool valid_key(const std::string& k) {
  if (k.empty() || !(is_alpha(k[0]) || k[0] == '_')) return false;
  return std::all_of(k.begin(), k.end(),
                     [](char c) { return is_alpha(c) || is_digit(c) || c == '_' || c == '.'; });
}

bool valid_value(const std::string& v) {
  return !v.empty() && std::all_of(v.begin(), v.end(), [](char c) {
    unsigned char u = static_cast<unsigned char>(c);
    return u > 0x20 && u != 0x7f && c != '{' && c != '}' && c != ',' && c != '=';
  });
}

std::string lower(std::string s) {
  for (char& c : s) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return s;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    size_t end = s.find(sep, start);
    out.push_back(s.substr(start, end - start));
    if (end == std::string::npos) return out;
    start = end + 1;
  }
}

// Every way `r` breaks the ingest contract.
std::vector<std::string> check_request(const PyroscopeReceiver::Request& r) {
  std::vector<std::string> bad;
  if (r.method != "POST") bad.push_back("method " + r.method + ", not POST");
  if (r.path != "/ingest") bad.push_back("path " + r.path + ", not /ingest");
  static const std::set<std::string> expected = {"name",   "from",       "until",
                                                 "format", "sampleRate", "spyName"};
  for (const std::string& key : expected) {
    if (r.params.count(key) != 1)
      bad.push_back(fmt::format("parameter {} given {} times", key, r.params.count(key)));
  }
  for (const auto& [key, value] : r.params) {
    if (!expected.count(key)) bad.push_back("unexpected parameter " + key + "=" + value);
  }
  if (r.param("format") != "pprof") bad.push_back("format=" + r.param("format") + ", not pprof");
  if (r.param("spyName") != "ljprof")
    bad.push_back("spyName=" + r.param("spyName") + ", not ljprof");
  const std::string rate = r.param("sampleRate");
  if (!is_unsigned_int(rate) || std::stoll(rate) <= 0)
    bad.push_back("sampleRate=" + rate + " is not a positive integer");
  const std::string from = r.param("from"), until = r.param("until");
  if (!is_unsigned_int(from) || !is_unsigned_int(until)) {
    bad.push_back("from=" + from + " until=" + until + " are not unix seconds");
  } else if (std::stoll(from) > std::stoll(until)) {
    bad.push_back("from=" + from + " is after until=" + until);
  }
  std::string why;
  if (!PyroscopeReceiver::parse_name(r.param("name"), &why))
    bad.push_back("name '" + r.param("name") + "': " + why);
  if (r.body.size() < 2 || static_cast<unsigned char>(r.body[0]) != 0x1f ||
      static_cast<unsigned char>(r.body[1]) != 0x8b) {
    bad.push_back(fmt::format("body ({} bytes) is not gzip", r.body.size()));
  }
  if (r.header("content-type") != "application/octet-stream") {
    bad.push_back("Content-Type '" + r.header("content-type") + "', not application/octet-stream");
  }
  return bad;
}

}  // namespace

std::string PyroscopeReceiver::Request::param(const std::string& key) const {
  auto it = params.find(key);
  return it == params.end() ? "" : it->second;
}

std::string PyroscopeReceiver::Request::header(const std::string& name) const {
  auto it = headers.find(lower(name));
  return it == headers.end() ? "" : it->second;
}

struct PyroscopeReceiver::Impl {
  mutable std::mutex mutex;
  mutable std::condition_variable changed;  // a request arrived, the mode changed, releasing
  Mode mode = Mode::Up;
  bool releasing = false;  // stop(): hung handlers must return
  std::vector<Request> requests;
  size_t request_count = 0;
  std::vector<std::string> violations;
  int port = 0;

  std::mutex control;  // start()/stop()
  std::unique_ptr<httplib::Server> server;
  std::thread thread;

  void violation(std::string what) {
    if (violations.size() < kMaxViolations) violations.push_back(std::move(what));
  }

  void handle(const httplib::Request& req, httplib::Response& res);
  int answer(std::unique_lock<std::mutex>& lock, httplib::Response& res);
  bool start();
  void stop();
};

void PyroscopeReceiver::Impl::handle(const httplib::Request& req, httplib::Response& res) {
  Request r;
  r.method = req.method;
  r.path = req.path;
  r.target = req.target;
  r.params.insert(req.params.begin(), req.params.end());
  for (const auto& [name, value] : req.headers) r.headers[lower(name)] = value;
  r.body = req.body;
  r.arrived = std::chrono::steady_clock::now();
  std::vector<std::string> bad = check_request(r);

  std::unique_lock lock(mutex);
  size_t index = request_count++;
  for (const std::string& b : bad) violation(fmt::format("request #{}: {}", index, b));
  if (requests.size() < kMaxStoredRequests) requests.push_back(std::move(r));
  changed.notify_all();
  int status = answer(lock, res);
  if (index < requests.size()) requests[index].status = status;
}

int PyroscopeReceiver::Impl::answer(std::unique_lock<std::mutex>& lock, httplib::Response& res) {
  if (mode == Mode::Hang) {
    changed.wait(lock, [&] { return mode != Mode::Hang || releasing; });
    // The client gave up long ago; what is written here goes nowhere.
    res.status = 503;
    return 0;
  }
  switch (mode) {
    case Mode::Up:
      res.status = 200;
      break;
    case Mode::Refuse5xx:
      res.status = 503;
      res.set_content("receiver: unavailable (test mode)", "text/plain");
      break;
    default:
      res.status = 400;
      res.set_content("receiver: bad profile (test mode)", "text/plain");
      break;
  }
  return res.status;
}

bool PyroscopeReceiver::Impl::start() {
  std::lock_guard control_lock(control);
  if (server) return true;
  auto s = std::make_unique<httplib::Server>();
  s->new_task_queue = [] { return new httplib::ThreadPool(kServerThreads); };
  s->set_payload_max_length(kMaxBodyBytes);
  auto handler = [this](const httplib::Request& req, httplib::Response& res) {
    try {
      handle(req, res);
    } catch (const std::exception& e) {
      std::lock_guard lock(mutex);
      violation(std::string("receiver failed: ") + e.what());
      res.status = 500;
    }
  };
  // Every method and path reaches the handler, so a wrong one is recorded, not just 404'd.
  s->Get(".*", handler).Post(".*", handler).Put(".*", handler).Patch(".*", handler);
  s->Delete(".*", handler).Options(".*", handler);
  int bound = port == 0 ? s->bind_to_any_port("127.0.0.1")
                        : (s->bind_to_port("127.0.0.1", port) ? port : -1);
  if (bound <= 0) {
    std::lock_guard lock(mutex);
    violation(fmt::format("receiver: cannot bind 127.0.0.1:{}", port));
    return false;
  }
  port = bound;
  httplib::Server* raw = s.get();
  thread = std::thread([raw] { raw->listen_after_bind(); });
  // Server::stop() only acts on a running server: wait until it is, so that a stop() right
  // after start() cannot leave the listener behind.
  for (int ms = 0; !raw->is_running() && ms < 5000; ++ms) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  server = std::move(s);
  if (raw->is_running()) return true;
  std::lock_guard lock(mutex);
  violation("receiver: the listener did not start");
  return false;
}

void PyroscopeReceiver::Impl::stop() {
  std::lock_guard control_lock(control);
  if (!server) return;
  {
    std::lock_guard lock(mutex);
    releasing = true;
    changed.notify_all();
  }
  server->stop();
  thread.join();  // the listener joins its workers, hung ones included (released above)
  server.reset();
  std::lock_guard lock(mutex);
  releasing = false;
}

PyroscopeReceiver::PyroscopeReceiver() : impl_(std::make_unique<Impl>()) {
  impl_->start();
}

PyroscopeReceiver::~PyroscopeReceiver() {
  impl_->stop();
}

void PyroscopeReceiver::stop() {
  impl_->stop();
}

bool PyroscopeReceiver::start() {
  return impl_->start();
}

bool PyroscopeReceiver::running() const {
  std::lock_guard lock(impl_->control);
  return impl_->server != nullptr;
}

void PyroscopeReceiver::set_mode(Mode mode) {
  std::lock_guard lock(impl_->mutex);
  impl_->mode = mode;
  impl_->changed.notify_all();
}

PyroscopeReceiver::Mode PyroscopeReceiver::mode() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->mode;
}

int PyroscopeReceiver::port() const {
  std::lock_guard lock(impl_->control);
  return impl_->port;
}

std::string PyroscopeReceiver::url() const {
  return fmt::format("http://127.0.0.1:{}", port());
}

std::vector<PyroscopeReceiver::Request> PyroscopeReceiver::requests() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->requests;
}

size_t PyroscopeReceiver::request_count() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->request_count;
}

std::vector<std::string> PyroscopeReceiver::violations() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->violations;
}

bool PyroscopeReceiver::wait_for_requests(size_t n, double timeout_s) const {
  std::unique_lock lock(impl_->mutex);
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                      std::chrono::duration<double>(timeout_s));
  return impl_->changed.wait_until(lock, deadline, [&] { return impl_->request_count >= n; });
}

std::optional<PyroscopeReceiver::Name> PyroscopeReceiver::parse_name(const std::string& name,
                                                                     std::string* why) {
  auto fail = [&](std::string reason) -> std::optional<Name> {
    if (why) *why = std::move(reason);
    return std::nullopt;
  };
  size_t open = name.find('{');
  if (open == std::string::npos || name.back() != '}') return fail("not APP.KIND{LABELS}");
  std::string app = name.substr(0, open);
  // The kinds the agent sends: Pyroscope takes the profile type from the pprof sample type;
  // the suffix names it for people reading the ingest log.
  Name out;
  for (const char* kind : {"cpu", "wall"}) {
    const std::string suffix = std::string(".") + kind;
    if (app.size() > suffix.size() &&
        app.compare(app.size() - suffix.size(), suffix.size(), suffix) == 0) {
      out.kind = kind;
      out.app = app.substr(0, app.size() - suffix.size());
    }
  }
  if (out.kind.empty()) return fail("the app name does not end in .cpu or .wall");
  if (!valid_app(out.app)) return fail("app name '" + out.app + "' is not [A-Za-z0-9_.-]+");
  std::string labels = name.substr(open + 1, name.size() - open - 2);
  if (labels.empty()) return out;
  std::string previous;
  for (const std::string& pair : split(labels, ',')) {
    std::vector<std::string> kv = split(pair, '=');
    if (kv.size() != 2) return fail("label '" + pair + "' is not k=v");
    if (!valid_key(kv[0])) return fail("label key '" + kv[0] + "' is not [A-Za-z_][A-Za-z0-9_.]*");
    if (!valid_value(kv[1]))
      return fail("label value '" + kv[1] + "' of " + kv[0] +
                  " is empty or has a forbidden character");
    if (!previous.empty() && kv[0] <= previous)
      return fail("label keys not sorted or repeated at " + kv[0]);
    previous = kv[0];
    out.labels[kv[0]] = kv[1];
  }
  return out;
}

std::map<std::string, std::string> PyroscopeReceiver::name_labels(const std::string& name) {
  std::optional<Name> parsed = parse_name(name);
  return parsed ? parsed->labels : std::map<std::string, std::string>{};
}

}  // namespace ljprof::test
