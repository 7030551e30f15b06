// export/pyroscope.h: pushes each IntervalProfile to Pyroscope's HTTP ingest API (also served by
// Grafana Cloud Profiles, Grafana Alloy's pyroscope.receive_http and Pyroscope-compatible
// backends): POST {url}/ingest?name=APP.cpu{LABELS}&from=&until=&format=pprof&sampleRate=
// &spyName=ljprof with the gzip-compressed pprof as the body.
#pragma once

#include <memory>
#include <string>

#include "common/result.h"
#include "export/interval_profile.h"
#include "export/sink.h"

namespace ljprof::exporter {

struct PyroscopeOptions {
  // http:// or https:// base URL, e.g. "http://pyroscope:4040"; a path prefix is kept.
  std::string url;
  std::string bearer_token;                // "Authorization: Bearer TOKEN" when set
  std::string basic_user, basic_password;  // HTTP basic auth when basic_user is set
  std::string tenant_id;                   // "X-Scope-OrgID" (multi-tenant Pyroscope) when set
  double timeout_s = 10;                   // the whole attempt, connecting included
  double connect_timeout_s = 3;
};

// Checks the options (an http/https URL with a host and no query or fragment; at most one kind
// of authentication; no line breaks in header values; positive timeouts) and returns the sink.
// Deliveries: 2xx is success; connection failures, timeouts, HTTP 5xx, 408 and 429 are
// retryable; any other status is a rejection. Each attempt is bounded by the timeouts.
Result<std::unique_ptr<Sink>> make_pyroscope_sink(PyroscopeOptions options);

// The ingest `name`: "<app>.cpu{k=v,...}", keys sorted. Pyroscope's own rules: an app name keeps
// [A-Za-z0-9_.-], a key matches [A-Za-z_][A-Za-z0-9_.]*, a value keeps printable ASCII except
// '{', '}', ',', '=' and space; every other byte becomes '_' (a key starting with a digit or '.'
// gets a leading '_'). Labels with an empty key or value, and the reserved key "__name__", are left
// out; when two keys sanitize to the same key the first (in sorted order) wins.
std::string pyroscope_name(const IntervalProfile& profile);

}  // namespace ljprof::exporter
