// Who am I in a multi-process run: rank and world from the environment that started us.
// Recognised, in this order: dlkit's own launcher (DL_*), torchrun (RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), Open MPI (OMPI_COMM_WORLD_*), Slurm
// srun (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_JOB_NODELIST). A missing or
// contradictory environment is a usage error that says what is wrong, never a hang.
#pragma once
#include <map>
#include <string>
#include <vector>

namespace dl::dist {

struct LaunchEnv {
  std::string source = "single";  // "single" | "dlkit" | "torchrun" | "openmpi" | "slurm"
  int rank = 0;
  int world = 1;
  int local_rank = 0;
  int local_world = 1;
  // Rendezvous: a shared folder for Gloo's file store, or a host:port of a TCP store that
  // rank 0 serves.
  std::string store_dir;
  std::string master_addr;
  int master_port = 0;
  std::string run_id;  // separates the store keys of different launches sharing a store
  int launcher_pid = 0;  // dlkit's launcher: children die with it
  bool distributed() const { return world > 1; }
};

using EnvMap = std::map<std::string, std::string>;
EnvMap process_environment();

// Pure function of the environment (tests pass their own maps).
LaunchEnv detect_launch_env(const EnvMap& env);

// What a tool's process is in a multi-process run, decided here once for every tool that starts
// ranks (dl-train, dl-bench). `nproc_per_node` and `nnodes` are what its command line asks for.
// A launch around the process wins over the command line, so a rank never starts ranks of its
// own. Throws detect_launch_env's usage errors for a missing or contradictory environment.
enum class LaunchRole {
  single,         // no launch around it and one rank asked for: it runs alone
  launcher,       // no launch around it and more ranks asked for: it starts them (launch_local_ranks)
  dlkit_rank,     // started by dlkit's launcher (DL_RANK is set)
  external_rank,  // started by another launcher (torchrun, srun, mpirun) with a world of several ranks
};
LaunchRole launch_role(int nproc_per_node, int nnodes, const EnvMap& env);

// First host of a Slurm host list: "node[01-04,07],gpu5" -> "node01".
std::string first_slurm_host(const std::string& nodelist);

}  // namespace dl::dist
