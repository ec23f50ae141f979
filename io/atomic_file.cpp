#include "io/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>

#include "vjit/error.h"

namespace vjit::io {

namespace {

namespace fs = std::filesystem;

std::string directory_of(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

// The pid in a temporary file name "<name>.tmp.<pid>.<n>", or 0 when `file`
// is not one of `name`'s.
pid_t temporary_writer(std::string_view file, std::string_view name) {
  const std::string prefix = std::string(name) + ".tmp.";
  if (!file.starts_with(prefix)) return 0;
  std::string_view rest = file.substr(prefix.size());
  pid_t pid = 0;
  const auto [end, error] = std::from_chars(rest.data(), rest.data() + rest.size(), pid);
  if (error != std::errc() || end == rest.data() || end == rest.data() + rest.size() || *end != '.') return 0;
  return pid;
}

bool process_gone(pid_t pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }

// Writes every byte, retrying after a signal; returns 0 or the errno of the failure.
int write_all(int fd, std::string_view bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? errno : EIO;
    done += size_t(n);
  }
  return 0;
}

}  // namespace

int remove_stale_temporaries(const std::string& path) {
  const std::string name = fs::path(path).filename().string();
  std::error_code error;
  int removed = 0;
  for (fs::directory_iterator it(directory_of(path), error), end; !error && it != end; it.increment(error)) {
    const pid_t pid = temporary_writer(it->path().filename().string(), name);
    if (pid <= 0 || pid == ::getpid() || !process_gone(pid)) continue;
    std::error_code ignored;
    if (fs::remove(it->path(), ignored)) ++removed;
  }
  return removed;
}

void write_file_atomically(const std::string& path, std::span<const std::string_view> pieces, const std::string& what) {
  remove_stale_temporaries(path);
  static std::atomic<uint64_t> counter{0};
  const std::string temporary =
      path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  VJIT_USER_CHECK(fd >= 0, "cannot write " << what << " '" << path << "': cannot create '" << temporary
                                           << "': " << std::strerror(errno));
  int error = 0;
  std::string failed;  // what failed, set only once an error happened
  for (std::string_view piece : pieces)
    if ((error = write_all(fd, piece)) != 0) {
      failed = "writing '" + temporary + "'";
      break;
    }
  if (error == 0 && ::fsync(fd) != 0) {
    error = errno;
    failed = "fsync of '" + temporary + "'";
  }
  if (::close(fd) != 0 && error == 0) {
    error = errno;
    failed = "closing '" + temporary + "'";
  }
  if (error == 0 && ::rename(temporary.c_str(), path.c_str()) != 0) {
    error = errno;
    failed = "renaming '" + temporary + "' over it";
  }
  if (error != 0) {
    ::unlink(temporary.c_str());
    VJIT_USER_CHECK(false, "cannot write " << what << " '" << path << "': " << failed << " failed: "
                                           << std::strerror(error));
  }
  // Makes the rename durable. Best effort: the new file is in place already,
  // and some file systems cannot sync a directory.
  const int dir_fd = ::open(directory_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
}

}  // namespace vjit::io
