// Comm over Gloo's TCP transport. The only file that includes Gloo.
#include "dl/dist/gloo_comm.hpp"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>

#include "dl/core/half.hpp"
#include "dl/cli/app.hpp"
#include "dl/dist/store.hpp"

namespace dl::dist {

namespace {

using ms = std::chrono::milliseconds;

// Gloo's Store interface over our TCP store.
class GlooStoreAdapter final : public gloo::rendezvous::Store {
 public:
  GlooStoreAdapter(std::unique_ptr<KeyValueStore> s, double timeout_s) : s_(std::move(s)), timeout_s_(timeout_s) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    s_->set(key, std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    std::string v = s_->get(key, timeout_s_);
    return {v.begin(), v.end()};
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, ms(static_cast<int64_t>(timeout_s_ * 1000))); }
  void wait(const std::vector<std::string>& keys, const ms& timeout) override {
    for (const auto& k : keys) s_->get(k, timeout.count() / 1000.0);
  }

 private:
  std::unique_ptr<KeyValueStore> s_;
  double timeout_s_;
};

// What a whole job shares: the store, the TCP device, the timeout.
struct Shared {
  std::unique_ptr<gloo::rendezvous::Store> base;
  std::unique_ptr<gloo::rendezvous::PrefixStore> store;  // keys under the run id
  std::shared_ptr<gloo::transport::Device> device;
  double timeout_s = 300;
};

std::string ranks_text(const std::vector<int>& r) {
  std::string s;
  for (size_t i = 0; i < r.size(); ++i) s += (i ? "," : "") + std::to_string(r[i]);
  return s;
}

template <class F>
auto reduce_fn(DType dt, F pick) {
  switch (dt) {
    case DType::f32: return pick(float{});
    case DType::f64: return pick(double{});
    case DType::i32: return pick(int32_t{});
    case DType::i64: return pick(int64_t{});
    default: throw_runtime("collective on ", dtype_name(dt), " tensors is not supported");
  }
}

// Data movement (gather, broadcast) only needs the element size: 16-bit floats travel as u16.
template <class F>
auto element_fn(DType dt, F pick) {
  if (dt == DType::bf16 || dt == DType::f16 || dt == DType::u16) return pick(uint16_t{});
  if (dt == DType::u8) return pick(uint8_t{});
  return reduce_fn(dt, pick);
}

// 16-bit floats are reduced in f32 (what NCCL does inside its kernels), then rounded back once.
bool reduces_widened(const Tensor& t) { return is_16bit_float(t.dtype()); }
Tensor widened(const Tensor& t) {
  Tensor w = Tensor::empty(t.shape(), DType::f32);
  convert_host(w, t);
  return w;
}

class GlooComm;

class GlooRequest final : public Request {
 public:
  GlooRequest(GlooComm* comm, std::unique_ptr<gloo::transport::UnboundBuffer> buf, bool is_send, int peer,
              std::string what)
      : comm_(comm), buf_(std::move(buf)), send_(is_send), peer_(peer), what_(std::move(what)) {}
  ~GlooRequest() override;
  void wait() override;

 private:
  GlooComm* comm_;
  std::unique_ptr<gloo::transport::UnboundBuffer> buf_;
  bool send_;
  int peer_;
  std::string what_;
  bool done_ = false;
};

class GlooComm final : public Comm {
 public:
  GlooComm(std::shared_ptr<Shared> shared, std::shared_ptr<gloo::Context> ctx, std::string name,
           std::vector<int> world_ranks)
      : shared_(std::move(shared)), ctx_(std::move(ctx)), name_(std::move(name)), world_ranks_(std::move(world_ranks)) {
    send_seq_.assign(static_cast<size_t>(ctx_->size), 0);
    recv_seq_.assign(static_cast<size_t>(ctx_->size), 0);
  }

  int rank() const override { return ctx_->rank; }
  int size() const override { return ctx_->size; }
  const std::string& name() const override { return name_; }
  const std::vector<int>& world_ranks() const override { return world_ranks_; }
  double seconds_in_comm() const override { return seconds_; }
  ms timeout() const { return ms(static_cast<int64_t>(shared_->timeout_s * 1000)); }

  // Runs one operation, timing it and turning Gloo's exceptions into errors that name it.
  // `timed` is false for operations built from timed sends and receives (reduce_scatter).
  template <class F>
  void run(const std::string& op, const Tensor& t, F&& fn, int peer = -1, bool timed = true) {
    auto t0 = std::chrono::steady_clock::now();
    try {
      fn();
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      fail(op, t, e.what(), peer);
    }
    if (timed) seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  [[noreturn]] void fail(const std::string& op, const Tensor& t, const std::string& why, int peer) const {
    // Name the peers a user can look for (every other member, or the one a send/recv waited on)
    // and this rank, so each rank's message says whom it lost.
    std::vector<int> others;
    for (int i = 0; i < size(); ++i)
      if (i != rank() && (peer < 0 || i == peer)) others.push_back(world_ranks_[static_cast<size_t>(i)]);
    const std::string peers = (others.size() == 1 ? "peer world rank " : "peer world ranks ") + ranks_text(others);
    throw_runtime(op, " of ", t.defined() ? t.describe() : std::string("-"), " in group '", name_, "' (world ranks ",
                  ranks_text(world_ranks_), ") failed on world rank ", world_ranks_[static_cast<size_t>(rank())],
                  " waiting for ", peers, ": ", why, ". The peer may have exited, hung or become unreachable; "
                  "every wait gives up after [dist] timeout_s = ", shared_->timeout_s, " s");
  }

  void allreduce(Tensor& t, ReduceOp op) override {
    if (size() == 1 || t.numel() == 0) return;
    if (reduces_widened(t)) {
      Tensor w = widened(t);
      allreduce(w, op);
      convert_host(t, w);
      return;
    }
    run("allreduce", t, [&] {
      gloo::AllreduceOptions o(ctx_);
      o.setTimeout(timeout());
      o.setTag(next_tag());
      reduce_fn(t.dtype(), [&](auto z) {
        using T = decltype(z);
        o.setOutput(static_cast<T*>(t.raw()), static_cast<size_t>(t.numel()));
        switch (op) {
          case ReduceOp::sum: o.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<T>)); break;
          case ReduceOp::max: o.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::max<T>)); break;
          case ReduceOp::min: o.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::min<T>)); break;
        }
        return 0;
      });
      gloo::allreduce(o);
    });
  }

  // Ring reduce-scatter over point-to-point messages: n - 1 steps; at step k rank r sends its
  // partial sum of chunk (r - k - 1) mod n to r + 1 and adds its own values to the partial of
  // chunk (r - k - 2) mod n received from r - 1. After n - 1 steps rank r holds chunk r whole.
  void reduce_scatter(const Tensor& in, Tensor& out) override {
    const int n = size();
    const int64_t chunk = out.numel();
    if (in.numel() != chunk * n || in.dtype() != out.dtype())
      throw_runtime("reduce_scatter: input ", in.describe(), " is not ", n, " x output ", out.describe());
    if (n == 1) {
      out.copy_from(in.view({chunk}).view(out.shape()));
      return;
    }
    if (reduces_widened(in)) {
      Tensor w = widened(out);
      reduce_scatter(widened(in), w);
      convert_host(out, w);
      return;
    }
    run("reduce_scatter", in, [&] {
      Tensor work = in.clone();
      Tensor incoming = Tensor::empty({chunk}, in.dtype());
      const int r = rank(), next = (r + 1) % n, prev = (r + n - 1) % n;
      auto piece = [&](int c) { return work.flat_slice(static_cast<int64_t>(c) * chunk, {chunk}); };
      for (int k = 0; k < n - 1; ++k) {
        int send_c = ((r - k - 1) % n + n) % n, recv_c = ((r - k - 2) % n + n) % n;
        auto rq = post(incoming, prev, false);
        auto sq = post(piece(send_c), next, true);
        sq->wait();
        rq->wait();
        Tensor mine = piece(recv_c);
        reduce_fn(in.dtype(), [&](auto z) {
          using T = decltype(z);
          T* a = static_cast<T*>(mine.raw());
          const T* b = static_cast<const T*>(incoming.raw());
          for (int64_t i = 0; i < chunk; ++i) a[i] = b[i] + a[i];
          return 0;
        });
      }
      out.copy_from(piece(r).view(out.shape()));
    }, -1, /*timed=*/false);
  }

  void allgather(const Tensor& in, Tensor& out) override {
    if (out.numel() != in.numel() * size() || in.dtype() != out.dtype())
      throw_runtime("allgather: output ", out.describe(), " is not ", size(), " x input ", in.describe());
    if (size() == 1) {
      out.copy_from(in.view(out.shape()));
      return;
    }
    run("allgather", in, [&] {
      gloo::AllgatherOptions o(ctx_);
      o.setTimeout(timeout());
      o.setTag(next_tag());
      element_fn(in.dtype(), [&](auto z) {
        using T = decltype(z);
        o.setInput(static_cast<T*>(in.raw()), static_cast<size_t>(in.numel()));
        o.setOutput(static_cast<T*>(out.raw()), static_cast<size_t>(out.numel()));
        return 0;
      });
      gloo::allgather(o);
    });
  }

  void broadcast(Tensor& t, int root) override {
    if (size() == 1 || t.numel() == 0) return;
    run("broadcast", t, [&] {
      gloo::BroadcastOptions o(ctx_);
      o.setTimeout(timeout());
      o.setTag(next_tag());
      o.setRoot(root);
      element_fn(t.dtype(), [&](auto z) {
        using T = decltype(z);
        o.setOutput(static_cast<T*>(t.raw()), static_cast<size_t>(t.numel()));
        return 0;
      });
      gloo::broadcast(o);
    });
  }

  void barrier() override {
    if (size() == 1) return;
    run("barrier", Tensor(), [&] {
      gloo::BarrierOptions o(ctx_);
      o.setTimeout(timeout());
      o.setTag(next_tag());
      gloo::barrier(o);
    });
  }

  std::unique_ptr<Request> post(const Tensor& t, int peer, bool is_send) {
    if (peer < 0 || peer >= size() || peer == rank())
      throw_runtime(is_send ? "send" : "recv", ": bad peer ", peer, " in group '", name_, "' of size ", size());
    // Slots pair the k-th send A->B with the k-th receive on B from A; the prefix keeps them
    // apart from Gloo's own collective slots.
    uint64_t seq = is_send ? send_seq_[static_cast<size_t>(peer)]++ : recv_seq_[static_cast<size_t>(peer)]++;
    uint64_t slot = (uint64_t{0xD1} << 56) | seq;
    auto buf = ctx_->createUnboundBuffer(t.raw(), t.nbytes());
    std::string what = std::string(is_send ? "send" : "recv");
    try {  // posting returns at once; the wait is what takes time
      if (is_send) buf->send(peer, slot);
      else buf->recv(peer, slot);
    } catch (const std::exception& e) {
      fail(what, t, e.what(), peer);
    }
    return std::make_unique<GlooRequest>(this, std::move(buf), is_send, peer, what + " of " + t.describe());
  }
  std::unique_ptr<Request> isend(const Tensor& t, int peer) override { return post(t, peer, true); }
  std::unique_ptr<Request> irecv(Tensor& t, int peer) override { return post(t, peer, false); }

  std::unique_ptr<Comm> subgroup(const std::vector<int>& members, const std::string& name) override {
    int me = -1;
    std::vector<int> world;
    for (size_t i = 0; i < members.size(); ++i) {
      if (members[i] == rank()) me = static_cast<int>(i);
      world.push_back(world_ranks_[static_cast<size_t>(members[i])]);
    }
    if (me < 0) throw_runtime("subgroup '", name, "': rank ", rank(), " is not a member");
    auto ctx = std::make_shared<gloo::rendezvous::Context>(me, static_cast<int>(members.size()));
    ctx->setTimeout(timeout());
    gloo::rendezvous::PrefixStore prefixed("group/" + name + "/" + ranks_text(world), *shared_->store);
    try {
      ctx->connectFullMesh(prefixed, shared_->device);
    } catch (const std::exception& e) {
      throw_runtime("connecting group '", name, "' (world ranks ", ranks_text(world), ") failed: ", e.what());
    }
    return std::make_unique<GlooComm>(shared_, ctx, name, world);
  }

  void add_seconds(double s) { seconds_ += s; }

 private:
  uint32_t next_tag() { return tag_++ & 0xFFFFFF; }

  std::shared_ptr<Shared> shared_;
  std::shared_ptr<gloo::Context> ctx_;
  std::string name_;
  std::vector<int> world_ranks_;
  std::vector<uint64_t> send_seq_, recv_seq_;
  uint32_t tag_ = 1;
  double seconds_ = 0;
};

GlooRequest::~GlooRequest() {
  // A request dropped without wait() (an exception unwinding) must not leave Gloo writing into
  // freed memory: abort it.
  if (!done_) {
    if (send_) buf_->abortWaitSend();
    else buf_->abortWaitRecv();
  }
}

void GlooRequest::wait() {
  if (done_) return;
  comm_->run(what_, Tensor(), [&] {
    bool ok = send_ ? buf_->waitSend(comm_->timeout()) : buf_->waitRecv(comm_->timeout());
    if (!ok) throw std::runtime_error("aborted");
  }, peer_);
  done_ = true;
}

// The IPv4 address this host sends from to reach `peer` (the routing table's choice; connecting
// a UDP socket sends nothing). Empty when the peer does not resolve or is unreachable.
std::string local_address_towards(const std::string& peer) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(peer.c_str(), "9", &hints, &res) != 0 || !res) return "";
  std::string out;
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_in me{};
    socklen_t len = sizeof me;
    char text[INET_ADDRSTRLEN] = {};
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&me), &len) == 0 &&
        ::inet_ntop(AF_INET, &me.sin_addr, text, sizeof text))
      out = text;
  }
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(res);
  return out;
}

// The address Gloo binds and advertises: loopback when every rank is local; across nodes the
// address that reaches rank 0's host (the host name often resolves to 127.0.1.1, which a peer
// would dial in vain until the timeout), else the host name. DL_GLOO_HOST overrides.
std::string device_hostname(const LaunchEnv& env) {
  if (const char* h = std::getenv("DL_GLOO_HOST")) return h;
  if (env.local_world == env.world) return "127.0.0.1";
  if (!env.master_addr.empty()) {
    const std::string a = local_address_towards(env.master_addr);
    if (!a.empty() && a.rfind("127.", 0) != 0) return a;
  }
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  return host;
}

}  // namespace

std::unique_ptr<Comm> make_gloo_world(const LaunchEnv& env, double timeout_s) {
  auto shared = std::make_shared<Shared>();
  shared->timeout_s = timeout_s;
  if (!env.store_dir.empty()) {
    std::filesystem::create_directories(env.store_dir);
    shared->base = std::make_unique<gloo::rendezvous::FileStore>(env.store_dir);
  } else {
    shared->base = std::make_unique<GlooStoreAdapter>(
        make_tcp_store(env.master_addr, env.master_port, env.rank == 0, timeout_s), timeout_s);
  }
  shared->store = std::make_unique<gloo::rendezvous::PrefixStore>("dlkit/" + env.run_id, *shared->base);
  gloo::transport::tcp::attr attr;
  attr.hostname = device_hostname(env);
  try {
    shared->device = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    throw_runtime("cannot create a Gloo TCP device on '", attr.hostname, "': ", e.what(),
                  " (set DL_GLOO_HOST to this node's address)");
  }
  auto ctx = std::make_shared<gloo::rendezvous::Context>(env.rank, env.world);
  ctx->setTimeout(ms(static_cast<int64_t>(timeout_s * 1000)));
  try {
    ctx->connectFullMesh(*shared->store, shared->device);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    // Gloo's file store refuses a key written twice: two processes claimed the same rank.
    const bool duplicate = std::string(e.what()).find("already exists") != std::string::npos;
    if (duplicate)
      throw_runtime("rendezvous in ", env.store_dir, " failed for rank ", env.rank, ": another process already "
                    "registered as rank ", env.rank, " (give each node its own --node-rank, and use a fresh --rdzv "
                    "folder for every run)");
    throw_runtime("rendezvous of ", env.world, " ranks failed for rank ", env.rank, ": ", e.what(),
                  " (are all ranks started? every wait gives up after [dist] timeout_s = ", timeout_s, " s)");
  }
  std::vector<int> world(static_cast<size_t>(env.world));
  for (int i = 0; i < env.world; ++i) world[static_cast<size_t>(i)] = i;
  return std::make_unique<GlooComm>(shared, ctx, "world", world);
}

}  // namespace dl::dist
