// Key-value stores for the rendezvous: every rank publishes its address and reads the others'.
// Gloo ships a file store (a shared folder) but no TCP store; TcpStore is a small one in the
// spirit of torch's TCPStore: rank 0 serves it on MASTER_ADDR:MASTER_PORT, everyone is a client.
#pragma once
#include <memory>
#include <string>

namespace dl::dist {

class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;
  virtual void set(const std::string& key, const std::string& value) = 0;
  // Waits until `key` exists (up to timeout_s), then returns its value.
  virtual std::string get(const std::string& key, double timeout_s) = 0;
  virtual bool contains(const std::string& key) = 0;
};

// Connects to host:port (retrying until timeout_s: the server may start later); when `serve`
// is true this process also runs the server on `port` (all interfaces).
std::unique_ptr<KeyValueStore> make_tcp_store(const std::string& host, int port, bool serve, double timeout_s);

}  // namespace dl::dist
