#include "dl/dist/comm.hpp"

#include "dl/core/error.hpp"

namespace dl::dist {

namespace {

class SelfComm final : public Comm {
 public:
  explicit SelfComm(std::string name) : name_(std::move(name)) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::string& name() const override { return name_; }
  const std::vector<int>& world_ranks() const override { return ranks_; }
  void allreduce(Tensor&, ReduceOp) override {}
  void reduce_scatter(const Tensor& in, Tensor& out) override { out.copy_from(in.view(out.shape())); }
  void allgather(const Tensor& in, Tensor& out) override { out.copy_from(in.view(out.shape())); }
  void broadcast(Tensor&, int) override {}
  void barrier() override {}
  std::unique_ptr<Request> isend(const Tensor&, int peer) override { no_peer(peer); }
  std::unique_ptr<Request> irecv(Tensor&, int peer) override { no_peer(peer); }
  std::unique_ptr<Comm> subgroup(const std::vector<int>& members, const std::string& name) override {
    if (members != std::vector<int>{0}) throw_runtime("subgroup of a single-process group must be {0}");
    return std::make_unique<SelfComm>(name);
  }
  double seconds_in_comm() const override { return 0; }

 private:
  [[noreturn]] void no_peer(int peer) const { throw_runtime("group '", name_, "' has one rank: no peer ", peer); }
  std::string name_;
  std::vector<int> ranks_{0};
};

}  // namespace

std::unique_ptr<Comm> make_self_comm(const std::string& name) { return std::make_unique<SelfComm>(name); }

}  // namespace dl::dist
