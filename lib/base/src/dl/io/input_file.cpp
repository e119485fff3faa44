#include "dl/io/input_file.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dl/core/error.hpp"
#include "dl/io/file_ops.hpp"

namespace dl {

int open_input_file(const std::filesystem::path& path, std::string_view what, uint64_t* size) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT) throw_usage(what, " ", path.string(), ": no such file");
    if (err == EACCES || err == ENOTDIR || err == ELOOP || err == ENAMETOOLONG || err == ENXIO)
      throw_usage(what, " ", path.string(), ": ", std::strerror(err));
    throw_runtime(what, " ", path.string(), ": ", std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    throw_runtime(what, " ", path.string(), ": cannot stat: ", std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw_usage(what, " ", path.string(), ": not a regular file (it is ", fileio::file_type_name(st.st_mode),
                "); name a file");
  }
  // Reads of a regular file never block; clear the flag so later reads behave as usual.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  *size = static_cast<uint64_t>(st.st_size);
  return fd;
}

std::string read_input_file(const std::filesystem::path& path, std::string_view what, uint64_t max_bytes) {
  uint64_t size = 0;
  int fd = open_input_file(path, what, &size);
  if (size > max_bytes) {
    ::close(fd);
    throw_usage(what, " ", path.string(), ": ", size, " bytes, over the ", max_bytes,
                "-byte limit for this kind of file (is it the right file?)");
  }
  std::string out(static_cast<size_t>(size), '\0');
  size_t got = 0;
  while (got < out.size()) {
    ssize_t k = ::read(fd, out.data() + got, out.size() - got);
    if (k < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      throw_runtime(what, " ", path.string(), ": ", std::strerror(err));
    }
    if (k == 0) break;  // the file shrank while being read: take what is there
    got += static_cast<size_t>(k);
  }
  ::close(fd);
  out.resize(got);
  return out;
}

}  // namespace dl
