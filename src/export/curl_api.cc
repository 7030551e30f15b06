#include "export/curl_api.h"

#include <dlfcn.h>

#include <mutex>
#include <string>

namespace ljprof::exporter {

namespace {

// Debian's libcurl4 (OpenSSL) and libcurl3-gnutls both install this soname; 4 has been
// libcurl's ABI since 2006.
constexpr const char* kLibcurl = "libcurl.so.4";

Result<CurlApi> load() {
  void* lib = ::dlopen(kLibcurl, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = ::dlerror();
    return make_error("{} cannot be loaded (install Debian's libcurl4 for uploads): {}", kLibcurl,
                      why != nullptr ? why : "unknown reason");
  }
  // The library stays loaded for the process's life: sinks hold its handles until exit.
  CurlApi api;
#define LJPROF_CURL_RESOLVE(name)                                                              \
  api.name = reinterpret_cast<decltype(api.name)>(::dlsym(lib, "curl_" #name));                \
  if (api.name == nullptr) {                                                                   \
    return make_error("{} has no curl_" #name " (libcurl 7.85 or later is needed)", kLibcurl); \
  }
  LJPROF_CURL_FUNCTIONS(LJPROF_CURL_RESOLVE)
#undef LJPROF_CURL_RESOLVE
  // curl_global_init is not thread-safe and must run before any other libcurl call.
  if (CURLcode rc = api.global_init(CURL_GLOBAL_DEFAULT); rc != CURLE_OK) {
    return make_error("libcurl initialization failed: {}", api.easy_strerror(rc));
  }
  return api;
}

}  // namespace

Result<const CurlApi*> curl_api() {
  static std::once_flag once;
  static Result<CurlApi> api = make_error("libcurl not loaded");
  std::call_once(once, [] { api = load(); });
  if (!api.ok()) return api.error();
  return &*api;
}

}  // namespace ljprof::exporter
