#include "proc/identity.h"

#include <fmt/format.h>
#include <unistd.h>

#include <fstream>
#include <iterator>

namespace ljprof::proc {

std::string read_comm(uint32_t pid) {
  std::ifstream in(fmt::format("/proc/{}/comm", pid));
  std::string comm;
  std::getline(in, comm);
  return comm;
}

std::string executable_path(uint32_t pid) {
  char buf[4096];
  const ssize_t n = ::readlink(fmt::format("/proc/{}/exe", pid).c_str(), buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

std::string executable_name(uint32_t pid) {
  std::string path = executable_path(pid);
  if (path.empty()) return "";
  // An executable replaced on disk since the process started (a package upgrade).
  constexpr std::string_view kDeleted = " (deleted)";
  if (path.ends_with(kDeleted)) path.resize(path.size() - kDeleted.size());
  return path.substr(path.rfind('/') + 1);
}

std::string environment_value(uint32_t pid, std::initializer_list<std::string_view> names) {
  std::ifstream in(fmt::format("/proc/{}/environ", pid), std::ios::binary);
  std::string env(kMaxEnvironBytes, '\0');
  in.read(env.data(), static_cast<std::streamsize>(env.size()));
  env.resize(static_cast<size_t>(in.gcount()));
  for (std::string_view name : names) {
    size_t pos = 0;
    while (pos < env.size()) {
      size_t end = env.find('\0', pos);
      if (end == std::string::npos) end = env.size();
      std::string_view entry(env.data() + pos, end - pos);
      if (entry.size() > name.size() && entry.starts_with(name) && entry[name.size()] == '=') {
        return std::string(entry.substr(name.size() + 1));
      }
      pos = end + 1;
    }
  }
  return "";
}

bool in_cgroup(uint32_t pid, const std::string& prefix) {
  if (prefix.empty()) return true;
  std::ifstream in(fmt::format("/proc/{}/cgroup", pid));
  std::string line;
  // "ID:CONTROLLERS:PATH" per hierarchy; cgroup v2 has the one line "0::PATH" (cgroups(7)).
  while (std::getline(in, line)) {
    const size_t colon = line.find(':', line.find(':') + 1);
    if (colon == std::string::npos) continue;
    const std::string_view path = std::string_view(line).substr(colon + 1);
    if (!path.starts_with(prefix)) continue;
    if (path.size() == prefix.size() || prefix.back() == '/' || path[prefix.size()] == '/') {
      return true;
    }
  }
  return false;
}

}  // namespace ljprof::proc
