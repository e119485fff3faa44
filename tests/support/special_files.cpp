#include "support/special_files.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <thread>

namespace dl::test {

namespace fs = std::filesystem;

std::string make_null_device(const fs::path& path) {
  if (::mknod(path.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0)
    return std::string("mknod ") + path.string() + " c 1 3: " + std::strerror(errno);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    const std::string why = std::string("open of the device node ") + path.string() + ": " + std::strerror(errno);
    ::unlink(path.c_str());
    return why;
  }
  ::close(fd);
  return "";
}

struct FifoReader::Impl {
  int read_fd = -1, hold_fd = -1;  // hold_fd: a writer of our own, so reads wait instead of ending
  std::string bytes;
  std::atomic<bool> stop{false};
  std::thread thread;

  // Reads what is there now; false when nothing was.
  bool read_some() {
    char buf[65536];
    const ssize_t n = ::read(read_fd, buf, sizeof buf);
    if (n > 0) bytes.append(buf, static_cast<size_t>(n));
    return n > 0;
  }
};

FifoReader::FifoReader(const fs::path& path) : impl_(std::make_unique<Impl>()) {
  if (::mkfifo(path.c_str(), 0644) != 0) throw std::runtime_error("mkfifo " + path.string() + ": " + std::strerror(errno));
  impl_->read_fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  impl_->hold_fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  if (impl_->read_fd < 0 || impl_->hold_fd < 0) throw std::runtime_error("open of the FIFO " + path.string() + " failed");
  Impl* s = impl_.get();
  impl_->thread = std::thread([s] {
    while (!s->stop) {
      pollfd p{s->read_fd, POLLIN, 0};
      if (::poll(&p, 1, 20) > 0) s->read_some();
    }
  });
}

std::string FifoReader::finish() {
  if (impl_->thread.joinable()) {
    impl_->stop = true;
    impl_->thread.join();
    while (impl_->read_some()) {
    }
    ::close(impl_->read_fd);
    ::close(impl_->hold_fd);
  }
  return impl_->bytes;
}

FifoReader::~FifoReader() { finish(); }

}  // namespace dl::test
