// Comm for a backend whose tensors live on a GPU. Host tensors (the trainer's loss and norm
// numbers) go to the host communicator (Gloo) unchanged; device tensors go to NCCL when every
// rank of the group has a GPU of its own, and otherwise (several ranks sharing one GPU, or a
// build without NCCL) are staged through host memory to the host communicator, so every
// multi-rank code path also runs on a single-GPU machine. A group of one copies on the device.
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "dl/dist/comm.hpp"

namespace dl::dist {

// Collectives over device memory with Comm's semantics (the NCCL implementation lives with the
// CUDA backend). Every call returns when the result is in place, or throws naming the operation,
// the tensor and the peers (a timeout included).
class DeviceCollectives {
 public:
  virtual ~DeviceCollectives() = default;
  virtual std::string name() const = 0;  // "NCCL 2.28.9"
  virtual void allreduce(Tensor& t, ReduceOp op) = 0;
  virtual void reduce_scatter(const Tensor& in, Tensor& out) = 0;
  virtual void allgather(const Tensor& in, Tensor& out) = 0;
  virtual void broadcast(Tensor& t, int root) = 0;
  // Point to point: queued, and issued together (one NCCL group) when any of them is waited
  // for, so "post both, then wait" never deadlocks two peers that send to each other.
  virtual std::unique_ptr<Request> isend(const Tensor& t, int peer) = 0;
  virtual std::unique_ptr<Request> irecv(Tensor& t, int peer) = 0;
  // The same collectives for a subgroup of the host communicator, bootstrapped through it.
  virtual std::unique_ptr<DeviceCollectives> for_group(Comm& host_group) = 0;
  // For benchmarks: with false, calls return once queued on the device's stream (so device
  // events time them back to back, as nccl-tests does) and synchronize() waits for all of them,
  // with the same timeout. Implementations that always wait may ignore it.
  virtual void set_wait_for_completion(bool wait) { (void)wait; }
  virtual void synchronize() {}
};

// Makes the device collectives for the ranks of `host` (every rank calls it), or returns null
// with *why set when they cannot be used (ranks share a GPU, no NCCL in this build).
using DeviceCollectivesFactory = std::function<std::unique_ptr<DeviceCollectives>(Comm& host, std::string* why)>;

// Copies a tensor between host and device memory, either direction (Backend::copy).
using DeviceCopy = std::function<void(Tensor& dst, const Tensor& src)>;

// Wraps `host` for a backend whose tensors live on a device (`copy` is its Backend::copy).
// *path says which way device tensors travel ("NCCL 2.28.9 over 2 GPUs", or "staged through
// host memory (why)"); empty for a group of one.
std::unique_ptr<Comm> make_device_comm(std::unique_ptr<Comm> host, DeviceCopy copy,
                                       const DeviceCollectivesFactory& factory, std::string* path);

}  // namespace dl::dist
