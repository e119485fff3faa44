// dl-train sweep and dl-train runs end to end: the binary, its trials' run directories, the
// state file across kill -9 and Ctrl-C, the ranked table, the SVG. The tiny addition model
// trains 90 steps in well under a second; the grid has 9 learning rates.
#include <doctest/doctest.h>

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "dl/config/config.hpp"
#include "dl/sweep/spec.hpp"
#include "support/support.hpp"
#include "support/tiny_gpt.hpp"

using namespace dl::test;
using nlohmann::json;

namespace {

// The shared tiny GPT, wider and trained longer: 90 steps on 2-digit sums, evaluated at the end.
const std::vector<std::string> kTinySets = {"model.n_embd=32", "data.digits=2", "optim.lr=3e-3", "schedule.warmup_steps=0",
                                            "schedule.decay_steps=0", "train.steps=90", "train.batch_size=32",
                                            "train.seed=1", "log.every=10"};

const char* kLrs = "[3e-4, 6e-4, 1e-3, 2e-3, 3e-3, 6e-3, 1e-2, 2e-2, 4e-2]";

// One folder for the whole file: the base config and the sweep files beside it.
struct Fixture {
  TempDir dir{"sweep"};
  Fixture() {
    write_file(dir / "base.toml", kTinyGpt);
    write_file(dir / "tiny.toml", dl::config_to_toml(dl::load_config(dir / "base.toml", kTinySets)));
    write_file(dir / "grid.toml", std::string("base = \"tiny.toml\"\nmetric = \"val_loss\"\n[method]\nname = \"grid\"\n"
                                              "[parameters]\n\"optim.lr\" = ") + kLrs + "\n");
    write_file(dir / "asha.toml", std::string("base = \"tiny.toml\"\nmetric = \"val_loss\"\n[method]\nname = \"grid\"\n"
                                              "[parameters]\n\"optim.lr\" = ") + kLrs +
                                      "\n[early_stopping]\ntype = \"asha\"\nmin_steps = 10\neta = 3\nmax_steps = 90\n");
  }
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

RunResult train(const std::vector<std::string>& args) { return run(tool("dl-train"), args); }

// The sweep's table as JSON rows; `time_s` (wall time) is the one column that may differ.
json table_of(const std::string& out) {
  json rows = json::parse(out);
  for (auto& r : rows) r.erase("time_s");
  return rows;
}

// A sweep's rows, run once per name and kept for the other test cases.
const json& sweep_rows(const std::string& sweep_file, const std::string& name, const std::vector<std::string>& extra = {}) {
  static std::map<std::string, json> done;
  auto it = done.find(name);
  if (it != done.end()) return it->second;
  std::vector<std::string> args = {"sweep", (fixture().dir / sweep_file).string(), "--dir", (fixture().dir / name).string(),
                                   "--format", "json", "-q"};
  args.insert(args.end(), extra.begin(), extra.end());
  auto r = train(args);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return done[name] = table_of(r.out);
}

double final_metric(const fs::path& run_dir, const std::string& metric) {
  double v = NAN;
  for (const auto& line : lines(read_file(run_dir / "metrics.jsonl"))) {
    if (line.empty()) continue;
    json j = json::parse(line);
    if (j.contains(metric)) v = j[metric].get<double>();
  }
  return v;
}

int64_t steps_trained(const json& rows) {
  int64_t s = 0;
  for (const auto& r : rows) s += r["steps"].get<int64_t>();
  return s;
}

}  // namespace

TEST_CASE("grid over optim.lr finds the best of running the grid's configs one by one") {
  const json& rows = sweep_rows("grid.toml", "grid");
  REQUIRE(rows.size() == 9);
  // By hand: each learning rate as its own dl-train run.
  const std::vector<std::string> lrs = {"3e-4", "6e-4", "1e-3", "2e-3", "3e-3", "6e-3", "1e-2", "2e-2", "4e-2"};
  double best = INFINITY;
  std::string best_lr;
  for (const auto& lr : lrs) {
    const fs::path run_dir = fixture().dir / ("hand-" + lr);
    auto r = train({(fixture().dir / "tiny.toml").string(), "--run-dir", run_dir.string(), "--set", "optim.lr=" + lr, "-q"});
    REQUIRE(r.exit_code == 0);
    const double v = final_metric(run_dir, "val_loss");
    if (v < best) best = v, best_lr = lr;
  }
  CHECK(rows[0]["rank"] == 1);
  CHECK(std::stod(rows[0]["optim.lr"].dump()) == std::stod(best_lr));
  CHECK(rows[0]["val_loss"].get<double>() == best);  // bit for bit: the same run
  CHECK(rows[0]["status"] == "completed");
  // Each trial is an ordinary run directory whose resolved config shows its parameter.
  const int64_t id = rows[0]["trial"].get<int64_t>();
  char name[32];
  std::snprintf(name, sizeof name, "trial-%04lld", static_cast<long long>(id));
  auto cfg = dl::load_config(fixture().dir / "grid" / name / "config.toml");
  CHECK(cfg.optim.lr == std::stod(best_lr));
  // best.toml is that config, ready for dl-train.
  CHECK(dl::load_config(fixture().dir / "grid" / "best.toml").optim.lr == std::stod(best_lr));
}

TEST_CASE("asha trains at most 40% of the grid's steps and its best is within 10% of the grid's") {
  const json& grid = sweep_rows("grid.toml", "grid");
  const json& asha = sweep_rows("asha.toml", "asha");
  const int64_t g = steps_trained(grid), a = steps_trained(asha);
  MESSAGE("steps: grid " << g << ", asha " << a << "; best val_loss: grid " << grid[0]["val_loss"] << ", asha "
                         << asha[0]["val_loss"]);
  CHECK(g == 9 * 90);
  CHECK(a <= 0.4 * g);
  CHECK(asha[0]["val_loss"].get<double>() <= 1.1 * grid[0]["val_loss"].get<double>());
  int stopped = 0;
  for (const auto& r : asha) stopped += r["status"] == "stopped";
  CHECK(stopped == 8);
}

TEST_CASE("--jobs 2 gives the same table as --jobs 1") {
  const json& one = sweep_rows("asha.toml", "asha");
  const json& two = sweep_rows("asha.toml", "asha-jobs2", {"--jobs", "2"});
  CHECK(two == one);
}

TEST_CASE("trials on any share of the cores: --jobs 1, --jobs 2 and DL_NUM_THREADS=3 give the same table bit for bit") {
  // train.threads = 0: each trial gets cores / jobs threads (2 and 1 on two cores), or DL_NUM_THREADS.
  TempDir d("sweep-threads");
  write_file(d / "base.toml", threads_gpt());
  write_file(d / "lr.toml", "base = \"base.toml\"\nmetric = \"val_loss\"\n[method]\nname = \"grid\"\n"
                            "[parameters]\n\"optim.lr\" = [1e-3, 3e-3]\n");
  auto table = [&](const std::string& name, const std::string& jobs, const std::vector<std::string>& env) {
    RunResult r = run(tool("dl-train"), {"sweep", (d / "lr.toml").string(), "--dir", (d / name).string(), "--jobs", jobs,
                                         "--format", "json", "-q"},
                      "", env);
    INFO(name, ": ", r.err);
    REQUIRE(r.exit_code == 0);
    return table_of(r.out);
  };
  const json one = table("jobs1", "1", {}), two = table("jobs2", "2", {}), three = table("threads3", "2", {"DL_NUM_THREADS=3"});
  REQUIRE(one.size() == 2);
  CHECK(two == one);
  CHECK(three == one);
}

TEST_CASE("Ctrl-C stops every trial with a checkpoint (exit 130); kill -9 at random moments, then --resume: the same table") {
  const json& reference = sweep_rows("asha.toml", "asha");
  // SIGINT once two trials run: those running stop at a checkpoint, the sweep exits 130. Whether a
  // trial is still running when the signal lands is a race with its 10-step rung on a loaded
  // machine, so a try where none was caught running is repeated in a fresh directory. The signal
  // goes 50 ms after trial 1's log appears: a whole trial of this size takes 0.3 to 0.5 s, and at
  // 300 ms every try could miss it (a trial signalled before its handlers exist exits 130 too).
  fs::path dir;
  int interrupted = 0;
  for (int attempt = 0; attempt < 5 && interrupted == 0; ++attempt) {
    dir = fixture().dir / ("killed-" + std::to_string(attempt));
    std::vector<std::string> first = {"sweep", (fixture().dir / "asha.toml").string(), "--dir", dir.string(),
                                      "--jobs", "2", "--format", "json", "-q"};
    Process p(tool("dl-train"), first);
    for (int i = 0; i < 400 && !fs::exists(dir / "logs" / "trial-0001.log"); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    p.send_signal(SIGINT);
    CHECK(p.wait(60) == 130);
    const json state = json::parse(read_file(dir / "sweep.json"));
    for (const auto& t : state["trials"]) {
      interrupted += t["status"] == "interrupted";
      CHECK(t["status"] != "failed");
    }
  }
  CHECK(interrupted >= 1);
  std::vector<std::string> resume = {"sweep", "--resume", dir.string(), "--format", "json", "-q"};
  std::random_device rd;
  std::mt19937 gen(rd());
  std::uniform_int_distribution<int> ms(200, 2500);
  std::string delays;
  for (int k = 0; k < 3; ++k) {
    const int wait_ms = ms(gen);
    delays += std::to_string(wait_ms) + " ";
    Process p(tool("dl-train"), resume);
    std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
    p.send_signal(SIGKILL);
    p.wait(60);
  }
  MESSAGE("kill -9 after (ms): " << delays);
  auto r = train(resume);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(table_of(r.out) == reference);
}

TEST_CASE("a diverged trial is recorded with its reason and the sweep goes on") {
  write_file(fixture().dir / "diverge.toml",
             "base = \"tiny.toml\"\n[method]\nname = \"grid\"\n[parameters]\n\"optim.lr\" = [3e-3, 1e4]\n"
             "\"optim.grad_clip\" = [0.0]\n");
  auto r = train({"sweep", (fixture().dir / "diverge.toml").string(), "--dir", (fixture().dir / "diverge").string(),
                  "--format", "json", "-q"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  json rows = json::parse(r.out);
  REQUIRE(rows.size() == 2);
  CHECK(rows[0]["status"] == "completed");
  CHECK(rows[1]["status"] == "diverged");
  CHECK(rows[1]["reason"].get<std::string>().find("NaN") != std::string::npos);
  CHECK(rows[1]["val_loss"].is_null());
}

TEST_CASE("bad sweep files exit 2 naming the file, line and key before any trial runs") {
  struct Case {
    std::string body, line, key, says;
  };
  const std::string head = "base = \"tiny.toml\"\n";  // line 1
  const std::string lr2 = "[parameters]\n\"optim.lr\" = [1e-3, 2e-3]\n";
  const std::vector<Case> cases = {
      {head + "metric = \"val_loss\"\nfoo = 1\n[parameters]\n\"optim.lr\" = [1e-3]\n", ":3", "foo", "unknown key"},
      {head + "[method]\nname = \"grid\"\nseeds = 1\n[parameters]\n\"optim.lr\" = [1e-3]\n", ":4", "method.seeds", "unknown key"},
      {head + "[parameters]\n\"optim.lrr\" = [1e-3]\n", ":3", "optim.lrr", "not a config key"},
      {head + "[method]\nname = \"random\"\ntrials = 4\n[parameters]\n\"optim.lr\" = { distribution = \"uniform\", min = 1e-4 }\n",
       ":6", "optim.lr", "needs bounds"},
      {head + "[method]\nname = \"tpe\"\ntrials = 4\n[parameters]\n\"optim.lr\" = { distribution = \"log_uniform\", min = 0.0, max = 1.0 }\n",
       ":6", "optim.lr", "min > 0"},
      {head + "[parameters]\n\"optim.lr\" = []\n", ":3", "optim.lr", "empty"},
      {head + "metric = \"val_acc\"\n[parameters]\n\"optim.lr\" = [1e-3]\n", ":2", "val_acc", "not a metric"},
      {head + "[parameters]\n\"optim.lr\" = [-1.0]\n", ":3", "optim.lr", "not a valid value"},
      // Sizes beyond the limits (docs/RELIABILITY.md, "Bounded resources"): the old sweep
      // allocated a record per trial, and asha's rungs min_steps x eta^k overflowed and grew.
      {head + "[method]\nname = \"random\"\ntrials = 1000000000\n" + lr2, ":4", "method.trials = 1000000000",
       "is beyond the limit of 100000"},
      {head + "[method]\nname = \"grid\"\n" + lr2 + "[early_stopping]\ntype = \"asha\"\nmin_steps = 1\nmax_steps = 9223372036854775807\n",
       ":9", "early_stopping.max_steps = 9223372036854775807", "is beyond the limit of 1000000000"},
      {head + "jobs = 1000000000\n[method]\nname = \"grid\"\n" + lr2, ":2", "jobs = 1000000000", "is beyond the limit of 1024"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    CAPTURE(c.body);
    const fs::path file = fixture().dir / ("bad" + std::to_string(i) + ".toml");
    write_file(file, c.body);
    const fs::path dir = fixture().dir / ("bad" + std::to_string(i));
    // Under `ulimit -v 4000000`: every case is refused before anything is allocated or created.
    auto r = run_limited(tool("dl-train"), {"sweep", file.string(), "--dir", dir.string()}, {}, 60);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find(file.string() + c.line + ":") != std::string::npos);
    CHECK(r.err.find(c.key) != std::string::npos);
    CHECK(r.err.find(c.says) != std::string::npos);
    CHECK_FALSE(fs::exists(dir));  // no trial ran
  }
}

TEST_CASE("the metrics a sweep accepts are the ones dl-train writes") {
  sweep_rows("grid.toml", "grid");
  std::set<std::string> written;
  for (const auto& line : lines(read_file(fixture().dir / "grid" / "trial-0000" / "metrics.jsonl")))
    if (!line.empty()) {
      const json j = json::parse(line);
      for (auto it = j.begin(); it != j.end(); ++it) written.insert(it.key());
    }
  for (const auto& m : dl::sweep::reported_metrics(dl::load_config(fixture().dir / "tiny.toml"))) {
    CAPTURE(m);
    CHECK(written.count(m) == 1);
  }
}

TEST_CASE("runs: one row per run with the keys that differ and final metrics; the SVG's paths are the metrics") {
  sweep_rows("grid.toml", "grid");
  const fs::path sweep_dir = fixture().dir / "grid";
  auto t = train({"runs", sweep_dir.string(), "--format", "json"});
  INFO(t.err);
  REQUIRE(t.exit_code == 0);
  json rows = json::parse(t.out);
  REQUIRE(rows.size() == 9);
  for (const auto& row : rows) {
    const fs::path run_dir = row["run"].get<std::string>();
    CHECK(row.contains("optim.lr"));
    CHECK_FALSE(row.contains("model.n_embd"));  // the same in every run
    CHECK(row["val_loss"].get<double>() == final_metric(run_dir, "val_loss"));
    CHECK(row["steps"] == 90);
  }
  auto table = train({"runs", sweep_dir.string()});
  CHECK(table.out.find("\u2581") != std::string::npos);  // the sparkline column

  for (bool log_y : {false, true}) {
    CAPTURE(log_y);
    const fs::path svg = fixture().dir / (log_y ? "loss-log.svg" : "loss.svg");
    std::vector<std::string> args = {"runs", sweep_dir.string(), "--plot", "loss", "-o", svg.string()};
    if (log_y) args.push_back("--log-y");
    REQUIRE(train(args).exit_code == 0);
    // Parsed by an XML parser: every path with its attributes and the plot's transform.
    const char* py = R"(import json, sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
ns = '{http://www.w3.org/2000/svg}'
print(json.dumps({'attrs': root.attrib, 'paths': [p.attrib for p in root.iter(ns + 'path')]})))";
    auto parsed = run(torch_python(), {"-c", py, svg.string()});
    INFO(parsed.err);
    REQUIRE(parsed.exit_code == 0);
    json doc = json::parse(parsed.out);
    REQUIRE(doc["paths"].size() == 9);
    auto attr = [&](const char* k) { return std::stod(doc["attrs"][k].get<std::string>()); };
    const double left = attr("data-left"), top = attr("data-top"), width = attr("data-width"), height = attr("data-height");
    const double x0 = attr("data-x-min"), x1 = attr("data-x-max"), y0 = attr("data-y-min"), y1 = attr("data-y-max");
    auto f = [&](double v) { return log_y ? std::log10(v) : v; };
    for (const auto& p : doc["paths"]) {
      const fs::path run_dir = p["data-run"].get<std::string>();
      std::vector<std::pair<double, double>> file_points;
      for (const auto& line : lines(read_file(run_dir / "metrics.jsonl")))
        if (!line.empty()) {
          json j = json::parse(line);
          if (j.contains("loss")) file_points.emplace_back(j["step"].get<double>(), j["loss"].get<double>());
        }
      std::istringstream steps(p["data-steps"].get<std::string>()), values(p["data-values"].get<std::string>()),
          d(p["d"].get<std::string>());
      size_t k = 0;
      std::string cmd;
      double s = 0, v = 0, x = 0, y = 0;
      while (steps >> s && values >> v && d >> cmd >> y) {
        x = std::stod(cmd.substr(1));
        REQUIRE(k < file_points.size());
        CHECK(s == file_points[k].first);
        CHECK(v == file_points[k].second);  // exactly the file's value
        // The drawn point maps back to the value through the documented transform.
        CHECK(std::abs((x - left) / width * (x1 - x0) + x0 - s) <= 1e-3 * (x1 - x0));
        CHECK(std::abs((top + height - y) / height * (f(y1) - f(y0)) + f(y0) - f(v)) <= 1e-4 * (f(y1) - f(y0)));
        ++k;
      }
      CHECK(k == file_points.size());
    }
  }
}

TEST_CASE("dl-cost estimate SWEEP.toml prices the base config trained for the sweep's step budget") {
  auto cost = [](const std::vector<std::string>& args) {
    auto r = run(tool("dl-cost"), args);
    INFO(r.err);
    CHECK(r.exit_code == 0);
    return r;
  };
  const std::string tiny = (fixture().dir / "tiny.toml").string();
  // grid: 9 trials x 90 steps; asha: 9 x 10 + 3 x 20 more + 1 x 60 more = 210, what the sweep trains.
  CHECK(cost({"estimate", (fixture().dir / "grid.toml").string(), "--format", "json"}).out ==
        cost({"estimate", tiny, "--set", "train.steps=810", "--format", "json"}).out);
  auto asha = cost({"estimate", (fixture().dir / "asha.toml").string(), "--format", "json"});
  CHECK(asha.out == cost({"estimate", tiny, "--set", "train.steps=210", "--format", "json"}).out);
  CHECK(asha.err.find("210 steps in all (asha, expected)") != std::string::npos);
  CHECK(asha.err.find("worst case 210 steps") != std::string::npos);
  CHECK(steps_trained(sweep_rows("asha.toml", "asha")) == 210);
}

TEST_CASE("a multi-rank trial runs through dl-train's launcher (nproc_per_node)") {
  write_file(fixture().dir / "ranks.toml", "base = \"tiny.toml\"\nnproc_per_node = 2\n[method]\nname = \"grid\"\n"
                                           "[parameters]\n\"parallel.dp\" = [2]\n\"train.batch_size\" = [16]\n");
  auto r = train({"sweep", (fixture().dir / "ranks.toml").string(), "--dir", (fixture().dir / "ranks").string(),
                  "--format", "json", "-q"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  json rows = json::parse(r.out);
  REQUIRE(rows.size() == 1);
  CHECK(rows[0]["status"] == "completed");
  const json summary = json::parse(read_file(fixture().dir / "ranks" / "trial-0000" / "summary.json"));
  CHECK(summary["layout"]["dp"] == 2);
  CHECK(read_file(fixture().dir / "ranks" / "logs" / "trial-0000.log").find("[rank 0]") != std::string::npos);
}

TEST_CASE("the shipped example sweep of the help and docs/SWEEPS.md exists and is valid: dl-cost prices it") {
  // `dl-train sweep lr.sweep.toml` was the help's example, and no such file was shipped.
  const fs::path sweep = source_path("configs/lr.sweep.toml");
  REQUIRE(fs::is_regular_file(sweep));
  auto r = run(tool("dl-cost"), {"estimate", sweep.string(), "--format", "json"});
  INFO(r.err);
  CHECK(r.exit_code == 0);
  const auto rows = json::parse(r.out);
  CHECK(rows.is_array());
  CHECK(!rows.empty());
}

TEST_CASE("sweep --steps N trains every trial N steps, like dl-train --steps; best.toml and --resume keep it") {
  write_file(fixture().dir / "two.toml", "base = \"tiny.toml\"\n[method]\nname = \"grid\"\n[parameters]\n"
                                         "\"optim.lr\" = [1e-3, 3e-3]\n");
  const fs::path dir = fixture().dir / "short";
  auto r = train({"sweep", (fixture().dir / "two.toml").string(), "--dir", dir.string(), "--steps", "20", "--format",
                  "json", "-q"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);  // main: "The following argument was not expected: --steps" (exit 2)
  const json rows = json::parse(r.out);
  REQUIRE(rows.size() == 2);
  for (const auto& row : rows) {
    CHECK(row["status"] == "completed");
    CHECK(row["steps"] == 20);  // the base config's train.steps is 90
  }
  CHECK(dl::load_config(dir / "trial-0000" / "config.toml").train.steps == 20);
  CHECK(dl::load_config(dir / "best.toml").train.steps == 20);
  // A finished sweep resumed trains nothing more: the state kept 20 steps.
  auto again = train({"sweep", "--resume", dir.string(), "--format", "json", "-q"});
  REQUIRE(again.exit_code == 0);
  CHECK(table_of(again.out) == table_of(r.out));
  auto resumed = train({"sweep", "--resume", dir.string(), "--steps", "30"});
  CHECK(resumed.exit_code == 2);
  CHECK(resumed.err.find("--steps goes with a new sweep") != std::string::npos);

  // With asha the steps are the last rung: 10, then 30.
  auto a = train({"sweep", (fixture().dir / "asha.toml").string(), "--dir", (fixture().dir / "asha-short").string(),
                  "--steps", "30", "--format", "json", "-q"});
  INFO(a.err);
  REQUIRE(a.exit_code == 0);
  int64_t most = 0;
  for (const auto& row : json::parse(a.out)) most = std::max(most, row["steps"].get<int64_t>());
  CHECK(most == 30);
  auto below = train({"sweep", (fixture().dir / "asha.toml").string(), "--dir", (fixture().dir / "asha-below").string(),
                      "--steps", "5"});
  CHECK(below.exit_code == 2);
  CHECK(below.err.find("--steps 5 is below") != std::string::npos);
  CHECK(below.err.find("early_stopping.min_steps = 10") != std::string::npos);
  CHECK_FALSE(fs::exists(fixture().dir / "asha-below"));
}
