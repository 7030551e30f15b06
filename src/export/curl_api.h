// export/curl_api.h: libcurl, loaded when the first sink that uploads is made (dlopen of the
// libcurl.so.4 the -dev package's headers describe), not linked. libcurl brings the TLS, LDAP,
// SSH, RTMP and Kerberos libraries of its build along, ~3.8 MiB resident in every process that
// loads them (a program linked with ljprof's libraries: 16.9 MiB with libcurl, 13.1 without,
// 2026-12-05) — memory `ljprof record`, `core` and an agent that only writes files never use.
// Every function the sinks call is listed once (LJPROF_CURL_FUNCTIONS) and typed from the
// header's own declaration (decltype), so a signature cannot drift from libcurl's.
#pragma once

#include <curl/curl.h>

#include "common/result.h"

namespace ljprof::exporter {

// clang-format off (it joins one-name entries into lines and is not stable on them)
#define LJPROF_CURL_FUNCTIONS(X) \
  X(global_init)                 \
  X(easy_init)                   \
  X(easy_setopt)                 \
  X(easy_getinfo)                \
  X(easy_cleanup)                \
  X(easy_strerror)               \
  X(multi_init)                  \
  X(multi_add_handle)            \
  X(multi_remove_handle)         \
  X(multi_perform)               \
  X(multi_poll)                  \
  X(multi_info_read)             \
  X(multi_cleanup)               \
  X(multi_strerror)              \
  X(slist_append)                \
  X(slist_free_all)              \
  X(url)                         \
  X(url_set)                     \
  X(url_get)                     \
  X(url_cleanup)                 \
  X(url_strerror)                \
  X(free)
// clang-format on

struct CurlApi {
#define LJPROF_CURL_MEMBER(name) decltype(&::curl_##name) name = nullptr;
  LJPROF_CURL_FUNCTIONS(LJPROF_CURL_MEMBER)
#undef LJPROF_CURL_MEMBER
};

// libcurl's functions, loaded and curl_global_init run once (thread-safe); the error names the
// library and the loader's reason (not installed, a symbol missing from an older libcurl).
Result<const CurlApi*> curl_api();

}  // namespace ljprof::exporter
