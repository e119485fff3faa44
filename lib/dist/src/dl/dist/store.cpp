#include "dl/dist/store.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "dl/core/error.hpp"

namespace dl::dist {

namespace {

enum : uint8_t { kSet = 1, kGet = 2 };

bool write_all(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n) {
    ssize_t w = ::send(fd, c, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    c += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool read_all(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n) {
    ssize_t r = ::recv(fd, c, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool write_str(int fd, const std::string& s) {
  uint32_t n = static_cast<uint32_t>(s.size());
  return write_all(fd, &n, 4) && write_all(fd, s.data(), s.size());
}

bool read_str(int fd, std::string& s) {
  uint32_t n;
  if (!read_all(fd, &n, 4) || n > (1u << 30)) return false;
  s.resize(n);
  return read_all(fd, s.data(), n);
}

class Server {
 public:
  explicit Server(int port) {
    fd_ = ::socket(AF_INET6, SOCK_STREAM, 0);
    bool v6 = fd_ >= 0;
    if (!v6) fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd_ < 0) throw_runtime("TCP store: socket(): ", std::strerror(errno));
    int one = 1, zero = 0;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    int rc;
    if (v6) {
      ::setsockopt(fd_, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
      sockaddr_in6 a{};
      a.sin6_family = AF_INET6;
      a.sin6_addr = in6addr_any;
      a.sin6_port = htons(static_cast<uint16_t>(port));
      rc = ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    } else {
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_ANY);
      a.sin_port = htons(static_cast<uint16_t>(port));
      rc = ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    }
    if (rc != 0 || ::listen(fd_, 128) != 0) {
      int err = errno;
      ::close(fd_);
      throw_usage("TCP store: cannot listen on port ", port, ": ", std::strerror(err),
                  " (is another job using MASTER_PORT ", port, "? choose a free port)");
    }
    accept_thread_ = std::thread([this] { accept_loop(); });
  }
  ~Server() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    if (accept_thread_.joinable()) accept_thread_.join();
    std::lock_guard<std::mutex> lock(mu_);
    for (int c : clients_) ::shutdown(c, SHUT_RDWR);
    for (auto& t : handlers_) t.detach();  // each exits when its socket closes
  }

 private:
  void accept_loop() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 200) <= 0) continue;
      int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) continue;
      int one = 1;
      ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      std::lock_guard<std::mutex> lock(mu_);
      clients_.push_back(c);
      handlers_.emplace_back([this, c] { serve(c); });
    }
  }
  void serve(int c) {
    for (;;) {
      uint8_t op;
      std::string key, value;
      if (!read_all(c, &op, 1) || !read_str(c, key)) break;
      if (op == kSet) {
        if (!read_str(c, value)) break;
        {
          std::lock_guard<std::mutex> lock(mu_);
          data_[key] = value;
        }
        uint8_t ok = 1;
        if (!write_all(c, &ok, 1)) break;
      } else if (op == kGet) {
        std::string v;
        uint8_t found;
        {
          std::lock_guard<std::mutex> lock(mu_);
          auto it = data_.find(key);
          found = it != data_.end();
          if (found) v = it->second;
        }
        if (!write_all(c, &found, 1) || (found && !write_str(c, v))) break;
      } else {
        break;
      }
    }
    ::close(c);
  }

  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread accept_thread_;
  std::mutex mu_;
  std::vector<int> clients_;
  std::vector<std::thread> handlers_;
  std::map<std::string, std::string> data_;
};

class TcpStore final : public KeyValueStore {
 public:
  TcpStore(const std::string& host, int port, bool serve, double timeout_s)
      : host_(host), port_(port), timeout_s_(timeout_s) {
    if (serve) server_ = std::make_unique<Server>(port);
    connect_with_retry();
  }
  ~TcpStore() override {
    if (fd_ >= 0) ::close(fd_);
  }
  void set(const std::string& key, const std::string& value) override {
    std::lock_guard<std::mutex> lock(mu_);
    uint8_t op = kSet, ok = 0;
    if (!write_all(fd_, &op, 1) || !write_str(fd_, key) || !write_str(fd_, value) || !read_all(fd_, &ok, 1))
      lost("set", key);
  }
  std::string get(const std::string& key, double timeout_s) override {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    int backoff_ms = 1;
    for (;;) {
      std::string v;
      if (try_get(key, v)) return v;
      if (std::chrono::steady_clock::now() > deadline)
        throw_runtime("rendezvous timed out after ", timeout_s, " s waiting for key '", key, "' in the TCP store at ",
                      host_, ":", port_, " (a rank did not start or could not reach it; see [dist] timeout_s)");
      std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
      backoff_ms = std::min(backoff_ms * 2, 50);
    }
  }
  bool contains(const std::string& key) override {
    std::string v;
    return try_get(key, v);
  }

 private:
  bool try_get(const std::string& key, std::string& v) {
    std::lock_guard<std::mutex> lock(mu_);
    uint8_t op = kGet, found = 0;
    if (!write_all(fd_, &op, 1) || !write_str(fd_, key) || !read_all(fd_, &found, 1)) lost("get", key);
    if (!found) return false;
    if (!read_str(fd_, v)) lost("get", key);
    return true;
  }
  [[noreturn]] void lost(const char* op, const std::string& key) {
    throw_runtime("TCP store at ", host_, ":", port_, " closed the connection during ", op, " '", key,
                  "' (rank 0, which serves it, may have exited)");
  }
  void connect_with_retry() {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s_);
    std::string last;
    for (;;) {
      addrinfo hints{}, *res = nullptr;
      hints.ai_socktype = SOCK_STREAM;
      int gai = ::getaddrinfo(host_.c_str(), std::to_string(port_).c_str(), &hints, &res);
      if (gai != 0) {
        last = ::gai_strerror(gai);
      } else {
        for (addrinfo* a = res; a; a = a->ai_next) {
          int fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
          if (fd < 0) continue;
          if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
            int one = 1;
            ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            fd_ = fd;
            break;
          }
          last = std::strerror(errno);
          ::close(fd);
        }
        ::freeaddrinfo(res);
      }
      if (fd_ >= 0) return;
      if (std::chrono::steady_clock::now() > deadline)
        throw_runtime("cannot reach the rendezvous store at ", host_, ":", port_, " after ", timeout_s_, " s (", last,
                      "); check MASTER_ADDR/MASTER_PORT and that rank 0 is running");
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

  std::string host_;
  int port_;
  double timeout_s_;
  std::unique_ptr<Server> server_;
  int fd_ = -1;
  std::mutex mu_;
};

}  // namespace

std::unique_ptr<KeyValueStore> make_tcp_store(const std::string& host, int port, bool serve, double timeout_s) {
  return std::make_unique<TcpStore>(host, port, serve, timeout_s);
}

}  // namespace dl::dist
