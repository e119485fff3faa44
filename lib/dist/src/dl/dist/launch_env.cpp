#include "dl/dist/launch_env.hpp"

#include <unistd.h>  // environ

#include <cctype>
#include <cstdlib>

#include "dl/core/error.hpp"

namespace dl::dist {

namespace {

const std::string* get(const EnvMap& env, const std::string& key) {
  auto it = env.find(key);
  return it == env.end() || it->second.empty() ? nullptr : &it->second;
}

int to_int(const EnvMap& env, const std::string& key, const std::string& source) {
  const std::string* v = get(env, key);
  if (!v) throw_usage(source, " environment: ", key, " is not set");
  char* end = nullptr;
  long x = std::strtol(v->c_str(), &end, 10);
  if (end == v->c_str() || *end != '\0' || x < 0 || x > (1 << 24))
    throw_usage(source, " environment: ", key, "='", *v, "' is not a non-negative integer");
  return static_cast<int>(x);
}

int to_int_or(const EnvMap& env, const std::string& key, const std::string& source, int fallback) {
  return get(env, key) ? to_int(env, key, source) : fallback;
}

void check_rank(const LaunchEnv& e, const char* rank_key, const char* world_key) {
  if (e.world < 1) throw_usage(e.source, " environment: ", world_key, " must be at least 1");
  if (e.rank >= e.world)
    throw_usage(e.source, " environment: ", rank_key, "=", e.rank, " is not below ", world_key, "=", e.world,
                " (the launcher's variables contradict each other)");
  if (e.local_rank >= e.local_world)
    throw_usage(e.source, " environment: local rank ", e.local_rank, " is not below the local world size ",
                e.local_world);
}

// Where the rendezvous store lives: MASTER_ADDR/MASTER_PORT (torchrun style) or none.
void master_from(const EnvMap& env, LaunchEnv& e, const std::string& default_addr) {
  if (const std::string* a = get(env, "MASTER_ADDR")) e.master_addr = *a;
  else e.master_addr = default_addr;
  e.master_port = to_int_or(env, "MASTER_PORT", e.source, 29500);
}

}  // namespace

EnvMap process_environment() {
  EnvMap m;
  for (char** p = environ; p && *p; ++p) {
    std::string kv = *p;
    auto eq = kv.find('=');
    if (eq != std::string::npos) m[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return m;
}

std::string first_slurm_host(const std::string& nodelist) {
  // The first entry ends at a comma outside brackets.
  std::string first;
  int depth = 0;
  for (char c : nodelist) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) break;
    first += c;
  }
  auto lb = first.find('[');
  if (lb == std::string::npos) return first;
  // node[01-04,07] -> node01: the first number of the first range, keeping its zero padding.
  std::string prefix = first.substr(0, lb);
  std::string inside = first.substr(lb + 1);
  size_t end = inside.find_first_of("-,]");
  return prefix + inside.substr(0, end);
}

LaunchEnv detect_launch_env(const EnvMap& env) {
  LaunchEnv e;
  if (get(env, "DL_RANK")) {
    e.source = "dlkit";
    e.rank = to_int(env, "DL_RANK", e.source);
    e.world = to_int(env, "DL_WORLD_SIZE", e.source);
    e.local_rank = to_int(env, "DL_LOCAL_RANK", e.source);
    e.local_world = to_int(env, "DL_LOCAL_WORLD_SIZE", e.source);
    if (const std::string* d = get(env, "DL_RDZV_DIR")) e.store_dir = *d;
    else master_from(env, e, "");
    if (e.store_dir.empty() && e.master_addr.empty())
      throw_usage("dlkit launcher environment: neither DL_RDZV_DIR nor MASTER_ADDR is set");
    if (const std::string* r = get(env, "DL_RUN_ID")) e.run_id = *r;
    e.launcher_pid = to_int_or(env, "DL_LAUNCHER_PID", e.source, 0);
    check_rank(e, "DL_RANK", "DL_WORLD_SIZE");
    return e;
  }
  const bool torchrun = get(env, "RANK") || get(env, "WORLD_SIZE");
  const bool ompi = get(env, "OMPI_COMM_WORLD_RANK") || get(env, "OMPI_COMM_WORLD_SIZE");
  const bool slurm = get(env, "SLURM_PROCID") != nullptr;
  // The variables that hold the rank and world size, named in errors: the branch that recognises
  // the launcher sets them, so nothing compares e.source afterwards.
  const char* rank_key = "RANK";
  const char* world_key = "WORLD_SIZE";
  if (torchrun) {
    e.source = "torchrun";
    if (!get(env, "RANK")) throw_usage("torchrun environment: WORLD_SIZE is set but RANK is not (torchrun sets both)");
    if (!get(env, "WORLD_SIZE")) throw_usage("torchrun environment: RANK is set but WORLD_SIZE is not (torchrun sets both)");
    e.rank = to_int(env, "RANK", e.source);
    e.world = to_int(env, "WORLD_SIZE", e.source);
    e.local_rank = to_int_or(env, "LOCAL_RANK", e.source, e.rank);
    e.local_world = to_int_or(env, "LOCAL_WORLD_SIZE", e.source, e.world);
    // Another launcher's variables in the same environment must agree.
    if (ompi && get(env, "OMPI_COMM_WORLD_RANK") && to_int(env, "OMPI_COMM_WORLD_RANK", "openmpi") != e.rank)
      throw_usage("RANK=", e.rank, " contradicts OMPI_COMM_WORLD_RANK=", *get(env, "OMPI_COMM_WORLD_RANK"));
    if (e.world > 1 && !get(env, "MASTER_ADDR"))
      throw_usage("torchrun environment: WORLD_SIZE=", e.world, " but MASTER_ADDR is not set (set MASTER_ADDR and "
                  "MASTER_PORT to rank 0's host and a free port)");
    master_from(env, e, "127.0.0.1");
  } else if (ompi) {
    e.source = "openmpi";
    rank_key = "OMPI_COMM_WORLD_RANK", world_key = "OMPI_COMM_WORLD_SIZE";
    e.rank = to_int(env, "OMPI_COMM_WORLD_RANK", e.source);
    e.world = to_int(env, "OMPI_COMM_WORLD_SIZE", e.source);
    e.local_rank = to_int_or(env, "OMPI_COMM_WORLD_LOCAL_RANK", e.source, e.rank);
    e.local_world = to_int_or(env, "OMPI_COMM_WORLD_LOCAL_SIZE", e.source, e.world);
    // mpirun sets ranks but no rendezvous address: on one node (every rank local, as mpirun says
    // in OMPI_COMM_WORLD_LOCAL_SIZE) it is this host; across nodes it must be given.
    const bool one_node = get(env, "OMPI_COMM_WORLD_LOCAL_SIZE") && e.local_world == e.world;
    if (e.world > 1 && !get(env, "MASTER_ADDR") && !one_node)
      throw_usage("Open MPI environment across nodes: set MASTER_ADDR (rank 0's host) and MASTER_PORT for the "
                  "rendezvous, e.g. mpirun -x MASTER_ADDR=$(hostname) -x MASTER_PORT=29500 dl-train ...");
    master_from(env, e, "127.0.0.1");
  } else if (slurm) {
    e.source = "slurm";
    rank_key = "SLURM_PROCID", world_key = "SLURM_NTASKS";
    e.rank = to_int(env, "SLURM_PROCID", e.source);
    e.world = to_int(env, "SLURM_NTASKS", e.source);
    e.local_rank = to_int_or(env, "SLURM_LOCALID", e.source, 0);
    e.local_world = to_int_or(env, "SLURM_NTASKS_PER_NODE", e.source, 0);
    if (e.local_world == 0) {
      // SLURM_TASKS_PER_NODE looks like "4(x2)" or "4,3": the first count is this node's upper bound.
      const std::string* tpn = get(env, "SLURM_TASKS_PER_NODE");
      e.local_world = tpn ? std::max(1, std::atoi(tpn->c_str())) : e.world;
    }
    std::string host;
    if (const std::string* nl = get(env, "SLURM_JOB_NODELIST")) host = first_slurm_host(*nl);
    else if (const std::string* nl2 = get(env, "SLURM_NODELIST")) host = first_slurm_host(*nl2);
    if (e.world > 1 && host.empty() && !get(env, "MASTER_ADDR"))
      throw_usage("Slurm environment: SLURM_NTASKS=", e.world, " but neither SLURM_JOB_NODELIST nor MASTER_ADDR is set");
    master_from(env, e, host);
    if (const std::string* j = get(env, "SLURM_JOB_ID")) e.run_id = "slurm-" + *j + "-" + (get(env, "SLURM_STEP_ID") ? *get(env, "SLURM_STEP_ID") : "0");
  } else {
    return e;
  }
  if (e.local_world > e.world) e.local_world = e.world;
  check_rank(e, rank_key, world_key);
  return e;
}

LaunchRole launch_role(int nproc_per_node, int nnodes, const EnvMap& env) {
  if (env.count("DL_RANK")) return LaunchRole::dlkit_rank;
  if (detect_launch_env(env).distributed()) return LaunchRole::external_rank;
  return nproc_per_node > 1 || nnodes > 1 ? LaunchRole::launcher : LaunchRole::single;
}

}  // namespace dl::dist
