// NCCL behind dist::DeviceCollectives, on the process's CUDA backend stream. Names no CUDA or
// NCCL type, so the trainer can include it in any CUDA build.
#pragma once
#include <memory>
#include <string>

#include "dl/dist/device_comm.hpp"

namespace dl {

// NCCL collectives for the ranks of `host` (every rank calls it): the unique id travels over
// `host` (the Gloo rendezvous), so no other bootstrap is needed. Returns null with *why set when
// NCCL cannot be used: two ranks of the group on one GPU (NCCL refuses duplicate devices), or a
// build without NCCL. Every wait gives up after timeout_s, aborts the communicator and throws
// naming the collective and the peers.
std::unique_ptr<dist::DeviceCollectives> make_nccl_collectives(dist::Comm& host, double timeout_s, std::string* why);

}  // namespace dl
