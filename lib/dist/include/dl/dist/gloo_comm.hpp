// The CPU communicator: Gloo over TCP, rendezvous through a shared folder (Gloo's file store)
// or a TCP store served by rank 0.
#pragma once
#include <memory>

#include "dl/dist/comm.hpp"
#include "dl/dist/launch_env.hpp"

namespace dl::dist {

// The world group for this process. Blocks until every rank has joined (or timeout_s passes).
std::unique_ptr<Comm> make_gloo_world(const LaunchEnv& env, double timeout_s);

}  // namespace dl::dist
