// The system calls behind every file dlkit publishes (checkpoints, metrics.jsonl, TensorBoard
// events, run files): open, write, fsync and rename, each told the path it serves, with a
// test-only fault hook.
//
// DL_FAULT="op=write,file=*model.safetensors,nth=3,err=ENOSPC" (read once at start-up) makes the
// nth call of that op on a matching path fail:
//   op    open | write | fsync | rename
//   file  glob over the whole path ('*' crosses '/'; default *)
//   nth   1-based count of matching calls (default 1)
//   err   ENOSPC | EIO (the call fails with it), short (a write stores half its bytes and the
//         retry of that write fails with ENOSPC: a disk filling up), TERM | KILL (the process
//         raises the signal, then the call proceeds: a signal arriving at that stage)
// DL_FAULT_TRACE=FILE appends "op path" for every call, so a test can count the calls of a run
// and fault each. The path given is the file as its reader sees it (an atomic write names its
// target, not the temp file). With neither variable set (every real run) a call costs one branch
// on a bool; kernels and collectives never come here.
#pragma once
#include <sys/types.h>

#include <filesystem>

namespace dl::fileio {

// What a stat() mode names, for messages: "a FIFO", "a character device", "a block device",
// "a directory", "a socket", "a regular file".
const char* file_type_name(mode_t mode);

namespace detail {
extern bool g_hooked;  // DL_FAULT or DL_FAULT_TRACE was set at start-up
int hooked_open(const char* real, int flags, mode_t mode, const std::filesystem::path& path);
ssize_t hooked_write(int fd, const void* data, size_t n, const std::filesystem::path& path);
int hooked_fsync(int fd, const std::filesystem::path& path);
int hooked_rename(const std::filesystem::path& from, const std::filesystem::path& to, bool no_replace);
int real_open(const char* real, int flags, mode_t mode);
ssize_t real_write(int fd, const void* data, size_t n);
int real_fsync(int fd);
int real_rename(const std::filesystem::path& from, const std::filesystem::path& to, bool no_replace);
}  // namespace detail

// open(real, flags, mode) for the file `path` (the target `real` becomes); -1 and errno on failure.
inline int open(const std::filesystem::path& real, int flags, mode_t mode, const std::filesystem::path& path) {
  if (detail::g_hooked) [[unlikely]]
    return detail::hooked_open(real.c_str(), flags, mode, path);
  return detail::real_open(real.c_str(), flags, mode);
}

// write(fd, data, n) of the file `path`; may write fewer bytes, as write(2) may.
inline ssize_t write(int fd, const void* data, size_t n, const std::filesystem::path& path) {
  if (detail::g_hooked) [[unlikely]]
    return detail::hooked_write(fd, data, n, path);
  return detail::real_write(fd, data, n);
}

// fsync(fd) of the file or folder `path`.
inline int fsync(int fd, const std::filesystem::path& path) {
  if (detail::g_hooked) [[unlikely]]
    return detail::hooked_fsync(fd, path);
  return detail::real_fsync(fd);
}

// rename(from, to); with no_replace, fails with EEXIST instead of replacing `to`
// (renameat2 RENAME_NOREPLACE; EINVAL/ENOSYS where the filesystem lacks it).
inline int rename(const std::filesystem::path& from, const std::filesystem::path& to, bool no_replace = false) {
  if (detail::g_hooked) [[unlikely]]
    return detail::hooked_rename(from, to, no_replace);
  return detail::real_rename(from, to, no_replace);
}

}  // namespace dl::fileio
