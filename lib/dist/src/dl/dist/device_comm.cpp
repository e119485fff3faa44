#include "dl/dist/device_comm.hpp"

#include <chrono>
#include <utility>


namespace dl::dist {

namespace {

Tensor host_twin(const Tensor& t) { return Tensor::empty(t.shape(), t.dtype()); }

// A receive staged through host memory: the host receive, then the copy to the device.
class StagedRecv final : public Request {
 public:
  StagedRecv(std::unique_ptr<Request> inner, Tensor host, Tensor dst, const DeviceCopy& copy)
      : inner_(std::move(inner)), host_(std::move(host)), dst_(std::move(dst)), copy_(copy) {}
  void wait() override {
    if (done_) return;
    inner_->wait();
    copy_(dst_, host_);
    done_ = true;
  }

 private:
  std::unique_ptr<Request> inner_;
  Tensor host_, dst_;
  DeviceCopy copy_;
  bool done_ = false;
};

// A send staged through host memory keeps its host copy alive until the send completes.
class StagedSend final : public Request {
 public:
  StagedSend(std::unique_ptr<Request> inner, Tensor host) : inner_(std::move(inner)), host_(std::move(host)) {}
  void wait() override { inner_->wait(); }

 private:
  std::unique_ptr<Request> inner_;
  Tensor host_;
};

class DeviceComm final : public Comm {
 public:
  DeviceComm(std::unique_ptr<Comm> host, DeviceCopy copy, std::unique_ptr<DeviceCollectives> dev)
      : host_(std::move(host)), copy_(std::move(copy)), dev_(std::move(dev)) {}

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  const std::string& name() const override { return host_->name(); }
  const std::vector<int>& world_ranks() const override { return host_->world_ranks(); }
  double seconds_in_comm() const override { return host_->seconds_in_comm() + device_seconds_; }

  void allreduce(Tensor& t, ReduceOp op) override {
    if (t.device().is_cpu()) return host_->allreduce(t, op);
    if (size() == 1 || t.numel() == 0) return;
    timed([&] {
      if (dev_) return dev_->allreduce(t, op);
      Tensor h = to_host(t);
      host_->allreduce(h, op);
      copy_(t, h);
    });
  }

  void reduce_scatter(const Tensor& in, Tensor& out) override {
    in_to_out(in, out, &Comm::reduce_scatter, &DeviceCollectives::reduce_scatter);
  }

  void allgather(const Tensor& in, Tensor& out) override {
    in_to_out(in, out, &Comm::allgather, &DeviceCollectives::allgather);
  }

  void broadcast(Tensor& t, int root) override {
    if (t.device().is_cpu()) return host_->broadcast(t, root);
    if (size() == 1 || t.numel() == 0) return;
    timed([&] {
      if (dev_) return dev_->broadcast(t, root);
      Tensor h = to_host(t);
      host_->broadcast(h, root);
      copy_(t, h);
    });
  }

  void barrier() override { host_->barrier(); }

  std::unique_ptr<Request> isend(const Tensor& t, int peer) override {
    if (t.device().is_cpu()) return host_->isend(t, peer);
    if (dev_) return dev_->isend(t, peer);
    Tensor h = to_host(t);
    auto inner = host_->isend(h, peer);
    return std::make_unique<StagedSend>(std::move(inner), std::move(h));
  }

  std::unique_ptr<Request> irecv(Tensor& t, int peer) override {
    if (t.device().is_cpu()) return host_->irecv(t, peer);
    if (dev_) return dev_->irecv(t, peer);
    Tensor h = host_twin(t);
    auto inner = host_->irecv(h, peer);
    return std::make_unique<StagedRecv>(std::move(inner), std::move(h), t, copy_);
  }

  std::unique_ptr<Comm> subgroup(const std::vector<int>& members, const std::string& name) override {
    std::unique_ptr<Comm> sub = host_->subgroup(members, name);
    std::unique_ptr<DeviceCollectives> dev = dev_ ? dev_->for_group(*sub) : nullptr;
    return std::make_unique<DeviceComm>(std::move(sub), copy_, std::move(dev));
  }

 private:
  Tensor to_host(const Tensor& t) {
    Tensor h = host_twin(t);
    copy_(h, t);
    return h;
  }
  // A collective from `in` to `out` (reduce-scatter, all-gather): host tensors to the host comm;
  // device ones to the device collectives, or staged through host memory; a group of one copies.
  void in_to_out(const Tensor& in, Tensor& out, void (Comm::*host_op)(const Tensor&, Tensor&),
                 void (DeviceCollectives::*dev_op)(const Tensor&, Tensor&)) {
    if (in.device().is_cpu() && out.device().is_cpu()) return (host_.get()->*host_op)(in, out);
    timed([&] {
      if (size() == 1) return copy_(out, in);
      if (dev_) return (dev_.get()->*dev_op)(in, out);
      Tensor hi = to_host(in), ho = host_twin(out);
      (host_.get()->*host_op)(hi, ho);
      copy_(out, ho);
    });
  }
  template <class F>
  void timed(F&& fn) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    if (dev_) device_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  std::unique_ptr<Comm> host_;
  DeviceCopy copy_;
  std::unique_ptr<DeviceCollectives> dev_;
  double device_seconds_ = 0;  // NCCL time (staged calls are counted by the host comm)
};

}  // namespace

std::unique_ptr<Comm> make_device_comm(std::unique_ptr<Comm> host, DeviceCopy copy,
                                       const DeviceCollectivesFactory& factory, std::string* path) {
  if (path) path->clear();
  std::unique_ptr<DeviceCollectives> dev;
  if (host->size() > 1) {
    std::string why = "this build has no NCCL";
    if (factory) dev = factory(*host, &why);
    if (path)
      *path = dev ? dev->name() + " over " + std::to_string(host->size()) + " GPUs"
                  : "staged through host memory over Gloo (" + why + "): correct, slower than NCCL";
  }
  return std::make_unique<DeviceComm>(std::move(host), std::move(copy), std::move(dev));
}

}  // namespace dl::dist
