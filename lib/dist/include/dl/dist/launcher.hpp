// The local launcher (like torchrun's agent): starts this node's ranks as child processes of the
// same program through Boost.Process (no shell), prefixes their log lines with the rank, passes
// rank 0's stdout through unchanged (it is data: --json metrics), forwards SIGINT/SIGTERM, and
// when a rank fails stops the others and reports which rank failed and how.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "dl/core/option_error.hpp"

namespace dl::dist {

struct LaunchOptions {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  // "" : a fresh folder for Gloo's file store (one node only); a folder path shared by every
  // node; or host:port of the TCP store that rank 0 serves.
  std::string rdzv;
  std::vector<std::string> args;  // arguments for each rank (argv[1..] of this program)
  double stop_grace_s = 5;        // SIGTERM, then SIGKILL after this long
};

// Runs the ranks to completion; returns the exit code for this process: 0 when every rank
// succeeded, 130 when they were interrupted, else the first failing rank's code (2 and 3
// kept, anything else 1).
int launch_local_ranks(const LaunchOptions& options);

// In a rank started by the launcher: die with the launcher (Linux parent-death signal), so no
// rank outlives it. No-op elsewhere.
void bind_to_launcher();

// A tool whose process may be a rank (dl-train, dl-bench): bind_to_launcher, then run_tool,
// with the library's option errors named by the tool's `flags` (dl/core/option_error.hpp).
int run_rank_tool(const std::string& tool, const std::function<int()>& body, const OptionNames& flags = {});

}  // namespace dl::dist
