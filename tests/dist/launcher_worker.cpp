// A program for tests/dist/test_launcher.cpp, both sides of dl::dist::launch_local_ranks:
//   launcher_worker NPROC DIR   (no DL_RANK) starts NPROC ranks of itself and returns the
//                               launcher's exit code;
//   as a rank                   writes one line to stdout and one to stderr, creates DIR/ready.N
//                               once its signal handlers are in place, then waits for SIGINT or
//                               SIGTERM: "got signal S" on stderr and exit 130, or exit 1 when
//                               none arrives within 20 s (a rank the launcher did not reach).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "dl/cli/app.hpp"
#include "dl/dist/launcher.hpp"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: launcher_worker NPROC DIR\n");
    return 2;
  }
  const char* rank_env = std::getenv("DL_RANK");
  if (!rank_env) {
    dl::dist::LaunchOptions o;
    o.nproc_per_node = std::atoi(argv[1]);
    o.args = {argv[1], argv[2]};
    return dl::run_tool("launcher_worker", [&] { return dl::dist::launch_local_ranks(o); });
  }
  dl::dist::bind_to_launcher();
  dl::install_interrupt_handlers();
  const int rank = std::atoi(rank_env);
  std::printf("data from rank %d\n", rank);
  std::fflush(stdout);
  std::fprintf(stderr, "log from rank %d\n", rank);
  std::fflush(stderr);
  std::ofstream(std::string(argv[2]) + "/ready." + std::to_string(rank)) << rank << "\n";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    if (int sig = dl::interrupt_signal()) {
      std::fprintf(stderr, "got signal %d\n", sig);
      return 130;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::fprintf(stderr, "no signal within 20 s\n");
  return 1;
}
