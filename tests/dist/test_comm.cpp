#include <doctest/doctest.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "dl/core/error.hpp"
#include "dl/dist/launch_env.hpp"
#include "support/support.hpp"

using namespace dl::test;
using nlohmann::json;
using dl::dist::detect_launch_env;
using dl::dist::EnvMap;

namespace {

struct Ranks {
  std::vector<std::unique_ptr<Process>> procs;
};

// Starts n workers with dlkit launcher variables and a fresh file-store folder.
Ranks start(const std::string& scenario, int n, const fs::path& store) {
  Ranks rs;
  for (int r = 0; r < n; ++r) {
    rs.procs.push_back(std::make_unique<Process>(
        tool("collectives_worker"), std::vector<std::string>{scenario},
        std::vector<std::string>{"DL_RANK=" + std::to_string(r), "DL_WORLD_SIZE=" + std::to_string(n),
                                 "DL_LOCAL_RANK=" + std::to_string(r), "DL_LOCAL_WORLD_SIZE=" + std::to_string(n),
                                 "DL_RDZV_DIR=" + store.string(), "DL_RUN_ID=t"}));
  }
  return rs;
}

std::map<std::string, json> results(const Process& p) {
  std::map<std::string, json> out;
  for (const auto& l : p.out_lines()) {
    json j = json::parse(l);
    std::string key = j["op"].get<std::string>() + (j.contains("dtype") ? "/" + j["dtype"].get<std::string>() : "");
    out[key] = j;
  }
  return out;
}

}  // namespace

namespace {

// Runs the collectives scenario on 4 ranks and checks every rank's values.
void check_collectives(const std::string& scenario, bool bf16) {
  TempDir d("gloo");
  const int n = 4;
  Ranks rs = start(scenario, n, d / "store");
  for (int r = 0; r < n; ++r) {
    int code = rs.procs[r]->wait(120);
    INFO(rs.procs[r]->err());
    REQUIRE(code == 0);
  }
  for (int r = 0; r < n; ++r) {
    auto res = results(*rs.procs[r]);
    CAPTURE(r);
    // sum over ranks of (10 q + i) = 10 * (0+1+2+3) + 4 i = 60 + 4i
    std::vector<std::string> dts = {"f32", "f64", "i64"};
    if (bf16) dts.push_back("bf16");
    for (const auto& dt : dts) {
      CAPTURE(dt);
      auto v = res["allreduce_sum/" + dt]["v"];
      REQUIRE(v.size() == 5);
      for (int i = 0; i < 5; ++i) CHECK(v[i].get<double>() == 60 + 4 * i);
    }
    for (int i = 0; i < 3; ++i) CHECK(res["allreduce_max"]["v"][i].get<double>() == 3 + i);
    // chunk r of sum_q (100 q + j) over j in [4r, 4r+4): 600 + 4 j
    for (int i = 0; i < 4; ++i) CHECK(res["reduce_scatter"]["v"][i].get<double>() == 600 + 4 * (4 * r + i));
    for (int q = 0; q < n; ++q)
      for (int i = 0; i < 2; ++i) CHECK(res["allgather"]["v"][2 * q + i].get<double>() == 7 * q + i);
    for (int i = 0; i < 3; ++i) CHECK(res["broadcast"]["v"][i].get<double>() == 42 + i);
    int prev = (r + n - 1) % n;
    for (int i = 0; i < 4; ++i) CHECK(res["ring"]["v"][i].get<double>() == 1000 * prev + i);
    CHECK(res["subgroup"]["size"] == 2);
    CHECK(res["subgroup"]["rank"] == r / 2);
    CHECK(res["subgroup"]["v"][0].get<double>() == (r % 2 ? 1 + 3 : 0 + 2));
    CHECK(res.count("done") == 1);
    if (scenario == "device_staged")
      CHECK(res["path"]["path"].get<std::string>().find("staged through host memory") != std::string::npos);
  }
}

}  // namespace

TEST_CASE("Gloo collectives give the right values on 4 ranks") { check_collectives("collectives", false); }

TEST_CASE("device tensors staged through host memory (ranks sharing a GPU) give the same values, bf16 included") {
  check_collectives("device_staged", true);
}

TEST_CASE("a collective that a peer never joins fails within the timeout, naming it and the peers") {
  TempDir d("gloo-timeout");
  Ranks rs = start("timeout", 2, d / "store");
  auto t0 = std::chrono::steady_clock::now();
  int code = rs.procs[0]->wait(60);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(code == 1);
  // Gloo's own timeout (2 s) ended the wait, not rank 1's exit at 6 s ("Connection closed by
  // peer"); the time is only a hang catch, as ranks start slowly on a loaded machine.
  CHECK(s < 30);
  std::string err = rs.procs[0]->err();
  CHECK(err.find("Timed out waiting 2000ms") != std::string::npos);
  CHECK(err.find("allreduce") != std::string::npos);
  CHECK(err.find("world ranks 0,1") != std::string::npos);
  CHECK(err.find("failed on world rank 0 waiting for peer world rank 1") != std::string::npos);
  CHECK(err.find("timeout_s") != std::string::npos);
  rs.procs[1]->wait(30);
}

TEST_CASE("launch environments: dlkit, torchrun, Open MPI, Slurm, and contradictions") {
  auto e = detect_launch_env({});
  CHECK(e.source == "single");
  CHECK(e.world == 1);
  e = detect_launch_env(EnvMap{{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"},
                               {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29501"}});
  CHECK(e.source == "torchrun");
  CHECK(e.rank == 1);
  CHECK(e.world == 4);
  CHECK(e.local_world == 2);
  CHECK(e.master_addr == "10.0.0.1");
  CHECK(e.master_port == 29501);
  e = detect_launch_env(EnvMap{{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "3"},
                               {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}, {"MASTER_ADDR", "h"}});
  CHECK(e.source == "openmpi");
  CHECK(e.rank == 2);
  CHECK(e.master_port == 29500);
  // mpirun on one node: every rank local, the rendezvous on this host.
  e = detect_launch_env(EnvMap{{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                               {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  CHECK(e.master_addr == "127.0.0.1");
  CHECK(e.master_port == 29500);
  e = detect_launch_env(EnvMap{{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"},
                               {"SLURM_JOB_NODELIST", "gpu[07-10,12],login1"}, {"SLURM_TASKS_PER_NODE", "4(x2)"},
                               {"SLURM_JOB_ID", "99"}});
  CHECK(e.source == "slurm");
  CHECK(e.rank == 5);
  CHECK(e.world == 8);
  CHECK(e.local_world == 4);
  CHECK(e.master_addr == "gpu07");
  CHECK(dl::dist::first_slurm_host("a1,b2") == "a1");
  CHECK(dl::dist::first_slurm_host("node[3]") == "node3");

  auto fails = [](EnvMap m, const std::string& expect) {
    try {
      detect_launch_env(m);
      FAIL("no error for " << expect);
    } catch (const dl::Error& err) {
      CHECK(err.kind() == dl::ErrorKind::usage);
      CHECK(std::string(err.what()).find(expect) != std::string::npos);
    }
  };
  fails({{"RANK", "0"}}, "WORLD_SIZE is not");
  fails({{"WORLD_SIZE", "2"}}, "RANK is not");
  fails({{"RANK", "3"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "x"}}, "not below");
  fails({{"RANK", "0"}, {"WORLD_SIZE", "2"}}, "MASTER_ADDR");
  fails({{"RANK", "x"}, {"WORLD_SIZE", "2"}}, "not a non-negative integer");
  fails({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "x"}, {"OMPI_COMM_WORLD_RANK", "0"}}, "contradicts");
  fails({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}, "SLURM_JOB_NODELIST");
  fails({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}}, "MASTER_ADDR");
  fails({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"}},
        "MASTER_ADDR");
}

TEST_CASE("launch role: a launch around the process wins, then the ranks asked for") {
  using dl::dist::launch_role;
  using dl::dist::LaunchRole;
  CHECK(launch_role(1, 1, {}) == LaunchRole::single);
  CHECK(launch_role(4, 1, {}) == LaunchRole::launcher);
  CHECK(launch_role(1, 2, {}) == LaunchRole::launcher);
  const EnvMap dlkit{{"DL_RANK", "1"}, {"DL_WORLD_SIZE", "2"}, {"DL_LOCAL_RANK", "1"}, {"DL_LOCAL_WORLD_SIZE", "2"},
                     {"DL_RDZV_DIR", "/tmp/x"}};
  CHECK(launch_role(4, 1, dlkit) == LaunchRole::dlkit_rank);
  const EnvMap torchrun{{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}};
  CHECK(launch_role(1, 1, torchrun) == LaunchRole::external_rank);
  CHECK(launch_role(2, 1, torchrun) == LaunchRole::external_rank);
  CHECK(launch_role(2, 1, {{"RANK", "0"}, {"WORLD_SIZE", "1"}}) == LaunchRole::launcher);  // a world of one launches
  CHECK_THROWS_AS(launch_role(2, 1, {{"RANK", "0"}, {"WORLD_SIZE", "2"}}), dl::Error);  // no MASTER_ADDR
}
