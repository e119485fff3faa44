// dl-train's ranks however they are started: a rank killed with SIGKILL stops the run at once and
// the last checkpoint resumes; ranks started from torchrun-, Slurm- and Open MPI-style
// environments, and two launchers meeting at a rendezvous, give the single-process losses; a
// missing or contradictory launch environment is an error, not a hang.
#include <doctest/doctest.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>

#include "support/layout_runs.hpp"
#include "support/support.hpp"

using namespace dl::test;

namespace {

// /proc/PID/FILE, or nothing when process PID has exited meanwhile (its folder is gone).
std::optional<std::string> proc_file(const fs::path& pid_dir, const char* file) {
  try {
    return read_file(pid_dir / file);
  } catch (const std::exception&) {
    if (fs::exists(pid_dir)) throw;
    return std::nullopt;
  }
}

// Folders /proc/PID of the live processes whose parent is `ppid`.
std::vector<fs::path> children_of(int ppid) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::optional<std::string> status = proc_file(e.path(), "status");
    if (!status) continue;
    auto at = status->find("PPid:\t");
    if (at != std::string::npos && std::stoi(status->substr(at + 6)) == ppid) out.push_back(e.path());
  }
  return out;
}

}  // namespace

TEST_CASE("a rank killed with SIGKILL stops the run, not waiting for the collective timeout; the last checkpoint resumes") {
  TempDir dir("layout-kill");
  write_file(dir / "c.toml", kLayoutGpt);
  // Slow enough steps that the kill lands mid-run; a checkpoint every 5 steps.
  std::vector<std::string> args = {(dir / "c.toml").string(), "--run-dir", (dir / "run").string(), "--json",
                                   "--nproc-per-node", "2", "--set", "parallel.dp=2", "--set", "train.batch_size=64",
                                   "--set", "model.n_embd=128", "--set", "train.steps=400", "--set",
                                   "train.checkpoint_every=5", "--set", "schedule.decay_steps=400"};
  Process p(tool("dl-train"), args);
  REQUIRE(p.wait_for_line([](const std::string& l) { return l.find("\"step\":12,") != std::string::npos; }, 120));
  // Find rank 1: the launcher's child whose environment says DL_RANK=1.
  int victim = -1;
  for (const auto& child : children_of(p.pid())) {
    std::optional<std::string> env = proc_file(child, "environ");
    if (env && env->find(std::string("DL_RANK=1") + '\0') != std::string::npos)
      victim = std::stoi(child.filename().string());
  }
  REQUIRE(victim > 0);
  auto t0 = std::chrono::steady_clock::now();
  ::kill(victim, SIGKILL);
  // A limit that catches a hang, not a speed bar: rank 0 left waiting in a collective would give
  // up only after dist.timeout_s (300 s); the launcher stops it at once (0.2 s here).
  int code = p.wait(60);
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(p.err());
  MESSAGE("the run stopped " << took << " s after the kill");
  CHECK(code != 0);
  CHECK(code != -1);
  CHECK(p.err().find("rank 1 exited with status 137") != std::string::npos);
  // No rank left behind: no process has the launcher as parent any more.
  CHECK(children_of(p.pid()).empty());
  // The newest complete checkpoint verifies and the run resumes from it to the end.
  RunResult r = run(tool("dl-train"), {"--resume", (dir / "run").string(), "--json", "--nproc-per-node", "2",
                                       "--set", "train.steps=20"},
                    "", {}, 300);
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.err.find("resumed from") != std::string::npos);
  CHECK(r.err.find("skipping checkpoint") == std::string::npos);
}

namespace {
int free_port() {
  // A port from the kernel's ephemeral range that is unlikely to collide between test runs.
  return 20000 + (::getpid() * 7919 + static_cast<int>(std::chrono::steady_clock::now().time_since_epoch().count() % 1000)) % 20000;
}

// Starts `n` dl-train processes by hand with per-rank environments (as torchrun, srun or
// mpirun would) and returns rank 0's curves.
Curves run_by_hand(const fs::path& cfg, const fs::path& run_dir, int n,
                   const std::function<std::vector<std::string>(int)>& env_of,
                   const std::function<std::vector<std::string>(int)>& extra_args_of) {
  std::vector<std::unique_ptr<Process>> ps;
  for (int r = 0; r < n; ++r) {
    std::vector<std::string> args = {cfg.string(), "--run-dir", run_dir.string(), "--json"};
    const std::vector<std::string> extra = extra_args_of(r);
    args.insert(args.end(), extra.begin(), extra.end());
    ps.push_back(std::make_unique<Process>(tool("dl-train"), args, env_of(r)));
  }
  for (int r = 0; r < n; ++r) {
    int code = ps[r]->wait(120);
    INFO("rank " << r << ": " << ps[r]->err());
    REQUIRE(code == 0);
  }
  return curves_of(ps[0]->out_lines());
}
}  // namespace

TEST_CASE("ranks started by torchrun-, Slurm- and Open MPI-style environments, and multi-node launchers") {
  const auto& ref = reference();
  TempDir dir("layout-env");
  write_file(dir / "c.toml", kLayoutGpt);
  const std::vector<std::string> dp2 = {"--set", "parallel.dp=2", "--set", "train.batch_size=4"};
  struct Style {
    std::string name;
    std::function<std::vector<std::string>(int, int)> env;  // (rank, port)
  };
  std::vector<Style> styles = {
      {"torchrun",
       [](int r, int port) {
         return std::vector<std::string>{"RANK=" + std::to_string(r), "WORLD_SIZE=2", "LOCAL_RANK=" + std::to_string(r),
                                         "LOCAL_WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1",
                                         "MASTER_PORT=" + std::to_string(port)};
       }},
      {"slurm",
       [](int r, int port) {
         return std::vector<std::string>{"SLURM_PROCID=" + std::to_string(r), "SLURM_NTASKS=2",
                                         "SLURM_LOCALID=" + std::to_string(r), "SLURM_TASKS_PER_NODE=2",
                                         "SLURM_JOB_NODELIST=localhost", "SLURM_JOB_ID=42",
                                         "MASTER_PORT=" + std::to_string(port)};
       }},
      {"openmpi",
       [](int r, int port) {
         return std::vector<std::string>{"OMPI_COMM_WORLD_RANK=" + std::to_string(r), "OMPI_COMM_WORLD_SIZE=2",
                                         "OMPI_COMM_WORLD_LOCAL_RANK=" + std::to_string(r),
                                         "OMPI_COMM_WORLD_LOCAL_SIZE=2", "MASTER_ADDR=127.0.0.1",
                                         "MASTER_PORT=" + std::to_string(port)};
       }},
  };
  int i = 0;
  for (const auto& s : styles) {
    CAPTURE(s.name);
    int port = free_port() + i;
    Curves c = run_by_hand(dir / "c.toml", dir / ("run-" + s.name), 2, [&](int r) { return s.env(r, port); },
                           [&](int) { return dp2; });
    REQUIRE(c.loss.size() == 20);
    check_curves(s.name, c, ref, 1e-5);
    ++i;
  }
  // Two "nodes" on one machine: a launcher per node with --nnodes 2 --node-rank k, meeting
  // through a shared folder, and through host:port.
  for (std::string rdzv : {(dir / "rdzv").string(), "127.0.0.1:" + std::to_string(free_port() + 7)}) {
    CAPTURE(rdzv);
    fs::path run_dir = dir / ("nodes" + std::to_string(i++));
    Curves c = run_by_hand(dir / "c.toml", run_dir, 2, [](int) { return std::vector<std::string>{}; },
                           [&](int node) {
                             std::vector<std::string> a = dp2;
                             a.insert(a.end(), {"--nproc-per-node", "1", "--nnodes", "2", "--node-rank",
                                                std::to_string(node), "--rdzv", rdzv});
                             return a;
                           });
    // Process 0 is node 0; its rank 0 prints the metrics.
    REQUIRE(c.loss.size() == 20);
    check_curves("two nodes via " + rdzv, c, ref, 1e-5);
  }
}

TEST_CASE("a missing or contradictory launch environment is an error, not a hang") {
  TempDir dir("layout-badenv");
  write_file(dir / "c.toml", kLayoutGpt);
  // Each run's 60 s limit catches a hang (exit code -1), not speed: the default dist.timeout_s is
  // 300 s, so the last run only ends in time if it honours timeout_s = 2.
  RunResult r = run(tool("dl-train"), {(dir / "c.toml").string(), "--run-dir", (dir / "run").string()}, "",
                    {"RANK=3", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1"}, 60);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("RANK=3 is not below WORLD_SIZE=2") != std::string::npos);
  r = run(tool("dl-train"), {(dir / "c.toml").string(), "--run-dir", (dir / "run").string(), "--set", "parallel.dp=2"},
          "", {"RANK=0", "WORLD_SIZE=2"}, 60);
  INFO(r.err);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("MASTER_ADDR") != std::string::npos);
  r = run(tool("dl-train"), {(dir / "c.toml").string()}, "",
          {"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=1"}, 60);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--run-dir") != std::string::npos);
  // The peer never comes: the rendezvous gives up after [dist] timeout_s with a message.
  r = run(tool("dl-train"), {(dir / "c.toml").string(), "--run-dir", (dir / "run2").string(), "--set",
                             "dist.timeout_s=2", "--set", "parallel.dp=2"},
          "", {"RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + std::to_string(free_port() + 11)},
          60);
  INFO(r.err);
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("cannot reach the rendezvous store") != std::string::npos);
  CHECK(r.err.find("after 2 s") != std::string::npos);
}

TEST_CASE("nodes with different run directories stop before training, saying they must share one") {
  TempDir dir("layout-rundirs");
  write_file(dir / "c.toml", kLayoutGpt);
  // Two "nodes" (a launcher each, --nnodes 2) meeting through a shared folder, each given its own
  // --run-dir, as two machines each with a local disk would be. Main trained all 20 steps and
  // failed at the first checkpoint, writing into rank 1's missing directory.
  const std::string rdzv = (dir / "rdzv").string();
  std::vector<std::unique_ptr<Process>> nodes;
  for (int node = 0; node < 2; ++node)
    nodes.push_back(std::make_unique<Process>(
        tool("dl-train"),
        std::vector<std::string>{(dir / "c.toml").string(), "--run-dir", (dir / ("node" + std::to_string(node))).string(),
                                 "--json", "--set", "train.batch_size=4", "--nproc-per-node", "1", "--nnodes", "2",
                                 "--node-rank", std::to_string(node), "--rdzv", rdzv},
        std::vector<std::string>{}));
  for (int node = 0; node < 2; ++node) {
    const int code = nodes[node]->wait(120);
    CAPTURE(node);
    INFO(nodes[node]->err());
    CHECK(code == 2);
    CHECK(nodes[node]->err().find("rank 1 of 2 cannot see the run directory rank 0 took") != std::string::npos);
    CHECK(nodes[node]->err().find("nodes must share the run directory") != std::string::npos);
    CHECK(curves_of(nodes[node]->out_lines()).loss.empty());  // not one step trained
  }
  CHECK(nodes[0]->err().find((dir / "node0").string()) != std::string::npos);
  CHECK(nodes[1]->err().find((dir / "node1").string()) != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "node0" / "checkpoints"));
  CHECK_FALSE(fs::exists(dir / "node0" / ".rank0-token"));  // rank 0's token is gone: the folder can be taken again
  CHECK_FALSE(fs::exists(dir / "node1"));

  // Without --run-dir each node's launcher would stamp its own default: refused before any rank starts.
  RunResult r = run(tool("dl-train"), {(dir / "c.toml").string(), "--nproc-per-node", "1", "--nnodes", "2", "--node-rank",
                                       "0", "--rdzv", rdzv},
                    "", {}, 60);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--nnodes 2: pass the same --run-dir to every node") != std::string::npos);
}
