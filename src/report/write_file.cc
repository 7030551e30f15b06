#include "report/write_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

namespace ljprof::report {

Status write_file(const std::string& path, std::string_view bytes) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(fopen(path.c_str(), "wb"), &fclose);
  if (!f) return make_error("{}: cannot create: {}", path, strerror(errno));
  if (!bytes.empty() && fwrite(bytes.data(), 1, bytes.size(), f.get()) != bytes.size()) {
    return make_error("{}: write failed: {}", path, strerror(errno));
  }
  if (fclose(f.release()) != 0) return make_error("{}: write failed: {}", path, strerror(errno));
  return Ok{};
}

}  // namespace ljprof::report
