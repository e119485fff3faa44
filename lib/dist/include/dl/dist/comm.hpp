// Comm: collectives and point-to-point messages among the ranks of one group. The CPU
// implementation runs Gloo over TCP; the CUDA backend swaps in NCCL under the same interface.
// Every call blocks until done or until the group's timeout, and a timeout or a lost peer is a
// dl::Error(runtime) naming the operation, the tensor and the peers.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "dl/config/choice.hpp"
#include "dl/core/tensor.hpp"

namespace dl::dist {

enum class ReduceOp { sum, max, min };
inline constexpr std::string_view kReduceOpNames[] = {"sum", "max", "min"};
constexpr std::span<const std::string_view> choice_names(ReduceOp) { return kReduceOpNames; }

// A pending non-blocking send or receive.
class Request {
 public:
  virtual ~Request() = default;
  virtual void wait() = 0;
};

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const std::string& name() const = 0;          // "world", "dp", "tp", "pp", ...
  virtual const std::vector<int>& world_ranks() const = 0;  // members as world ranks, by group rank

  // In place over host tensors of f32, f64, i32 or i64; bf16/f16 are summed in f32 and rounded
  // back once.
  virtual void allreduce(Tensor& t, ReduceOp op = ReduceOp::sum) = 0;
  // out[n] = sum over ranks r of in[rank() * n .. (rank() + 1) * n) as contributed by r;
  // `in` holds size() * n elements.
  virtual void reduce_scatter(const Tensor& in, Tensor& out) = 0;
  // out[size() * n]: rank r's `in` (n elements) lands at out[r * n].
  virtual void allgather(const Tensor& in, Tensor& out) = 0;
  virtual void broadcast(Tensor& t, int root) = 0;
  virtual void barrier() = 0;

  // Point to point (group ranks). Matching is by order: the k-th send from A to B meets the
  // k-th receive on B from A.
  virtual std::unique_ptr<Request> isend(const Tensor& t, int peer) = 0;
  virtual std::unique_ptr<Request> irecv(Tensor& t, int peer) = 0;
  void send(const Tensor& t, int peer) { isend(t, peer)->wait(); }
  void recv(Tensor& t, int peer) { irecv(t, peer)->wait(); }

  // A communicator over `members` (group ranks of this comm, in the new group's rank order).
  // Every member calls it with the same list; non-members must not call it.
  virtual std::unique_ptr<Comm> subgroup(const std::vector<int>& members, const std::string& name) = 0;

  // Wall seconds this rank has spent inside this group's calls (the communication share of a
  // step; includes waiting for slower peers).
  virtual double seconds_in_comm() const = 0;
};

// A group of one: every collective is the identity. Used for single-process runs so the
// training code has no special cases.
std::unique_ptr<Comm> make_self_comm(const std::string& name = "world");

}  // namespace dl::dist
