#include "dl/device/cuda/nccl.hpp"

#include <cuda_runtime.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <map>
#include <thread>
#include <vector>

#ifdef DL_HAVE_NCCL
#include <nccl.h>
#endif

#include "dl/device/cuda/cuda_backend.hpp"
#include "dl/device/cuda/cuda_check.hpp"

namespace dl {

namespace {

using dist::Request;

// hostname/PCI bus id of this process's GPU: equal strings are one physical GPU.
std::string gpu_identity() {
  int dev = 0;
  DL_CUDA_CALL(cudaGetDevice(&dev), "NCCL setup");
  char bus[64] = {0};
  DL_CUDA_CALL(cudaDeviceGetPCIBusId(bus, sizeof bus - 1, dev), "NCCL setup");
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  return std::string(host) + "/" + bus;
}

// Every rank's string (at most 255 bytes each), by group rank.
std::vector<std::string> allgather_strings(dist::Comm& c, const std::string& s) {
  constexpr int64_t kLen = 256;
  Tensor in = Tensor::zeros({kLen}, DType::u8), out = Tensor::zeros({kLen * c.size()}, DType::u8);
  std::memcpy(in.raw(), s.data(), std::min<size_t>(s.size(), kLen - 1));
  c.allgather(in, out);
  std::vector<std::string> all;
  for (int r = 0; r < c.size(); ++r) all.emplace_back(static_cast<const char*>(out.raw()) + r * kLen);
  return all;
}

std::string ranks_text(const std::vector<int>& r) {
  std::string s;
  for (size_t i = 0; i < r.size(); ++i) s += (i ? "," : "") + std::to_string(r[i]);
  return s;
}

#ifdef DL_HAVE_NCCL

ncclDataType_t nccl_type(DType dt) {
  switch (dt) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    case DType::u8: return ncclUint8;
    default: throw_runtime("NCCL: no NCCL type for ", dtype_name(dt), " tensors");
  }
}

ncclRedOp_t nccl_op(dist::ReduceOp op) {
  switch (op) {
    case dist::ReduceOp::sum: return ncclSum;
    case dist::ReduceOp::max: return ncclMax;
    case dist::ReduceOp::min: return ncclMin;
  }
  return ncclSum;
}

class NcclCollectives;

class NcclRequest final : public Request {
 public:
  NcclRequest(NcclCollectives* owner, uint64_t ticket) : owner_(owner), ticket_(ticket) {}
  void wait() override;

 private:
  NcclCollectives* owner_;
  uint64_t ticket_;
};

class NcclCollectives final : public dist::DeviceCollectives {
 public:
  NcclCollectives(dist::Comm& host, double timeout_s)
      : be_(cuda_backend()), timeout_s_(timeout_s), world_ranks_(host.world_ranks()), group_(host.name()) {
    stream_ = static_cast<cudaStream_t>(be_.native_stream());
    ncclUniqueId id;
    if (host.rank() == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId", Tensor());
    Tensor t = Tensor::zeros({static_cast<int64_t>(sizeof id)}, DType::u8);
    std::memcpy(t.raw(), &id, sizeof id);
    host.broadcast(t, 0);
    std::memcpy(&id, t.raw(), sizeof id);
    // Non-blocking communicator: a peer that never arrives is a timeout, not a hang.
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(&comm_, host.size(), id, host.rank(), &config);
    if (r != ncclSuccess && r != ncclInProgress) fail("ncclCommInitRankConfig", Tensor(), ncclGetErrorString(r));
    settle("ncclCommInitRankConfig", Tensor());
    int v = 0;
    ncclGetVersion(&v);
    name_ = str("NCCL ", v / 10000, ".", (v / 100) % 100, ".", v % 100);
  }
  ~NcclCollectives() override {
    if (comm_) {
      // Unfinished work (an error path) must not block the exit.
      ncclCommAbort(comm_);
    }
  }

  std::string name() const override { return name_; }

  void allreduce(Tensor& t, dist::ReduceOp op) override {
    check(ncclAllReduce(t.raw(), t.raw(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()), nccl_op(op), comm_,
                        stream_),
          "ncclAllReduce", t);
    finish("allreduce", t);
  }
  void reduce_scatter(const Tensor& in, Tensor& out) override {
    check(ncclReduceScatter(in.raw(), out.raw(), static_cast<size_t>(out.numel()), nccl_type(in.dtype()), ncclSum,
                            comm_, stream_),
          "ncclReduceScatter", in);
    finish("reduce_scatter", in);
  }
  void allgather(const Tensor& in, Tensor& out) override {
    check(ncclAllGather(in.raw(), out.raw(), static_cast<size_t>(in.numel()), nccl_type(in.dtype()), comm_, stream_),
          "ncclAllGather", in);
    finish("allgather", in);
  }
  void broadcast(Tensor& t, int root) override {
    check(ncclBroadcast(t.raw(), t.raw(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()), root, comm_, stream_),
          "ncclBroadcast", t);
    finish("broadcast", t);
  }

  std::unique_ptr<Request> isend(const Tensor& t, int peer) override { return queue(t, peer, true); }
  std::unique_ptr<Request> irecv(Tensor& t, int peer) override { return queue(t, peer, false); }

  std::unique_ptr<dist::DeviceCollectives> for_group(dist::Comm& host_group) override {
    return std::make_unique<NcclCollectives>(host_group, timeout_s_);
  }

  void set_wait_for_completion(bool wait) override { wait_ = wait; }
  void synchronize() override { wait_for_stream("synchronize", Tensor()); }

  // Issues every queued send/receive up to `ticket` (and after) as one NCCL group, then waits.
  void flush(uint64_t ticket) {
    if (ticket < issued_) return;
    std::vector<Pending> batch;
    batch.swap(pending_);
    check(ncclGroupStart(), "ncclGroupStart", Tensor());
    for (const auto& p : batch) {
      if (p.send)
        check(ncclSend(p.t.raw(), static_cast<size_t>(p.t.numel()), nccl_type(p.t.dtype()), p.peer, comm_, stream_),
              "ncclSend", p.t);
      else
        check(ncclRecv(p.t.raw(), static_cast<size_t>(p.t.numel()), nccl_type(p.t.dtype()), p.peer, comm_, stream_),
              "ncclRecv", p.t);
    }
    ncclResult_t r = ncclGroupEnd();
    if (r != ncclSuccess && r != ncclInProgress) fail("ncclGroupEnd", Tensor(), ncclGetErrorString(r));
    issued_ = next_ticket_;
    finish("send/recv", batch.empty() ? Tensor() : batch.front().t);
  }

 private:
  struct Pending {
    Tensor t;
    int peer = 0;
    bool send = false;
  };

  std::unique_ptr<Request> queue(const Tensor& t, int peer, bool send) {
    pending_.push_back({t, peer, send});
    return std::make_unique<NcclRequest>(this, next_ticket_++);
  }

  // A call's immediate result: success or "in progress" (non-blocking communicator).
  void check(ncclResult_t r, const char* call, const Tensor& t) {
    if (r == ncclSuccess || r == ncclInProgress) return;
    fail(call, t, ncclGetErrorString(r));
  }
  // Waits until the communicator has no call in progress (non-blocking init and enqueue).
  void settle(const char* what, const Tensor& t) {
    const auto t0 = std::chrono::steady_clock::now();
    for (;;) {
      ncclResult_t state = ncclSuccess;
      ncclCommGetAsyncError(comm_, &state);
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) fail(what, t, ncclGetErrorString(state));
      if (elapsed(t0) > timeout_s_) fail(what, t, "timed out");
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  // The queued collective's end: enqueued, then (unless a benchmark asked not to wait) done.
  void finish(const char* op, const Tensor& t) {
    settle(op, t);
    if (wait_) wait_for_stream(op, t);
  }
  // Waits for the stream to finish what is queued, watching for NCCL errors and the timeout
  // (what PyTorch's watchdog does, inline).
  void wait_for_stream(const char* op, const Tensor& t) {
    const auto t0 = std::chrono::steady_clock::now();
    for (;;) {
      cudaError_t e = cudaStreamQuery(stream_);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) DL_CUDA_CALL(e, "NCCL ", op, " of ", t.defined() ? t.describe() : std::string("-"));
      ncclResult_t state = ncclSuccess;
      ncclCommGetAsyncError(comm_, &state);
      if (state != ncclSuccess && state != ncclInProgress) fail(op, t, ncclGetErrorString(state));
      if (elapsed(t0) > timeout_s_) fail(op, t, "timed out");
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  static double elapsed(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  [[noreturn]] void fail(const char* op, const Tensor& t, const std::string& why) {
    if (comm_) {
      ncclCommAbort(comm_);  // the communicator is unusable after an error or a timeout
      comm_ = nullptr;
    }
    throw_runtime("NCCL ", op, " of ", t.defined() ? t.describe() : std::string("-"), " in group '", group_,
                  "' (world ranks ", ranks_text(world_ranks_), ") failed: ", why,
                  ". A peer may have exited or hung; every wait gives up after [dist] timeout_s = ", timeout_s_, " s");
  }

  CudaBackend& be_;
  cudaStream_t stream_ = nullptr;
  ncclComm_t comm_ = nullptr;
  double timeout_s_;
  std::vector<int> world_ranks_;
  std::string group_, name_;
  std::vector<Pending> pending_;
  uint64_t next_ticket_ = 0, issued_ = 0;
  bool wait_ = true;
};

void NcclRequest::wait() { owner_->flush(ticket_); }

#endif  // DL_HAVE_NCCL

}  // namespace

std::unique_ptr<dist::DeviceCollectives> make_nccl_collectives(dist::Comm& host, double timeout_s, std::string* why) {
  cuda_backend();  // binds this process's GPU first
  const std::vector<std::string> ids = allgather_strings(host, gpu_identity());
  std::map<std::string, int> first;
  for (int r = 0; r < static_cast<int>(ids.size()); ++r) {
    auto [it, fresh] = first.emplace(ids[static_cast<size_t>(r)], r);
    if (!fresh) {
      if (why)
        *why = str("ranks ", host.world_ranks()[static_cast<size_t>(it->second)], " and ",
                   host.world_ranks()[static_cast<size_t>(r)], " share GPU ", ids[static_cast<size_t>(r)]);
      return nullptr;
    }
  }
#ifdef DL_HAVE_NCCL
  return std::make_unique<NcclCollectives>(host, timeout_s);
#else
  (void)timeout_s;
  if (why) *why = "this build has no NCCL";
  return nullptr;
#endif
}

}  // namespace dl
