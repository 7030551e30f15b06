#include "cfi/table_cache.h"

#include <fcntl.h>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>

namespace ljprof::cfi {

namespace {

constexpr char kMagic[8] = {'L', 'J', 'P', 'C', 'F', 'I', 0, 4};

// This program's GNU build-id, from its own PT_NOTE in memory (the first object
// dl_iterate_phdr reports is the main program), as lowercase hex; "" when it has none.
int note_build_id(dl_phdr_info* info, size_t, void* out) {
  auto* hex = static_cast<std::string*>(out);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE) continue;
    const auto* p = reinterpret_cast<const uint8_t*>(info->dlpi_addr + ph.p_vaddr);
    size_t at = 0;
    while (at + sizeof(ElfW(Nhdr)) <= ph.p_memsz) {
      ElfW(Nhdr) n;
      std::memcpy(&n, p + at, sizeof(n));
      const size_t name_at = at + sizeof(n);
      const size_t desc_at = name_at + ((n.n_namesz + 3) & ~size_t{3});
      const size_t next = desc_at + ((n.n_descsz + 3) & ~size_t{3});
      if (next > ph.p_memsz) break;
      if (n.n_type == NT_GNU_BUILD_ID && n.n_namesz == 4 &&
          std::memcmp(p + name_at, "GNU", 4) == 0) {
        for (size_t k = 0; k < n.n_descsz; ++k) *hex += fmt::format("{:02x}", p[desc_at + k]);
        return 1;
      }
      at = next;
    }
  }
  return 1;  // only the main program
}

std::string program_build_id() {
  std::string hex;
  dl_iterate_phdr(note_build_id, &hex);
  return hex;
}

// What, besides its build-id, tells two files apart whose tables differ: `strip` and `objcopy
// --strip-debug` keep the build-id but drop .symtab, from which the LuaJIT VM's interval and its
// unwind overlays are found (a stripped tarantool's table has other rows than the original's). A
// 64-bit FNV-1a of every section's name, type, flags, address and size, as 16 hex digits.
std::string file_shape(const elf::ElfFile& file) {
  uint64_t h = 0xcbf29ce484222325ULL;
  auto mix = [&h](const void* data, size_t len) {
    for (size_t i = 0; i < len; ++i) {
      h ^= static_cast<const uint8_t*>(data)[i];
      h *= 0x100000001b3ULL;
    }
  };
  for (const elf::Section& sec : file.sections()) {
    mix(sec.name.data(), sec.name.size());
    for (uint64_t v : {uint64_t{sec.type}, uint64_t{sec.flags}, sec.addr, sec.size}) {
      mix(&v, sizeof v);
    }
  }
  return fmt::format("{:016x}", h);
}

struct Header {
  std::string program;
  std::string file;
  uint8_t arch = 0;
  std::string shape;  // file_shape
};

Header header_of(const std::string& program, const elf::ElfFile& file) {
  return {program, *file.build_id(), static_cast<uint8_t>(file.arch()), file_shape(file)};
}

std::vector<uint8_t> header_bytes(const Header& h) {
  std::vector<uint8_t> out(kMagic, kMagic + sizeof(kMagic));
  for (const std::string* s : {&h.program, &h.file, &h.shape}) {
    out.push_back(static_cast<uint8_t>(s->size()));
    out.insert(out.end(), s->begin(), s->end());
  }
  out.push_back(h.arch);
  return out;
}

Result<std::vector<uint8_t>> read_owned_file(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return make_error("{}: fstat: {}", path, std::strerror(errno));
  if (!S_ISREG(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 022) != 0) {
    return make_error("{}: not a regular file of this user writable by no one else", path);
  }
  if (static_cast<uint64_t>(st.st_size) > TableCache::kMaxFileBytes) {
    return make_error("{}: {} bytes, more than the cap {}", path, st.st_size,
                      TableCache::kMaxFileBytes);
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return make_error("{}: read failed at {}", path, done);
    done += static_cast<size_t>(n);
  }
  return bytes;
}

Status write_all(int fd, std::span<const uint8_t> bytes, const std::string& path) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return make_error("{}: write: {}", path, std::strerror(errno));
    done += static_cast<size_t>(n);
  }
  return Ok{};
}

}  // namespace

std::string default_table_cache_dir() {
  if (const char* d = std::getenv("LJPROF_CACHE_DIR"); d != nullptr && *d != 0) return d;
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d != nullptr && *d == '/') {
    return std::string(d) + "/ljprof";
  }
  if (const char* d = std::getenv("HOME"); d != nullptr && *d == '/') {
    return std::string(d) + "/.cache/ljprof";
  }
  return "";
}

TableCache::TableCache(std::string dir)
    : dir_(std::move(dir)), program_build_id_(program_build_id()) {}

std::string TableCache::path_of(const elf::ElfFile& file) const {
  const std::optional<std::string>& id = file.build_id();
  if (!enabled() || !id || id->empty() || id->size() > 128) return "";
  return fmt::format("{}/{}-{}-{}-{}.cfi", dir_, *id, elf::arch_name(file.arch()), file_shape(file),
                     program_build_id_.substr(0, 16));
}

std::optional<UnwindTable> TableCache::load(const elf::ElfFile& file, std::string* why) {
  const std::string path = path_of(file);
  if (path.empty()) return std::nullopt;
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    ++counts_.misses;
    return std::nullopt;
  }
  auto bytes = read_owned_file(fd, path);
  ::close(fd);
  auto reject = [&](const std::string& message) -> std::optional<UnwindTable> {
    ++counts_.rejected;
    note_problem(message);
    if (why != nullptr) *why = message;
    return std::nullopt;
  };
  if (!bytes.ok()) return reject(bytes.message());
  const std::vector<uint8_t> want = header_bytes(header_of(program_build_id_, file));
  if (bytes->size() < want.size() || !std::equal(want.begin(), want.end(), bytes->begin())) {
    return reject(path + ": header is not this program's for this file");
  }
  auto table = UnwindTable::from_bytes(std::span<const uint8_t>(*bytes).subspan(want.size()));
  if (!table.ok()) return reject(path + ": " + table.message());
  if (table->arch() != file.arch()) return reject(path + ": table of another architecture");
  ++counts_.hits;
  ::utimensat(AT_FDCWD, path.c_str(), nullptr, AT_SYMLINK_NOFOLLOW);  // read now (prune)
  return std::move(*table);
}

void TableCache::note_problem(const std::string& message) {
  if (first_problem_.empty()) first_problem_ = message;
}

Status TableCache::store_failed(std::string message) {
  ++counts_.store_failed;
  note_problem(message);
  return Error{std::move(message)};
}

void TableCache::prune() {
  pruned_ = true;
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto cutoff = fs::file_time_type::clock::now() - std::chrono::hours(24 * kPruneAfterDays);
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.ends_with(".cfi") && name.find(".cfi.tmp.") == std::string::npos) continue;
    std::error_code file_ec;
    if (!it->is_regular_file(file_ec) || it->last_write_time(file_ec) >= cutoff || file_ec)
      continue;
    if (fs::remove(it->path(), file_ec)) ++counts_.pruned;
  }
}

Status TableCache::store(const elf::ElfFile& file, const UnwindTable& table) {
  const std::string path = path_of(file);
  if (path.empty()) return Ok{};
  if (!pruned_) prune();
  std::error_code ec;
  if (!std::filesystem::is_directory(dir_, ec)) {
    std::filesystem::create_directories(dir_, ec);
    if (ec) return store_failed(fmt::format("{}: cannot create: {}", dir_, ec.message()));
    ::chmod(dir_.c_str(), 0700);
  }
  const std::vector<uint8_t> header = header_bytes(header_of(program_build_id_, file));
  const std::vector<uint8_t> body = table.to_bytes();
  const std::string tmp = fmt::format("{}.tmp.{}.{:x}", path, ::getpid(), std::random_device{}());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return store_failed(fmt::format("{}: cannot create: {}", tmp, std::strerror(errno)));
  Status written = write_all(fd, header, tmp);
  if (written.ok()) written = write_all(fd, body, tmp);
  ::close(fd);
  if (written.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    written = make_error("{}: rename to {}: {}", tmp, path, std::strerror(errno));
  }
  if (!written.ok()) {
    ::unlink(tmp.c_str());
    return store_failed(written.message());
  }
  ++counts_.stored;
  return Ok{};
}

}  // namespace ljprof::cfi
