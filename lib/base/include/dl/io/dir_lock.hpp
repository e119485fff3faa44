// One writer per directory (a training run, a sweep): an advisory lock (flock(2)) on DIR/.lock,
// held by the process that writes the directory for as long as it writes it, with the holder's
// PID and host written into the file for whoever is refused.
//
// The kernel drops the lock when its process ends, however it ends (kill -9 included), so a lock
// is never stale and nothing ever needs removing: a leftover .lock file nobody holds is free.
// The descriptor is close-on-exec, so a child process (a sweep's trials) never holds its
// parent's lock. flock works across the processes of one machine; on NFS Linux maps it to a
// POSIX lock, which the server arbitrates between machines.
#pragma once
#include <filesystem>
#include <string_view>

namespace dl {

inline constexpr const char* kDirLockFile = ".lock";

// The held lock; destroying it (or release()) lets the next writer in.
class DirLock {
 public:
  DirLock() = default;
  ~DirLock() { release(); }
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;
  DirLock(DirLock&& other) noexcept : fd_(other.fd_), dir_(std::move(other.dir_)) { other.fd_ = -1; }
  DirLock& operator=(DirLock&& other) noexcept;

  bool held() const { return fd_ >= 0; }
  const std::filesystem::path& dir() const { return dir_; }
  void release() noexcept;

 private:
  friend DirLock lock_dir(const std::filesystem::path&, std::string_view);
  friend DirLock create_locked_dir(const std::filesystem::path&, std::string_view, std::string_view);
  int fd_ = -1;
  std::filesystem::path dir_;
};

// Takes a new directory: creates it (and its parents) when missing, locks it, and only then
// checks that it holds nothing but the lock file, so of two processes racing for one new
// directory exactly one gets it and the other has written nothing. An empty folder, or one left
// by a writer that stopped before writing anything, is taken. Throws dl::Error(usage) naming the
// holder's PID when another process holds the lock ("<what> DIR is in use by process ..."), and
// "<what> DIR already exists and is not empty: <if_not_empty>" when it holds files.
DirLock create_locked_dir(const std::filesystem::path& dir, std::string_view what, std::string_view if_not_empty);

// Locks an existing directory (to continue writing it): the same error naming the holder when
// another process holds it. The caller checks first that `dir` is what it means to continue.
DirLock lock_dir(const std::filesystem::path& dir, std::string_view what);

// What create_locked_dir checks first, for a caller with expensive work to do before it: the
// directory is missing or holds nothing but its lock file, else the usage error naming the
// process writing it, or saying it is not empty. Only create_locked_dir decides a race.
void check_dir_unused(const std::filesystem::path& dir, std::string_view what, std::string_view if_not_empty);

}  // namespace dl
