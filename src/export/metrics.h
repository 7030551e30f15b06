// export/metrics.h: the Prometheus metrics page of `ljprof agent` — the text exposition format
// (0.0.4) and the small HTTP server that serves it on GET /metrics.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"

namespace ljprof::exporter {

enum class MetricType { Counter, Gauge };

struct MetricFamily {
  std::string name;  // full Prometheus name, e.g. "ljprof_samples_total"
  std::string help;  // empty: no # HELP line
  MetricType type;
  struct Point {
    std::vector<std::pair<std::string, std::string>> labels;  // (name, value), in output order
    double value;
  };
  std::vector<Point> points;  // a family without points is left out of the page
};

// The families in Prometheus text exposition format 0.0.4: per family `# HELP` (\ and newline
// escaped), `# TYPE`, then one line per point (label values with \, " and newline escaped;
// integral values without exponent; NaN, +Inf, -Inf). Help text and label values are otherwise
// written as printable text (common/printable.h: a control or a byte that is not UTF-8 as \xNN,
// whose backslash is then escaped as any other): Prometheus rejects the whole page over one bad
// byte, and label values come from other processes (comm, paths). A metric name not matching
// [a-zA-Z_:][a-zA-Z0-9_:]*, a repeated family name, or a point with a label name not matching
// [a-zA-Z_][a-zA-Z0-9_]* (or reserved "__" prefix) is a programming error: it is left out (the rest
// of the page stays valid) and asserts in debug builds.
std::string render_prometheus(const std::vector<MetricFamily>& families);

// A Prometheus histogram: cumulative counts per upper bound, then +Inf (= count).
struct Histogram {
  std::string name;  // without _bucket/_sum/_count, e.g. "ljprof_loop_stall_seconds"
  std::string help;
  std::vector<double> bounds;     // upper bounds, ascending
  std::vector<uint64_t> buckets;  // per bound: observations <= it (cumulative), same size
  double sum = 0;
  uint64_t count = 0;
  void observe(double value);
};
// `histograms` rendered after `families` as `# TYPE NAME histogram` with NAME_bucket{le=...},
// NAME_sum and NAME_count (a name repeated from `families` is left out, as render_prometheus
// leaves out a repeated family).
std::string render_prometheus(const std::vector<MetricFamily>& families,
                              const std::vector<Histogram>& histograms);

// Serves GET /metrics (Content-Type: text/plain; version=0.0.4; charset=utf-8) and 404 for
// every other path, on one thread of its own. Request handling is bounded: each read, write and
// idle keep-alive wait ends after a second, and a slow or idle client holds only its own
// connection, never a thread, so it neither delays other scrapes nor makes the server grow.
class MetricsServer {
 public:
  // `address` is "HOST:PORT": HOST an IPv4 address, a name, or a bracketed IPv6 address
  // ("[::1]:9100"); PORT 0 binds an ephemeral port (see port()). `render` is called on the
  // server's thread for each request: the caller makes it safe to call from there. An error names
  // the address and why (parse error, port range, bind failure such as a port in use).
  static Result<std::unique_ptr<MetricsServer>> start(const std::string& address,
                                                      std::function<std::string()> render);

  uint16_t port() const;  // the bound port

  // Stops accepting, then joins the server thread; a connected client delays this by at most
  // the keep-alive/read timeout (about a second).
  ~MetricsServer();

  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

 private:
  struct Impl;
  explicit MetricsServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ljprof::exporter
