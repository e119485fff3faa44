// The local launcher (lib/dist/src/dl/dist/launcher.cpp): SIGINT and SIGTERM reach every rank, the exit
// code is 130, each rank's stderr (and every stdout but rank 0's) comes out behind "[rank N]";
// and end to end, an interrupted 2-rank dl-train leaves a sharded checkpoint that resumes to the
// uninterrupted run's losses, bit for bit.
#include <doctest/doctest.h>

#include <signal.h>

#include <chrono>
#include <map>
#include <thread>

#include <nlohmann/json.hpp>

#include "support/support.hpp"
#include "support/tiny_gpt.hpp"

using namespace dl::test;
using nlohmann::json;

namespace {

// Waits until every rank has created DIR/ready.N (its signal handlers are installed by then).
bool ranks_ready(const fs::path& dir, int n, double timeout_s) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  for (;;) {
    int ready = 0;
    for (int r = 0; r < n; ++r) ready += fs::exists(dir / ("ready." + std::to_string(r)));
    if (ready == n) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// Every line of a launcher's stderr comes from a rank: "[rank N] ..." with N in [0, n).
void check_all_prefixed(const std::string& err, int n) {
  for (const auto& l : lines(err)) {
    CAPTURE(l);
    bool ok = false;
    for (int r = 0; r < n; ++r) ok = ok || l.rfind("[rank " + std::to_string(r) + "] ", 0) == 0;
    CHECK(ok);
  }
}


std::map<int64_t, double> losses_of_lines(const std::vector<std::string>& jsonl) {
  std::map<int64_t, double> out;
  for (const auto& l : jsonl) {
    if (l.empty() || l[0] != '{') continue;
    json j = json::parse(l);
    if (j.contains("loss")) out[j["step"].get<int64_t>()] = j["loss"].get<double>();
  }
  return out;
}

}  // namespace

TEST_CASE("the launcher forwards SIGINT and SIGTERM to every rank and exits 130") {
  for (int sig : {SIGINT, SIGTERM}) {
    CAPTURE(sig);
    TempDir d("launch-sig");
    // Each rank is in its own process group, so only the launcher's forwarding can reach it.
    Process p(tool("launcher_worker"), {"3", d.path().string()});
    REQUIRE(ranks_ready(d.path(), 3, 30));
    p.send_signal(sig);
    int code = p.wait(60);
    INFO(p.err());
    CHECK(code == 130);
    for (int r = 0; r < 3; ++r) CHECK(has(p.err(), "[rank " + std::to_string(r) + "] got signal " + std::to_string(sig)));
  }
}

TEST_CASE("the launcher prefixes every rank's stderr with [rank N] and passes rank 0's stdout through unchanged") {
  TempDir d("launch-prefix");
  Process p(tool("launcher_worker"), {"2", d.path().string()});
  REQUIRE(ranks_ready(d.path(), 2, 30));
  p.send_signal(SIGTERM);
  REQUIRE(p.wait(60) == 130);
  INFO(p.err());
  // stdout is data: rank 0's lines only, as the rank wrote them.
  CHECK(p.out_lines() == std::vector<std::string>{"data from rank 0"});
  CHECK(has(p.err(), "[rank 0] log from rank 0\n"));
  CHECK(has(p.err(), "[rank 1] log from rank 1\n"));
  CHECK(has(p.err(), "[rank 1] data from rank 1\n"));
  CHECK(!has(p.err(), "data from rank 0"));
  check_all_prefixed(p.err(), 2);
}

TEST_CASE("dl-train --nproc-per-node 2: SIGTERM stops both ranks with exit 130 and a sharded checkpoint that resumes "
          "bit for bit") {
  TempDir d("launch-train");
  write_file(d / "c.toml", kTinyGpt);

  // dp = 2 with ZeRO-1, so each rank saves its own optimizer shard; a run far longer than the
  // test, so the signal lands mid-run; the schedule's horizon fixed, so a run of any length
  // follows the same learning rates.
  const std::vector<std::string> layout = {"--nproc-per-node", "2", "--set", "parallel.dp=2", "--set", "parallel.zero=1",
                                           "--set", "train.batch_size=4", "--set", "schedule.decay_steps=200"};
  auto args = [&](std::vector<std::string> a) {
    a.insert(a.end(), layout.begin(), layout.end());
    return a;
  };
  const fs::path run_dir = d / "int";
  Process p(tool("dl-train"), args({(d / "c.toml").string(), "--run-dir", run_dir.string(), "--json", "--steps", "100000"}));
  REQUIRE(p.wait_for_line([](const std::string& l) { return has(l, "\"step\":3,"); }, 120));
  p.send_signal(SIGTERM);
  int code = p.wait(60);
  INFO(p.err());
  CHECK(code == 130);
  // Both ranks stopped through the trainer's clean path, and said so behind their prefix.
  CHECK(has(p.err(), "[rank 0] dl-train: error: interrupted at step"));
  CHECK(has(p.err(), "[rank 1] dl-train: error: interrupted at step"));
  check_all_prefixed(p.err(), 2);

  json summary = json::parse(read_file(run_dir / "summary.json"));
  CHECK(summary["status"] == "interrupted");
  const int64_t stopped = summary["steps"].get<int64_t>();
  REQUIRE(stopped >= 3);
  REQUIRE(stopped < 100000);
  char name[32];
  std::snprintf(name, sizeof name, "step_%08lld", static_cast<long long>(stopped));
  const fs::path ck = run_dir / "checkpoints" / name;
  CHECK(fs::exists(ck / "trainer_state.json"));
  CHECK(fs::exists(ck / "shards" / "rank00000.safetensors"));
  CHECK(fs::exists(ck / "shards" / "rank00001.safetensors"));
  for (const auto& e : fs::recursive_directory_iterator(run_dir)) CHECK(!has(e.path().string(), ".tmp"));
  auto before = losses_of_lines(p.out_lines());
  REQUIRE(before.size() == static_cast<size_t>(stopped));

  // Resume to 4 steps past the stop, and an uninterrupted run of as many steps: the same losses.
  const std::string until = std::to_string(stopped + 4);
  RunResult rest = run(tool("dl-train"), {"--resume", run_dir.string(), "--json", "--nproc-per-node", "2", "--steps", until});
  INFO(rest.err);
  REQUIRE(rest.exit_code == 0);
  CHECK(has(rest.err, std::string(name) + " at step " + std::to_string(stopped)));  // "resumed from .../step_N at step N"
  RunResult whole =
      run(tool("dl-train"), args({(d / "c.toml").string(), "--run-dir", (d / "whole").string(), "--json", "--steps", until}));
  INFO(whole.err);
  REQUIRE(whole.exit_code == 0);
  auto after = losses_of_lines(lines(rest.out));
  auto ref = losses_of_lines(lines(whole.out));
  REQUIRE(ref.size() == static_cast<size_t>(stopped + 4));
  REQUIRE(after.size() == 4);
  for (int64_t s = 1; s <= stopped + 4; ++s) {
    CAPTURE(s);
    CHECK((s <= stopped ? before[s] : after[s]) == ref[s]);  // exact: same bits
  }
}
