// common/path.h: path helpers every stage shares.
#pragma once

#include <string>
#include <string_view>

namespace ljprof {

// The last component of `path` ("/usr/bin/tarantool" -> "tarantool"); `path` itself when it
// has no '/'.
inline std::string basename_of(std::string_view path) {
  const size_t slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

}  // namespace ljprof
