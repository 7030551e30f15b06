#include "export/pyroscope.h"

#include "export/curl_api.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <map>
#include <memory>
#include <utility>

namespace ljprof::exporter {

namespace {

// How often a transfer in progress looks at the cancel flag: the bound on how long
// UploadQueue::stop() waits past its deadline for an attempt to end.
constexpr int kCancelPollMs = 50;
// How much of an error response's body is kept for the message (Pyroscope explains a 400 there).
constexpr size_t kMaxErrorBodyBytes = 512;

// ---------------------------------------------------------------------------------------------
// Names

bool is_alnum(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

std::string sanitize_app(const std::string& app) {
  std::string out = app;
  for (char& c : out) {
    unsigned char u = static_cast<unsigned char>(c);
    if (!is_alnum(u) && c != '_' && c != '.' && c != '-') c = '_';
  }
  return out;
}

std::string sanitize_key(const std::string& key) {
  std::string out = key;
  for (char& c : out) {
    if (!is_alnum(static_cast<unsigned char>(c)) && c != '_' && c != '.') c = '_';
  }
  // A key starts with a letter or '_'.
  if (!out.empty() && ((out[0] >= '0' && out[0] <= '9') || out[0] == '.')) out.insert(0, 1, '_');
  return out;
}

std::string sanitize_value(const std::string& value) {
  std::string out = value;
  for (char& c : out) {
    unsigned char u = static_cast<unsigned char>(c);
    // Printable ASCII only: the name's own syntax characters, whitespace, control bytes and
    // non-ASCII bytes (which need not be valid UTF-8) would corrupt or split the key.
    bool printable = u > 0x20 && u < 0x7f;
    if (!printable || c == '{' || c == '}' || c == ',' || c == '=') c = '_';
  }
  return out;
}

// RFC 3986 percent-encoding of everything but the unreserved characters.
std::string percent_encode(const std::string& s) {
  std::string out;
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    if (is_alnum(u) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += c;
    } else {
      out += fmt::format("%{:02X}", u);
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// libcurl plumbing

struct CurlUrlDeleter {
  decltype(CurlApi::url_cleanup) cleanup;
  void operator()(CURLU* u) const { cleanup(u); }
};
struct CurlSlistDeleter {
  decltype(CurlApi::slist_free_all) free_all;
  void operator()(curl_slist* l) const { free_all(l); }
};
using CurlSlistPtr = std::unique_ptr<curl_slist, CurlSlistDeleter>;

// One request on its own multi handle, so that a transfer can be abandoned between polls
// (Sink::cancel) instead of only when libcurl's own timeout fires.
class Transfer {
 public:
  explicit Transfer(const CurlApi& curl)
      : curl_(curl), easy_(curl.easy_init()), multi_(curl.multi_init()) {}
  ~Transfer() {
    if (added_) curl_.multi_remove_handle(multi_, easy_);
    if (easy_) curl_.easy_cleanup(easy_);
    if (multi_) curl_.multi_cleanup(multi_);
  }
  Transfer(const Transfer&) = delete;
  Transfer& operator=(const Transfer&) = delete;

  bool ok() const { return easy_ && multi_; }
  CURL* easy() { return easy_; }

  // Runs the transfer to its end: libcurl's result code, or an error when the multi interface
  // fails or `cancelled` is set.
  Result<CURLcode> run(const std::atomic<bool>& cancelled) {
    if (curl_.multi_add_handle(multi_, easy_) != CURLM_OK)
      return make_error("curl_multi_add_handle failed");
    added_ = true;
    for (;;) {
      int running = 0;
      CURLMcode mc = curl_.multi_perform(multi_, &running);
      if (mc != CURLM_OK) return make_error("curl multi error: {}", curl_.multi_strerror(mc));
      if (running == 0) break;
      if (cancelled.load()) return make_error("cancelled (the upload queue is stopping)");
      mc = curl_.multi_poll(multi_, nullptr, 0, kCancelPollMs, nullptr);
      if (mc != CURLM_OK) return make_error("curl multi error: {}", curl_.multi_strerror(mc));
    }
    int left = 0;
    while (CURLMsg* msg = curl_.multi_info_read(multi_, &left)) {
      if (msg->msg == CURLMSG_DONE && msg->easy_handle == easy_) return msg->data.result;
    }
    return make_error("curl finished without a result");
  }

 private:
  const CurlApi& curl_;
  CURL* easy_;
  CURLM* multi_;
  bool added_ = false;
};

size_t keep_error_body(char* data, size_t size, size_t nmemb, void* user) {
  auto* body = static_cast<std::string*>(user);
  size_t n = size * nmemb;
  if (body->size() < kMaxErrorBodyBytes)
    body->append(data, std::min(n, kMaxErrorBodyBytes - body->size()));
  return n;  // the rest is read and discarded: a short count would fail the transfer
}

// The response body for an error message: one line, bounded.
std::string body_excerpt(const std::string& body) {
  std::string out;
  for (char c : body) {
    unsigned char u = static_cast<unsigned char>(c);
    out += (u < 0x20 || u == 0x7f) ? ' ' : c;
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out.empty() ? out : ": " + out;
}

// A request that cannot succeed whatever the server does (the URL is unusable); every other
// curl error is the network's or the server's weather and may pass.
bool curl_error_is_permanent(CURLcode rc) {
  return rc == CURLE_UNSUPPORTED_PROTOCOL || rc == CURLE_URL_MALFORMAT ||
         rc == CURLE_NOT_BUILT_IN || rc == CURLE_BAD_FUNCTION_ARGUMENT ||
         rc == CURLE_UNKNOWN_OPTION;
}

Delivery classify_status(long status, const std::string& where, const std::string& body) {
  if (status >= 200 && status < 300) return Delivery::success();
  std::string error = fmt::format("{}: HTTP {}{}", where, status, body_excerpt(body));
  // 408/429 and 5xx: the server is overloaded, restarting or behind a failing proxy.
  if (status == 408 || status == 429 || status >= 500) return Delivery::retry(std::move(error));
  return Delivery::reject(std::move(error));
}

// ---------------------------------------------------------------------------------------------
// Options

struct CheckedUrl {
  std::string base;     // what requests go to, without trailing '/'
  std::string display;  // the same without user:password, for messages
};

Result<std::string> url_part(const CurlApi& curl, CURLU* u, CURLUPart part) {
  char* s = nullptr;
  if (curl.url_get(u, part, &s, 0) != CURLUE_OK || s == nullptr) return make_error("missing");
  std::string out = s;
  curl.free(s);
  return out;
}

std::string trim_slashes(std::string s) {
  while (!s.empty() && s.back() == '/') s.pop_back();
  return s;
}

Result<CheckedUrl> check_url(const CurlApi& curl, const std::string& url) {
  std::unique_ptr<CURLU, CurlUrlDeleter> u(curl.url(), CurlUrlDeleter{curl.url_cleanup});
  if (!u) return make_error("pyroscope URL {}: out of memory", url);
  if (CURLUcode rc = curl.url_set(u.get(), CURLUPART_URL, url.c_str(), 0); rc != CURLUE_OK) {
    return make_error("pyroscope URL '{}': {}", url, curl.url_strerror(rc));
  }
  auto part = [&](CURLUPart p) { return url_part(curl, u.get(), p); };
  auto scheme = part(CURLUPART_SCHEME);
  if (!scheme.ok() || (*scheme != "http" && *scheme != "https")) {
    return make_error("pyroscope URL '{}': the scheme must be http or https", url);
  }
  if (!part(CURLUPART_HOST).ok()) return make_error("pyroscope URL '{}': no host", url);
  if (part(CURLUPART_QUERY).ok() || part(CURLUPART_FRAGMENT).ok()) {
    return make_error(
        "pyroscope URL '{}': a query or fragment is not allowed (/ingest is appended)", url);
  }
  curl.url_set(u.get(), CURLUPART_USER, nullptr, 0);
  curl.url_set(u.get(), CURLUPART_PASSWORD, nullptr, 0);
  LJ_ASSIGN_OR_RETURN(std::string display, part(CURLUPART_URL));
  return CheckedUrl{trim_slashes(url), trim_slashes(display)};
}

bool has_control_chars(const std::string& s) {
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) return true;
  }
  return false;
}

Status check_options(const PyroscopeOptions& o) {
  if (!o.bearer_token.empty() && !o.basic_user.empty()) {
    return make_error("pyroscope: a bearer token and basic auth are mutually exclusive");
  }
  if (o.basic_user.empty() && !o.basic_password.empty()) {
    return make_error("pyroscope: a basic auth password needs a user");
  }
  // Header values: a line break would inject headers of its own.
  if (has_control_chars(o.bearer_token))
    return make_error("pyroscope: the bearer token has control characters");
  if (has_control_chars(o.tenant_id))
    return make_error("pyroscope: the tenant id has control characters");
  for (double t : {o.timeout_s, o.connect_timeout_s}) {
    if (!std::isfinite(t) || t <= 0 || t > 86400) {
      return make_error("pyroscope: timeouts must be positive seconds (got {})", t);
    }
  }
  return Ok{};
}

long to_ms(double seconds) {
  return std::max(1L, std::lround(seconds * 1000));
}

// ---------------------------------------------------------------------------------------------
// The sink

class PyroscopeSink final : public Sink {
 public:
  PyroscopeSink(const CurlApi& curl, PyroscopeOptions options, CheckedUrl url)
      : curl_(curl),
        options_(std::move(options)),
        url_(std::move(url)),
        where_("POST " + url_.display + "/ingest") {}

  std::string name() const override { return "pyroscope " + url_.display; }

  Delivery deliver(const IntervalProfile& profile) override {
    // Nothing libcurl, fmt or the allocator throws may leave the module.
    try {
      return attempt(profile);
    } catch (const std::exception& e) {
      return Delivery::retry(fmt::format("{}: {}", where_, e.what()));
    }
  }

  void cancel() override { cancelled_.store(true); }

 private:
  Delivery attempt(const IntervalProfile& profile);
  Status check_profile(const IntervalProfile& profile) const;
  std::string request_url(const IntervalProfile& profile) const;
  CurlSlistPtr headers() const;
  void set_options(CURL* easy, const IntervalProfile& profile, const std::string& url,
                   curl_slist* headers, std::string* body, char* errbuf) const;

  const CurlApi& curl_;
  PyroscopeOptions options_;
  CheckedUrl url_;
  std::string where_;  // "POST http://host:4040/ingest", how messages name the destination
  std::atomic<bool> cancelled_{false};
};

Status PyroscopeSink::check_profile(const IntervalProfile& p) const {
  if (sanitize_app(p.app_name).empty())
    return make_error("{}: the profile has no application name", where_);
  if (p.sample_rate_hz == 0) return make_error("{}: the profile has no sample rate", where_);
  if (p.from_unix_s > p.until_unix_s) {
    return make_error("{}: the profile's interval ends before it starts ({} > {})", where_,
                      p.from_unix_s, p.until_unix_s);
  }
  if (p.pprof_gz.empty()) return make_error("{}: the profile has no pprof data", where_);
  return Ok{};
}

std::string PyroscopeSink::request_url(const IntervalProfile& p) const {
  return fmt::format("{}/ingest?name={}&from={}&until={}&format=pprof&sampleRate={}&spyName=ljprof",
                     url_.base, percent_encode(pyroscope_name(p)), p.from_unix_s, p.until_unix_s,
                     p.sample_rate_hz);
}

CurlSlistPtr PyroscopeSink::headers() const {
  CurlSlistPtr list(nullptr, CurlSlistDeleter{curl_.slist_free_all});
  auto add = [&](const std::string& h) {
    curl_slist* next = curl_.slist_append(list.get(), h.c_str());
    if (next == nullptr) throw std::bad_alloc();
    list.release();
    list.reset(next);
  };
  add("Content-Type: application/octet-stream");
  // libcurl would otherwise wait up to a second for "100 Continue" before sending a large body.
  add("Expect:");
  if (!options_.bearer_token.empty()) add("Authorization: Bearer " + options_.bearer_token);
  if (!options_.tenant_id.empty()) add("X-Scope-OrgID: " + options_.tenant_id);
  return list;
}

void PyroscopeSink::set_options(CURL* easy, const IntervalProfile& p, const std::string& url,
                                curl_slist* headers, std::string* body, char* errbuf) const {
  curl_.easy_setopt(easy, CURLOPT_URL, url.c_str());
  curl_.easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
  // No SIGALRM-based resolver timeouts: the agent is multi-threaded.
  curl_.easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
  curl_.easy_setopt(easy, CURLOPT_TIMEOUT_MS, to_ms(options_.timeout_s));
  curl_.easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, to_ms(options_.connect_timeout_s));
  curl_.easy_setopt(easy, CURLOPT_POST, 1L);
  curl_.easy_setopt(easy, CURLOPT_POSTFIELDS, p.pprof_gz.data());
  curl_.easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(p.pprof_gz.size()));
  curl_.easy_setopt(easy, CURLOPT_HTTPHEADER, headers);
  curl_.easy_setopt(easy, CURLOPT_USERAGENT, "ljprof/" LJPROF_VERSION);
  if (!options_.basic_user.empty()) {
    curl_.easy_setopt(easy, CURLOPT_HTTPAUTH, static_cast<long>(CURLAUTH_BASIC));
    curl_.easy_setopt(easy, CURLOPT_USERNAME, options_.basic_user.c_str());
    curl_.easy_setopt(easy, CURLOPT_PASSWORD, options_.basic_password.c_str());
  }
  curl_.easy_setopt(easy, CURLOPT_WRITEFUNCTION, keep_error_body);
  curl_.easy_setopt(easy, CURLOPT_WRITEDATA, body);
  curl_.easy_setopt(easy, CURLOPT_ERRORBUFFER, errbuf);
}

Delivery PyroscopeSink::attempt(const IntervalProfile& profile) {
  if (cancelled_.load())
    return Delivery::retry(where_ + ": cancelled (the upload queue is stopping)");
  if (Status s = check_profile(profile); !s.ok()) return Delivery::reject(s.message());
  Transfer transfer(curl_);
  if (!transfer.ok()) return Delivery::retry(where_ + ": cannot create a curl handle");
  std::string url = request_url(profile);
  CurlSlistPtr header_list = headers();
  std::string body;
  char errbuf[CURL_ERROR_SIZE] = {};
  set_options(transfer.easy(), profile, url, header_list.get(), &body, errbuf);

  Result<CURLcode> rc = transfer.run(cancelled_);
  if (!rc.ok()) return Delivery::retry(fmt::format("{}: {}", where_, rc.message()));
  if (*rc != CURLE_OK) {
    std::string error = fmt::format("{}: {} (curl error {}{}{})", where_, curl_.easy_strerror(*rc),
                                    static_cast<int>(*rc), errbuf[0] ? ": " : "", errbuf);
    return curl_error_is_permanent(*rc) ? Delivery::reject(std::move(error))
                                        : Delivery::retry(std::move(error));
  }
  long status = 0;
  curl_.easy_getinfo(transfer.easy(), CURLINFO_RESPONSE_CODE, &status);
  return classify_status(status, where_, body);
}

}  // namespace

std::string pyroscope_name(const IntervalProfile& profile) {
  std::map<std::string, std::string> labels;
  for (const auto& [key, value] : profile.labels) {
    std::string k = sanitize_key(key);
    std::string v = sanitize_value(value);
    // Pyroscope reserves __name__ (it names the profile type); an empty value is no label.
    if (k.empty() || v.empty() || k == "__name__") continue;
    labels.emplace(std::move(k), std::move(v));
  }
  std::string out = sanitize_app(profile.app_name) + "." + profile.kind + "{";
  bool first = true;
  for (const auto& [k, v] : labels) {
    if (!first) out += ',';
    first = false;
    out += k + "=" + v;
  }
  return out + "}";
}

Result<std::unique_ptr<Sink>> make_pyroscope_sink(PyroscopeOptions options) {
  try {
    LJ_TRY(check_options(options));
    auto curl = curl_api();
    if (!curl.ok()) return make_error("pyroscope: {}", curl.message());
    LJ_ASSIGN_OR_RETURN(CheckedUrl url, check_url(**curl, options.url));
    return std::unique_ptr<Sink>(
        std::make_unique<PyroscopeSink>(**curl, std::move(options), std::move(url)));
  } catch (const std::exception& e) {
    return make_error("pyroscope: {}", e.what());
  }
}

}  // namespace ljprof::exporter
