#include "export/out_dir.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <exception>
#include <filesystem>
#include <system_error>
#include <utility>
#include <vector>

namespace ljprof::exporter {

namespace fs = std::filesystem;

namespace {

// Temporary files: ".ljprof-tmp-<writer pid>-<n>-<final name>". The leading dot hides them
// from readers and from is_out_dir_file_name(); the pid tells a later sink whether the writer
// is gone (its file is then garbage).
constexpr const char* kTempPrefix = ".ljprof-tmp-";
constexpr const char* kSuffix = ".pb.gz";
constexpr size_t kMaxAppBytes = 64;
// How many ".N" variants of a taken name are tried before giving up.
constexpr int kMaxNameAttempts = 1000;

std::atomic<uint64_t> temp_counter{0};

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

bool all_digits(const std::string& s, size_t from, size_t n) {
  for (size_t i = from; i < from + n; ++i) {
    if (!is_digit(s[i])) return false;
  }
  return true;
}

std::string app_for_file_name(const std::string& app) {
  std::string out = app.substr(0, kMaxAppBytes);
  for (char& c : out) {
    bool keep = is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                c == '.' || c == '-';
    if (!keep) c = '_';
  }
  return out.empty() ? "unknown" : out;
}

std::string utc_stamp(int64_t unix_s) {
  time_t t = static_cast<time_t>(unix_s);
  struct tm tm {};
  if (gmtime_r(&t, &tm) == nullptr) return "00000000T000000Z";
  char buf[32];
  if (strftime(buf, sizeof(buf), "%Y%m%dT%H%M%SZ", &tm) != 16) return "00000000T000000Z";
  return buf;
}

// Errors a later attempt may not meet again: the disk fills and empties, I/O recovers.
bool errno_is_transient(int err) {
  return err == ENOSPC || err == EDQUOT || err == EIO || err == EINTR || err == EAGAIN ||
         err == ENOMEM || err == EMFILE || err == ENFILE || err == EBUSY;
}

// Creates `dir` and its parents; the directory itself, when created here, 0750 (its files are
// 0640: write_new_file). One that exists keeps the mode its operator gave it.
void create_private_directory(const std::string& dir, std::error_code& ec) {
  if (!fs::create_directories(dir, ec) || ec) return;
  fs::permissions(dir, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec,
                  fs::perm_options::replace, ec);
}

// Writes `bytes` to a new file `path`: 0, or the errno of the failure (the file is removed).
int write_new_file(const std::string& path, const std::string& bytes) {
  // Not world-readable: profiles carry paths, function names and labels of other users'
  // processes.
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0640);
  if (fd < 0) return errno;
  size_t done = 0;
  int err = 0;
  while (done < bytes.size()) {
    ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = n < 0 ? errno : EIO;
      break;
    }
    done += static_cast<size_t>(n);
  }
  // No fsync: a profile lost to a power cut is no loss worth an fsync per file; rename() still
  // makes every file appear complete or not at all.
  if (close(fd) != 0 && err == 0) err = errno;
  if (err != 0) unlink(path.c_str());
  return err;
}

// The name with ".N" inserted before ".pb.gz" (N = 0: unchanged).
std::string numbered(const std::string& name, int n) {
  if (n == 0) return name;
  return fmt::format("{}.{}{}", name.substr(0, name.size() - strlen(kSuffix)), n, kSuffix);
}

// Moves `from` to `to` unless `to` exists: 0, or an errno (EEXIST when taken).
int rename_no_replace(const std::string& from, const std::string& to) {
  if (renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) return 0;
  int err = errno;
  if (err != EINVAL && err != ENOSYS) return err;
  // A file system without RENAME_NOREPLACE: check, then rename (one writer per name is the
  // normal case, so the window does not matter).
  struct stat st;
  if (lstat(to.c_str(), &st) == 0) return EEXIST;
  return rename(from.c_str(), to.c_str()) == 0 ? 0 : errno;
}

struct Entry {
  std::string name;
  uint64_t bytes = 0;
};

// This pattern's regular files in `dir`, oldest (smallest name) first.
std::vector<Entry> list_profiles(const std::string& dir, std::error_code& ec) {
  std::vector<Entry> out;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (!is_out_dir_file_name(name)) continue;
    std::error_code entry_ec;
    if (!it->is_regular_file(entry_ec)) continue;
    uint64_t size = it->file_size(entry_ec);
    if (entry_ec) continue;  // deleted meanwhile
    out.push_back({std::move(name), size});
  }
  std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.name < b.name; });
  return out;
}

void remove_stale_temp_files(const std::string& dir) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (name.rfind(kTempPrefix, 0) != 0) continue;
    long pid = strtol(name.c_str() + strlen(kTempPrefix), nullptr, 10);
    if (pid <= 0 || (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)) {
      unlink(it->path().c_str());
    }
  }
}

class OutDirSink final : public Sink {
 public:
  explicit OutDirSink(OutDirOptions options) : options_(std::move(options)) {}

  std::string name() const override { return "out-dir " + options_.dir; }

  Delivery deliver(const IntervalProfile& profile) override {
    // Nothing std::filesystem, fmt or the allocator throws may leave the module.
    try {
      return write(profile);
    } catch (const std::exception& e) {
      return Delivery::retry(fmt::format("{}: {}", options_.dir, e.what()));
    }
  }

 private:
  Delivery write(const IntervalProfile& profile);
  Delivery failure(const std::string& path, const char* what, int err) const;
  Result<std::string> place(const std::string& temp, const std::string& name, int* err);
  std::string enforce_retention(const std::string& newest);
  std::string path(const std::string& name) const { return options_.dir + "/" + name; }

  OutDirOptions options_;
};

Delivery OutDirSink::failure(const std::string& file, const char* what, int err) const {
  std::string error = fmt::format("{}: {}: {}", file, what, strerror(err));
  return errno_is_transient(err) ? Delivery::retry(std::move(error))
                                 : Delivery::reject(std::move(error));
}

Delivery OutDirSink::write(const IntervalProfile& profile) {
  std::string name = out_dir_file_name(profile);
  std::string temp = path(fmt::format("{}{}-{}-{}", kTempPrefix, getpid(), temp_counter++, name));
  int err = write_new_file(temp, profile.pprof_gz);
  if (err == ENOENT) {
    // The directory went away (an operator cleaned up): make it again rather than fail forever.
    std::error_code ec;
    create_private_directory(options_.dir, ec);
    err = write_new_file(temp, profile.pprof_gz);
  }
  if (err != 0) return failure(temp, "cannot write", err);
  Result<std::string> placed = place(temp, name, &err);
  if (!placed.ok()) {
    unlink(temp.c_str());
    return failure(path(name), "cannot rename the temporary file into place", err);
  }
  return Delivery::success(enforce_retention(*placed));
}

Result<std::string> OutDirSink::place(const std::string& temp, const std::string& name, int* err) {
  for (int n = 0; n < kMaxNameAttempts; ++n) {
    std::string candidate = numbered(name, n);
    *err = rename_no_replace(temp, path(candidate));
    if (*err == 0) return candidate;
    if (*err != EEXIST) break;
  }
  return make_error("no free name");
}

// Deletes the oldest files beyond the limits; what went wrong, for Delivery::warning.
std::string OutDirSink::enforce_retention(const std::string& newest) {
  std::error_code ec;
  std::vector<Entry> files = list_profiles(options_.dir, ec);
  if (ec) return fmt::format("{}: cannot list for retention: {}", options_.dir, ec.message());
  uint64_t total = 0;
  for (const Entry& e : files) total += e.bytes;
  size_t count = files.size();
  std::string warning;
  for (const Entry& e : files) {
    bool over_count = options_.keep_files != 0 && count > options_.keep_files;
    bool over_bytes = options_.keep_bytes != 0 && total > options_.keep_bytes;
    if (!over_count && !over_bytes) break;
    if (e.name == newest) continue;
    if (unlink(path(e.name).c_str()) != 0 && errno != ENOENT) {
      if (warning.empty())
        warning = fmt::format("{}: cannot delete: {}", path(e.name), strerror(errno));
      continue;
    }
    --count;
    total -= e.bytes;
  }
  return warning;
}

}  // namespace

std::string out_dir_file_name(const IntervalProfile& profile) {
  // A CPU profile's name has no kind (it was the only kind first); the others say theirs.
  const std::string kind = profile.kind == "cpu" ? "" : "." + app_for_file_name(profile.kind);
  return fmt::format("{}-{}-{}{}{}", utc_stamp(profile.from_unix_s),
                     app_for_file_name(profile.app_name), profile.pid, kind, kSuffix);
}

bool is_out_dir_file_name(const std::string& name) {
  // yyyymmddThhmmssZ-<something>.pb.gz
  size_t suffix = strlen(kSuffix);
  return name.size() > 17 + suffix && all_digits(name, 0, 8) && name[8] == 'T' &&
         all_digits(name, 9, 6) && name[15] == 'Z' && name[16] == '-' &&
         name.compare(name.size() - suffix, suffix, kSuffix) == 0;
}

Result<std::unique_ptr<Sink>> make_out_dir_sink(OutDirOptions options) {
  try {
    if (options.dir.empty()) return make_error("out-dir: no directory given");
    while (options.dir.size() > 1 && options.dir.back() == '/') options.dir.pop_back();
    std::error_code ec;
    create_private_directory(options.dir, ec);
    if (ec) return make_error("{}: cannot create the directory: {}", options.dir, ec.message());
    if (!fs::is_directory(options.dir, ec)) return make_error("{}: not a directory", options.dir);
    if (access(options.dir.c_str(), W_OK | X_OK) != 0) {
      return make_error("{}: not writable: {}", options.dir, strerror(errno));
    }
    remove_stale_temp_files(options.dir);
    return std::unique_ptr<Sink>(std::make_unique<OutDirSink>(std::move(options)));
  } catch (const std::exception& e) {
    return make_error("{}: {}", options.dir, e.what());
  }
}

}  // namespace ljprof::exporter
