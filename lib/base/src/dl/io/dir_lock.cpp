#include "dl/io/dir_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "dl/core/error.hpp"

namespace dl {

namespace fs = std::filesystem;

namespace {

std::string this_host() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "";
  return name;
}

// Who holds `lock_file`, as its holder wrote it ("PID HOST"). The holder writes it right after
// taking the lock (after checking a new directory is empty), so an empty file is waited for.
std::string lock_holder(const fs::path& lock_file) {
  std::string pid, host;
  for (int i = 0; i < 200 && pid.empty(); ++i) {
    if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::ifstream in(lock_file);
    in >> pid >> host;
  }
  if (pid.empty()) return "another process (it has not written its PID into the lock file)";
  return "process " + pid + (host.empty() || host == this_host() ? std::string() : " on host " + host);
}

[[noreturn]] void throw_in_use(const fs::path& dir, std::string_view what) {
  const fs::path file = dir / kDirLockFile;
  throw_usage(what, " ", dir.string(), " is in use by ", lock_holder(file), ", which holds ", file.string(),
              ": one process at a time writes a ", what, "; wait for that one to end or stop it first");
}

// Opens DIR/.lock (creating it) and takes the lock. A holder that stays is refused at once but
// for a few retries over 50 ms: another process's look (held_by_another) holds it for a moment.
int take_dir_lock(const fs::path& dir, std::string_view what) {
  const fs::path file = dir / kDirLockFile;
  const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) {
    const int e = errno;
    if (e == ENOENT || e == ENOTDIR) throw_usage(what, " ", dir.string(), " does not exist");
    throw_runtime("cannot open the lock file ", file.string(), ": ", std::strerror(e));
  }
  for (int tries = 0; ::flock(fd, LOCK_EX | LOCK_NB) != 0; ++tries) {
    const int e = errno;
    if (e == EINTR) continue;
    if (e == EWOULDBLOCK && tries < 5) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    ::close(fd);
    if (e == EWOULDBLOCK) throw_in_use(dir, what);
    throw_runtime("cannot lock ", file.string(), ": ", std::strerror(e));
  }
  return fd;
}

// Whether another process holds DIR/.lock now (a look: the file is not created).
bool held_by_another(const fs::path& dir) {
  const int fd = ::open((dir / kDirLockFile).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return false;
  const bool held = ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);
  return held;
}

// Missing, or holding nothing but its lock file.
bool dir_is_unused(const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return true;
  if (!fs::is_directory(dir, ec)) return false;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().filename() != kDirLockFile) return false;
  return !ec;
}

// The holder's PID and host, for the processes it refuses (best effort: the lock is what counts).
void write_lock_holder(int fd) {
  const std::string text = std::to_string(::getpid()) + " " + this_host() + "\n";
  if (::ftruncate(fd, 0) == 0) (void)!::pwrite(fd, text.data(), text.size(), 0);
}

}  // namespace

DirLock& DirLock::operator=(DirLock&& other) noexcept {
  if (this != &other) {
    release();
    fd_ = other.fd_;
    dir_ = std::move(other.dir_);
    other.fd_ = -1;
  }
  return *this;
}

void DirLock::release() noexcept {
  if (fd_ >= 0) ::close(fd_);  // closing the only descriptor drops the lock
  fd_ = -1;
}

void check_dir_unused(const fs::path& dir, std::string_view what, std::string_view if_not_empty) {
  if (dir_is_unused(dir)) return;
  if (held_by_another(dir)) throw_in_use(dir, what);
  throw_usage(what, " ", dir.string(), " already exists and is not empty: ", if_not_empty);
}

DirLock create_locked_dir(const fs::path& dir, std::string_view what, std::string_view if_not_empty) {
  // Checked before too, so that no lock file is left in a folder that holds something else.
  check_dir_unused(dir, what, if_not_empty);
  std::error_code ec;
  if (dir.has_parent_path()) fs::create_directories(dir.parent_path(), ec);
  // mkdir is atomic: of two racing processes one creates the folder, the other finds it (EEXIST),
  // and the lock decides between them.
  if (::mkdir(dir.c_str(), 0777) != 0 && errno != EEXIST)
    throw_runtime("cannot create ", what, " ", dir.string(), ": ", std::strerror(errno));
  DirLock lock;
  lock.fd_ = take_dir_lock(dir, what);
  lock.dir_ = dir;
  // Under the lock: a writer that finished (or failed after writing) before we came is seen here.
  if (!dir_is_unused(dir)) throw_usage(what, " ", dir.string(), " already exists and is not empty: ", if_not_empty);
  write_lock_holder(lock.fd_);
  return lock;
}

DirLock lock_dir(const fs::path& dir, std::string_view what) {
  DirLock lock;
  lock.fd_ = take_dir_lock(dir, what);
  lock.dir_ = dir;
  write_lock_holder(lock.fd_);
  return lock;
}

}  // namespace dl
