#include "io/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "vjit/error.h"

namespace vjit::io {

namespace {

std::string system_reason() { return std::strerror(errno); }

// Closes the descriptor on scope exit.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }
  // Closes now, reporting the error close(2) may give (a deferred write error on some file systems).
  bool close() {
    int fd = fd_;
    fd_ = -1;
    return ::close(fd) == 0;
  }

 private:
  int fd_;
};

void write_all(int fd, std::string_view bytes, const std::string& temporary) {
  while (!bytes.empty()) {
    ssize_t written = ::write(fd, bytes.data(), bytes.size());
    if (written < 0 && errno == EINTR) continue;
    VJIT_USER_CHECK(written > 0, "cannot write '" << temporary << "': " << system_reason());
    bytes.remove_prefix(size_t(written));
  }
}

// fsync of the directory holding `path`, so that a rename into it survives a power cut.
void sync_directory_of(const std::string& path) {
  std::filesystem::path directory = std::filesystem::path(path).parent_path();
  if (directory.empty()) directory = ".";
  FileDescriptor fd(::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  VJIT_USER_CHECK(fd.get() >= 0, "cannot open directory '" << directory.string() << "' to flush it: " << system_reason());
  VJIT_USER_CHECK(::fsync(fd.get()) == 0,
                  "cannot flush directory '" << directory.string() << "' to disk: " << system_reason());
}

// Removes "<path>.tmp.<pid>" files whose writer process no longer exists.
void remove_stale_temporaries(const std::string& path) {
  std::filesystem::path target(path);
  std::filesystem::path directory = target.parent_path().empty() ? "." : target.parent_path();
  const std::string prefix = target.filename().string() + ".tmp.";
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(directory, error)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with(prefix)) continue;
    const std::string pid_text = name.substr(prefix.size());
    if (pid_text.empty() || pid_text.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = pid_t(std::stol(pid_text));
    if (pid == ::getpid()) continue;
    if (::kill(pid, 0) != 0 && errno == ESRCH) std::filesystem::remove(entry.path(), error);
  }
}

}  // namespace

void write_file_atomically(const std::string& path, std::string_view bytes) {
  remove_stale_temporaries(path);
  const std::string temporary = path + ".tmp." + std::to_string(::getpid());
  try {
    FileDescriptor fd(::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    VJIT_USER_CHECK(fd.get() >= 0, "cannot create '" << temporary << "': " << system_reason());
    write_all(fd.get(), bytes, temporary);
    VJIT_USER_CHECK(::fsync(fd.get()) == 0, "cannot flush '" << temporary << "' to disk: " << system_reason());
    VJIT_USER_CHECK(fd.close(), "cannot close '" << temporary << "': " << system_reason());
    VJIT_USER_CHECK(::rename(temporary.c_str(), path.c_str()) == 0,
                    "cannot rename '" << temporary << "' to '" << path << "': " << system_reason());
  } catch (...) {
    ::unlink(temporary.c_str());
    throw;
  }
  sync_directory_of(path);
}

}  // namespace vjit::io
