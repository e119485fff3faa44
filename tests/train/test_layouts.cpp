// Every parallel layout against the single-process run: the same seed and global batch give the
// same loss and gradient norm at every step (fp32, 1e-5 relative; the norm catches a gradient
// scaled uniformly, which AdamW's update would hide from the loss), under AdamW and under SGD.
// Plus per-rank memory against the ZeRO formulas, sharded checkpoints resumed under the same and
// other layouts, and a rank killed mid-run.
#include <doctest/doctest.h>

#include <signal.h>
#include <unistd.h>

#include <functional>
#include <optional>

#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>

#include "dl/plan/plan.hpp"
#include "support/hf_gpt2.hpp"
#include "support/support.hpp"
#include "support/tiny_gpt.hpp"

using namespace dl::test;
using nlohmann::json;

namespace {

const std::string kGpt = layout_gpt({{"optim.lr", "3e-3"}, {"schedule.warmup_steps", "4"}, {"schedule.decay_steps", "20"},
                                     {"train.steps", "20"}});

// Per-step training curves from --json stdout lines.
struct Curves {
  std::map<int64_t, double> loss, grad_norm;
};

Curves curves_of(const std::vector<std::string>& out_lines) {
  Curves c;
  for (const auto& l : out_lines) {
    if (l.empty() || l[0] != '{') continue;
    json j = json::parse(l);
    if (!j.contains("loss")) continue;
    const int64_t step = j["step"].get<int64_t>();
    c.loss[step] = j["loss"].get<double>();
    // Every step record carries the norm; a non-finite one is written as null.
    REQUIRE_MESSAGE(j.contains("grad_norm"), l);
    c.grad_norm[step] = j["grad_norm"].is_number() ? j["grad_norm"].get<double>() : NAN;
  }
  return c;
}

// A resumed run's curves after the first part's: the steps must follow on.
void append(Curves& first, const Curves& rest) {
  REQUIRE(!rest.loss.empty());
  REQUIRE((first.loss.empty() || rest.loss.begin()->first == first.loss.rbegin()->first + 1));
  first.loss.insert(rest.loss.begin(), rest.loss.end());
  first.grad_norm.insert(rest.grad_norm.begin(), rest.grad_norm.end());
}

struct Run : Curves {
  int code = -1;
  std::string err;
};

Run run_of(const RunResult& r) {
  Run out;
  static_cast<Curves&>(out) = curves_of(lines(r.out));
  out.code = r.exit_code;
  out.err = r.err;
  return out;
}

Run train(const fs::path& cfg, const fs::path& run_dir, int nproc, std::vector<std::string> sets,
          std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {cfg.string(), "--run-dir", run_dir.string(), "--json"};
  if (nproc > 1) {
    args.push_back("--nproc-per-node");
    args.push_back(std::to_string(nproc));
  }
  for (const auto& s : sets) {
    args.push_back("--set");
    args.push_back(s);
  }
  args.insert(args.end(), extra.begin(), extra.end());
  return run_of(run(tool("dl-train"), args, "", {}, 300));
}

Run resume(const fs::path& run_dir, int nproc, std::vector<std::string> sets) {
  std::vector<std::string> args = {"--resume", run_dir.string(), "--json"};
  if (nproc > 1) {
    args.push_back("--nproc-per-node");
    args.push_back(std::to_string(nproc));
  }
  for (const auto& s : sets) {
    args.push_back("--set");
    args.push_back(s);
  }
  return run_of(run(tool("dl-train"), args, "", {}, 300));
}

// Infinite unless both curves have the same steps and every difference is finite.
double max_rel_diff(const std::map<int64_t, double>& a, const std::map<int64_t, double>& b) {
  if (a.size() != b.size()) return INFINITY;
  double worst = 0;
  for (auto [s, v] : a) {
    auto it = b.find(s);
    if (it == b.end()) return INFINITY;
    const double d = std::fabs(v - it->second) / std::fabs(it->second);
    if (!std::isfinite(d)) return INFINITY;
    worst = std::max(worst, d);
  }
  return worst;
}

// The same steps and bits; NaN (a non-finite value logged as null) matches NaN.
bool identical(const std::map<int64_t, double>& a, const std::map<int64_t, double>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const auto& x, const auto& y) {
    return x.first == y.first && (x.second == y.second || (std::isnan(x.second) && std::isnan(y.second)));
  });
}

// Loss and gradient norm agree with `want` at every one of its steps, within `tol` relative
// (`norm_tol` for the norm, if given).
void check_curves(const std::string& name, const Curves& got, const Curves& want, double tol, double norm_tol = 0) {
  const double dl = max_rel_diff(got.loss, want.loss), dg = max_rel_diff(got.grad_norm, want.grad_norm);
  MESSAGE(name << ": over " << got.loss.size() << " steps, max relative difference: loss " << dl << ", grad_norm "
               << dg);
  CHECK(dl < tol);
  CHECK(dg < (norm_tol > 0 ? norm_tol : tol));
}

// The single-process reference, computed once per test binary.
const Curves& reference() {
  static Curves ref;
  static TempDir dir("layout-ref");
  if (ref.loss.empty()) {
    write_file(dir / "c.toml", kGpt);
    Run r = train(dir / "c.toml", dir / "run", 1, {});
    REQUIRE_MESSAGE(r.code == 0, r.err);
    REQUIRE(r.loss.size() == 20);
    ref = r;
  }
  return ref;
}

struct Layout {
  std::string name;
  int nproc;
  std::vector<std::string> sets;
};

// Trains `cfg` under each layout (runs in dir/run0, run1, ...) and checks its `steps` losses and
// gradient norms against `ref` within 1e-5.
void check_layouts(const fs::path& cfg, const fs::path& dir, const std::vector<Layout>& layouts, const Curves& ref,
                   size_t steps, const std::string& what = "") {
  int i = 0;
  for (const auto& l : layouts) {
    CAPTURE(l.name);
    Run r = train(cfg, dir / ("run" + std::to_string(i++)), l.nproc, l.sets);
    INFO(r.err);
    REQUIRE(r.code == 0);
    REQUIRE(r.loss.size() == steps);
    check_curves(what + l.name, r, ref, 1e-5);
  }
}

}  // namespace

TEST_CASE("every parallel layout gives the single-process losses and gradient norms") {
  const auto& ref = reference();
  // Global batch 8 sequences everywhere: batch_size x microbatches x dp.
  std::vector<Layout> layouts = {
      {"dp=2", 2, {"parallel.dp=2", "train.batch_size=4"}},
      {"dp=2 zero=1", 2, {"parallel.dp=2", "train.batch_size=4", "parallel.zero=1"}},
      {"dp=2 zero=2", 2, {"parallel.dp=2", "train.batch_size=4", "parallel.zero=2"}},
      {"dp=2 zero=3", 2, {"parallel.dp=2", "train.batch_size=4", "parallel.zero=3"}},
      {"dp=2 zero=3 offload", 2, {"parallel.dp=2", "train.batch_size=4", "parallel.zero=3", "parallel.offload=cpu"}},
      {"tp=2", 2, {"parallel.tp=2"}},
      {"pp=2 gpipe m=4", 2, {"parallel.pp=2", "train.batch_size=2", "parallel.microbatches=4", "parallel.schedule=gpipe"}},
      {"pp=2 1f1b m=4", 2, {"parallel.pp=2", "train.batch_size=2", "parallel.microbatches=4", "parallel.schedule=1f1b"}},
      {"dp=2 x tp=2", 4, {"parallel.dp=2", "parallel.tp=2", "train.batch_size=4"}},
      {"dp=2 x pp=2", 4, {"parallel.dp=2", "parallel.pp=2", "train.batch_size=2", "parallel.microbatches=2"}},
      {"tp=2 x pp=2", 4, {"parallel.tp=2", "parallel.pp=2", "train.batch_size=2", "parallel.microbatches=4"}},
      {"dp=2 x tp=2 x pp=2", 8,
       {"parallel.dp=2", "parallel.tp=2", "parallel.pp=2", "train.batch_size=2", "parallel.microbatches=2"}},
      {"activation checkpointing", 1, {"parallel.activation_checkpointing=true"}},
      {"dp=2 zero=1 activation checkpointing", 2,
       {"parallel.dp=2", "train.batch_size=4", "parallel.zero=1", "parallel.activation_checkpointing=true"}},
  };
  TempDir dir("layouts");
  write_file(dir / "c.toml", kGpt);
  check_layouts(dir / "c.toml", dir.path(), layouts, ref, 20);
}

TEST_CASE("SGD without clipping: dp=2 zero=2 and tp=2 give the single-process losses and gradient norms") {
  // SGD moves the weights by the gradient as it is and clipping is off, so a gradient off by a
  // uniform factor (e.g. summed instead of averaged over ranks) changes the losses too.
  TempDir dir("layouts-sgd");
  write_file(dir / "c.toml", kGpt);
  const std::vector<std::string> sgd = {"optim.name=sgd", "optim.lr=0.1", "optim.grad_clip=0", "train.steps=6"};
  auto with = [&](std::vector<std::string> sets) {
    sets.insert(sets.end(), sgd.begin(), sgd.end());
    return sets;
  };
  Run single = train(dir / "c.toml", dir / "single", 1, with({}));
  INFO(single.err);
  REQUIRE(single.code == 0);
  REQUIRE(single.loss.size() == 6);
  CHECK(single.loss.rbegin()->second < single.loss.begin()->second);  // the steps were taken
  const std::vector<std::pair<std::string, std::vector<std::string>>> layouts = {
      {"sgd dp=2 zero=2", {"parallel.dp=2", "train.batch_size=4", "parallel.zero=2"}}, {"sgd tp=2", {"parallel.tp=2"}}};
  int i = 0;
  for (const auto& [layout_name, sets] : layouts) {
    const auto& name = layout_name;  // clang 14: a structured binding cannot be captured (CAPTURE)
    CAPTURE(name);
    Run r = train(dir / "c.toml", dir / ("run" + std::to_string(i++)), 2, with(sets));
    INFO(r.err);
    REQUIRE(r.code == 0);
    REQUIRE(r.loss.size() == 6);
    check_curves(name, r, single, 1e-5);
  }
}

TEST_CASE("per-rank memory agrees with the ZeRO formulas (fp32 Adam)") {
  // memory.json counts the storage each rank's engine and model hold, so a whole buffer kept
  // where a stage shards it shows here. Every parameter group (embeddings, each block, ln_f) has
  // an even size, so the shards need no padding at dp = 2 and the bytes are exact.
  TempDir dir("layout-mem");
  write_file(dir / "c.toml", kGpt);
  // psi for this model, and the formula's bytes per rank at dp = 2.
  const double psi = 2 * (4 * 32 * 32 * 3 + 13 * 32) + 256 * 32 + 26 * 32 + 2 * 32;
  const auto sb = dl::plan::state_bytes("fp32");
  for (int zero = 0; zero <= 3; ++zero) {
    CAPTURE(zero);
    Run r = train(dir / "c.toml", dir / ("run" + std::to_string(zero)), 2,
                  {"parallel.dp=2", "train.batch_size=4", "parallel.zero=" + std::to_string(zero), "train.steps=1"});
    INFO(r.err);
    REQUIRE(r.code == 0);
    json mem = json::parse(read_file(dir / ("run" + std::to_string(zero)) / "memory.json"));
    REQUIRE(mem["params"].get<double>() == psi);
    REQUIRE(mem["ranks"].size() == 2);
    double want_p = zero >= 3 ? sb.params * psi / 2 : sb.params * psi;
    double want_g = zero >= 2 ? sb.grads * psi / 2 : sb.grads * psi;
    double want_o = zero >= 1 ? sb.optimizer * psi / 2 : sb.optimizer * psi;
    // The formula's total per rank, as dl-shard computes it.
    double formula = dl::plan::zero_model_state_bytes(psi, 2, zero, sb);
    for (const auto& rk : mem["ranks"]) {
      double p = rk["params_bytes"], g = rk["grads_bytes"], o = rk["optimizer_bytes"];
      CHECK(p == want_p);
      CHECK(g == want_g);
      CHECK(o == want_o);
      CHECK(p + g + o == formula);
      CHECK(rk["optimizer_host_bytes"].get<double>() == 0);
      CHECK(rk["activation_bytes"].get<double>() > 0);
    }
  }
}

TEST_CASE("sharded checkpoints: resume is bit for bit; other layouts continue the same losses and gradient norms") {
  const auto& ref = reference();
  TempDir dir("layout-ckpt");
  write_file(dir / "c.toml", kGpt);
  // Same layout: 10 steps + resume to 20 equals 20 uninterrupted steps exactly.
  std::vector<std::string> zero1 = {"parallel.dp=2", "train.batch_size=4", "parallel.zero=1"};
  Run whole = train(dir / "c.toml", dir / "whole", 2, zero1);
  REQUIRE(whole.code == 0);
  Run first = train(dir / "c.toml", dir / "split", 2, zero1, {"--steps", "10"});
  REQUIRE(first.code == 0);
  CHECK(fs::exists(dir / "split" / "checkpoints" / "step_00000010" / "shards" / "rank00001.safetensors"));
  Run rest = resume(dir / "split", 2, {"train.steps=20"});
  INFO(rest.err);
  REQUIRE(rest.code == 0);
  append(first, rest);
  REQUIRE(first.loss.size() == 20);
  REQUIRE(whole.loss.size() == 20);
  for (int64_t s = 1; s <= 20; ++s) {
    CAPTURE(s);
    CHECK(first.loss[s] == whole.loss[s]);
    CHECK(first.grad_norm[s] == whole.grad_norm[s]);
  }

  // Saved with dp=2 zero=3, resumed with tp=2 (and the reverse): the losses go on as the
  // single-process run's.
  struct Pair {
    std::string name;
    std::vector<std::string> save, load;
  };
  std::vector<Pair> pairs = {
      {"zero3 -> tp2", {"parallel.dp=2", "train.batch_size=4", "parallel.zero=3"},
       {"parallel.dp=1", "parallel.tp=2", "train.batch_size=8", "parallel.zero=0", "train.steps=20"}},
      {"tp2 -> zero3", {"parallel.tp=2"},
       {"parallel.tp=1", "parallel.dp=2", "train.batch_size=4", "parallel.zero=3", "train.steps=20"}},
  };
  int i = 0;
  for (const auto& p : pairs) {
    CAPTURE(p.name);
    fs::path run_dir = dir / ("x" + std::to_string(i++));
    Run a = train(dir / "c.toml", run_dir, 2, p.save, {"--steps", "10"});
    INFO(a.err);
    REQUIRE(a.code == 0);
    Run b = resume(run_dir, 2, p.load);
    INFO(b.err);
    REQUIRE(b.code == 0);
    append(a, b);
    REQUIRE(a.loss.size() == 20);
    check_curves(p.name, a, ref, 1e-5);
  }
}

namespace {

// The final val_loss a run recorded.
double final_val_loss(const fs::path& run_dir) {
  double v = NAN;
  for (const auto& l : lines(read_file(run_dir / "metrics.jsonl")))
    if (json j = json::parse(l); j.contains("val_loss")) v = j["val_loss"].get<double>();
  return v;
}

}  // namespace

TEST_CASE("model.init_from into dp=2, ZeRO-3, tp=2 and pp=2 gives the single-process losses, tied or untied, with "
          "GPT-2's odd vocabulary; a sharded checkpoint starts a run") {
  TempDir dir("layout-init");
  // PyTorch-written GPT-2 folders (tests/scripts/hf_gpt2.py) with GPT-2's 50257-token vocabulary,
  // which tp=2 splits unevenly (25128 + 25129 rows): the head tied to wte, and a head of its own.
  // ASCII bytes x 397 spread the ids over both ranks' rows (x 197 would keep them below 25128).
  const json shape = {{"n_layer", 2}, {"n_head", 4}, {"n_embd", 16}, {"n_positions", 16}, {"vocab_size", 50257},
                      {"id_stride", 397}};
  json untied = shape;
  untied.update({{"seed", 6}, {"lm_head", "random"}, {"tie", false}});
  json tied = shape;
  tied["seed"] = 5;
  write_hf_gpt2s({{dir / "hf", tied}, {dir / "hf-untied", untied}});
  for (const std::string head : {"tied", "untied"}) {
    CAPTURE(head);
    const fs::path sub = dir / head;
    fs::create_directories(sub);
    write_file(sub / "c.toml", "[model]\ninit_from = \"" + (dir / (head == "tied" ? "hf" : "hf-untied")).string() +
                                   "\"\n\n[data]\nsource = \"tokens:../hf/train.bin\"\n"
                                   "val_source = \"tokens:../hf/val.bin\"\n\n[optim]\nlr = 3e-3\n\n[schedule]\n"
                                   "decay_steps = 8\n\n[train]\nsteps = 8\nbatch_size = 8\nthreads = 1\neval_every = 0\n"
                                   "eval_batches = 1\n\n[log]\nevery = 1\nsamples = 0\nprogress = \"none\"\n"
                                   "tensorboard = false\n");
    Run single = train(sub / "c.toml", sub / "single", 1, {});
    INFO(single.err);
    REQUIRE(single.code == 0);
    REQUIRE(single.loss.size() == 8);
    std::vector<Layout> layouts = {
        {"dp=2", 2, {"parallel.dp=2", "train.batch_size=4"}},
        {"dp=2 zero=3", 2, {"parallel.dp=2", "train.batch_size=4", "parallel.zero=3"}},
        {"tp=2", 2, {"parallel.tp=2"}},
        {"pp=2", 2, {"parallel.pp=2", "train.batch_size=2", "parallel.microbatches=4"}},
    };
    if (head == "untied") {  // the head's own gradient through every sharding of it
      layouts.push_back({"dp=2 zero=1", 2, {"parallel.dp=2", "train.batch_size=4", "parallel.zero=1"}});
      layouts.push_back({"dp=2 zero=2", 2, {"parallel.dp=2", "train.batch_size=4", "parallel.zero=2"}});
      layouts.push_back({"tp=2 x pp=2", 4, {"parallel.tp=2", "parallel.pp=2", "train.batch_size=2", "parallel.microbatches=4"}});
    }
    check_layouts(sub / "c.toml", sub, layouts, single, 8, "init_from " + head + " ");
    // The ZeRO-3 run's sharded checkpoint (one flat piece per rank) as model.init_from of a single
    // process: its weights are the single run's to float tolerance, so is its loss.
    const fs::path sharded = sub / "run1" / "checkpoints" / "step_00000008";
    REQUIRE(fs::exists(sharded / "shards" / "rank00001.safetensors"));
    Run from_shards = train(sub / "c.toml", sub / "from-shards", 1, {"model.init_from=" + sharded.string()}, {"--steps", "0"});
    INFO(from_shards.err);
    REQUIRE(from_shards.code == 0);
    const double a = final_val_loss(sub / "from-shards"), b = final_val_loss(sub / "single");
    MESSAGE(head << ": val loss from the zero=3 shards " << a << ", single process " << b);
    CHECK(std::fabs(a - b) / b < 1e-5);
  }
}

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
  write_file(dir / "c.toml", kGpt);
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

TEST_CASE("impossible layouts are clear errors") {
  TempDir dir("layout-bad");
  write_file(dir / "c.toml", kGpt);
  struct Case {
    int nproc;
    std::vector<std::string> sets;
    std::string expect;
  };
  std::vector<Case> cases = {
      {2, {"parallel.tp=3"}, "dp x tp x pp"},
      {3, {"parallel.tp=3"}, "must divide model.n_head"},
      {2, {"parallel.pp=4"}, "dp x tp x pp"},
      {4, {"parallel.pp=4", "model.n_layer=2"}, "must divide model.n_layer"},
      {2, {"parallel.dp=1"}, "dp x tp x pp = 1 x 1 x 1 = 1 ranks, but 2 processes"},
      {1, {"parallel.dp=2"}, "--nproc-per-node"},
      {2, {"parallel.pp=2", "parallel.zero=2"}, "zero = 2 with pipeline parallel"},
  };
  int i = 0;
  for (const auto& c : cases) {
    CAPTURE(c.expect);
    Run r = train(dir / "c.toml", dir / ("run" + std::to_string(i++)), c.nproc, c.sets);
    CHECK(r.code == 2);
    CHECK(r.err.find(c.expect) != std::string::npos);
  }
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
  write_file(dir / "c.toml", kGpt);
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
  write_file(dir / "c.toml", kGpt);
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

// ---------------------------------------------------------------------------------------------
// Mixed precision (bf16/fp16 compute, f32 master weights), emulated on the CPU with the CUDA
// kernels' rounding: the same trainer code as on a GPU.

namespace {

std::vector<json> metric_records(const fs::path& run_dir) {
  std::vector<json> out;
  for (const auto& l : lines(read_file(run_dir / "metrics.jsonl")))
    if (!l.empty()) out.push_back(json::parse(l));
  return out;
}

// The loss at the last of `steps` steps, from a run logging step 1 and every 100th.
double final_train_loss(const Run& r, int64_t steps) {
  REQUIRE(r.loss.size() == static_cast<size_t>(steps / 100 + 1));
  REQUIRE(r.loss.rbegin()->first == steps);
  return r.loss.rbegin()->second;
}

}  // namespace

TEST_CASE("bf16 and fp16 follow the fp32 losses: within 2% over 20 steps and at the end of 500") {
  const auto& ref = reference();
  TempDir dir("mixed-precision");
  write_file(dir / "c.toml", kGpt);
  for (std::string p : {"bf16", "fp16"}) {
    CAPTURE(p);
    Run r = train(dir / "c.toml", dir / p, 1, {"train.precision=" + p});
    INFO(r.err);
    REQUIRE(r.code == 0);
    CHECK(r.err.find("emulated") != std::string::npos);
    REQUIRE(r.loss.size() == 20);
    const double d = max_rel_diff(r.loss, ref.loss);
    MESSAGE(p << " vs fp32 over 20 steps: max relative loss difference " << d);
    CHECK(d < 0.02);
    CHECK(d > 0);  // 16-bit compute really ran: the numbers are not fp32's
  }
  const std::vector<std::string> long_run = {"train.steps=500", "schedule.decay_steps=500", "log.every=100"};
  Run f32 = train(dir / "c.toml", dir / "f32-500", 1, long_run);
  std::vector<std::string> bf16_long = long_run;
  bf16_long.push_back("train.precision=bf16");
  Run b16 = train(dir / "c.toml", dir / "bf16-500", 1, bf16_long);
  REQUIRE(f32.code == 0);
  REQUIRE(b16.code == 0);
  const double a = final_train_loss(f32, 500), b = final_train_loss(b16, 500);
  MESSAGE("500 steps: fp32 loss " << a << ", bf16 loss " << b);
  CHECK(a < ref.loss.begin()->second * 0.5);  // it learned
  CHECK(std::fabs(b - a) / a < 0.02);
}

TEST_CASE("bf16 with dp=2 and every ZeRO stage gives the single-rank bf16 losses; memory is 2+2+12 bytes") {
  TempDir dir("mixed-zero");
  write_file(dir / "c.toml", kGpt);
  Run single = train(dir / "c.toml", dir / "single", 1, {"train.precision=bf16"});
  REQUIRE(single.code == 0);
  const double psi = 2 * (4 * 32 * 32 * 3 + 13 * 32) + 256 * 32 + 26 * 32 + 2 * 32;
  const auto sb = dl::plan::state_bytes("bf16");  // the planner's mixed-precision Adam: 2 + 2 + 12
  CHECK(sb.params == 2);
  CHECK(sb.optimizer == 12);
  Curves zero0;
  for (int zero = 0; zero <= 3; ++zero) {
    CAPTURE(zero);
    const fs::path run_dir = dir / ("z" + std::to_string(zero));
    Run r = train(dir / "c.toml", run_dir, 2,
                  {"train.precision=bf16", "parallel.dp=2", "train.batch_size=4", "parallel.zero=" + std::to_string(zero)});
    INFO(r.err);
    REQUIRE(r.code == 0);
    REQUIRE(r.loss.size() == 20);
    // Gradients are summed over ranks in f32 and rounded once, whatever the stage: the stages
    // agree exactly (the norm up to the order of its partial sums); the single rank rounds a
    // different partial sum (measured: loss 1.3e-4, grad_norm 6.7e-4).
    if (zero == 0) zero0 = r;
    CHECK(r.loss == zero0.loss);
    CHECK(max_rel_diff(r.grad_norm, zero0.grad_norm) < 1e-12);
    check_curves("bf16 dp=2 zero=" + std::to_string(zero) + " vs one rank", r, single, 1e-3, 3e-3);
    json mem = json::parse(read_file(run_dir / "memory.json"));
    CHECK(mem["dtype"] == "bf16");
    const double formula = dl::plan::zero_model_state_bytes(psi, 2, zero, sb);
    for (const auto& rk : mem["ranks"]) {
      const double total = rk["params_bytes"].get<double>() + rk["grads_bytes"].get<double>() +
                           rk["optimizer_bytes"].get<double>();
      CHECK(total == formula);  // no padding: every parameter group's size is even
    }
  }
}

TEST_CASE("mixed-precision checkpoints hold f32 master weights; resume is bit for bit, fp16's loss scale included") {
  TempDir dir("mixed-ckpt");
  write_file(dir / "c.toml", kGpt);
  // fp16 from a loss scale that overflows (2^24): the first steps are skipped while the scale
  // halves, then training proceeds; the scale doubles after 4 good steps and overflows again.
  const std::vector<std::string> fp16 = {"train.precision=fp16", "train.loss_scale=16777216",
                                         "train.loss_scale_window=4", "parallel.dp=2", "train.batch_size=4",
                                         "parallel.zero=2"};
  Run whole = train(dir / "c.toml", dir / "whole", 2, fp16);
  INFO(whole.err);
  REQUIRE(whole.code == 0);
  auto recs = metric_records(dir / "whole");
  int skipped = 0, applied = 0;
  double prev_scale = 0;
  bool prev_skipped = false;
  for (const auto& r : recs) {
    if (!r.contains("loss_scale")) continue;
    const double s = r["loss_scale"];
    if (prev_scale > 0 && prev_skipped) CHECK(s == prev_scale / 2);  // every skip halves the scale
    if (prev_scale > 0 && !prev_skipped) CHECK((s == prev_scale || s == 2 * prev_scale));
    prev_skipped = r["skipped"];
    prev_scale = s;
    (prev_skipped ? skipped : applied)++;
  }
  MESSAGE("fp16 from scale 2^24: " << skipped << " skipped steps, " << applied << " applied");
  CHECK(recs.front()["skipped"] == true);
  CHECK(skipped >= 5);
  CHECK(applied >= 5);
  REQUIRE(whole.loss.size() == 20);
  CHECK(whole.loss.rbegin()->second < whole.loss.begin()->second * 0.9);  // it learned after the skips

  Run first = train(dir / "c.toml", dir / "split", 2, fp16, {"--steps", "12"});
  REQUIRE(first.code == 0);
  const fs::path ck = dir / "split" / "checkpoints" / "step_00000012";
  json manifest = json::parse(read_file(ck / "trainer_state.json"));
  CHECK(manifest["loss_scale"]["skipped_steps"].get<int>() > 0);
  for (const auto& [name, t] : manifest["tensors"].items()) CHECK(t["dtype"] == "F32");
  Run rest = resume(dir / "split", 2, {"train.steps=20"});
  INFO(rest.err);
  REQUIRE(rest.code == 0);
  append(first, rest);
  REQUIRE(first.loss.size() == 20);
  CHECK(first.loss == whole.loss);
  CHECK(identical(first.grad_norm, whole.grad_norm));  // overflowed steps' norms are NaN in both

  // A bf16 checkpoint resumed under another layout continues within bf16 tolerance.
  Run b = train(dir / "c.toml", dir / "b", 2, {"train.precision=bf16", "parallel.dp=2", "train.batch_size=4", "parallel.zero=3"}, {"--steps", "10"});
  REQUIRE(b.code == 0);
  Run b2 = resume(dir / "b", 1, {"train.steps=20", "parallel.dp=1", "train.batch_size=8", "parallel.zero=0"});
  INFO(b2.err);
  REQUIRE(b2.code == 0);
  append(b, b2);
  REQUIRE(b.loss.size() == 20);
  Run bs = train(dir / "c.toml", dir / "bs", 1, {"train.precision=bf16"});
  REQUIRE(bs.code == 0);
  REQUIRE(bs.loss.size() == 20);
  check_curves("bf16 dp=2 zero=3 -> one rank", b, bs, 1e-3, 3e-3);
}
