// dl-train end to end: the binary, its run directory, its exit codes.
#include <doctest/doctest.h>

#include <signal.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "dl/config/config.hpp"
#include "dl/io/safetensors.hpp"
#include "support/support.hpp"
#include "support/tiny_gpt.hpp"
#include "train/run_files.hpp"

using namespace dl::test;
using nlohmann::json;

namespace {

// 40 steps, a checkpoint every 20, a final evaluation with one sample, TensorBoard events.
const std::string kSmallGpt = tiny_gpt({{"model.n_embd", "32"}, {"optim.lr", "3e-3"}, {"schedule.warmup_steps", "5"},
                                        {"schedule.decay_steps", "40"}, {"train.steps", "40"}, {"train.eval_batches", "2"},
                                        {"train.checkpoint_every", "20"}, {"train.keep_checkpoints", "5"},
                                        {"log.samples", "1"}, {"log.tensorboard", "true"}});

RunResult train(const std::vector<std::string>& args) { return run(tool("dl-train"), args); }

// The step a "diverged: ... at step N; ..." message names.
int64_t diverged_at(const std::string& err) {
  const auto msg = err.find("diverged: ");
  REQUIRE_MESSAGE(msg != std::string::npos, err);
  const auto at = err.find(" at step ", msg);
  REQUIRE_MESSAGE(at != std::string::npos, err);
  return std::stoll(err.substr(at + 9));
}

// Every value of every tensor in a safetensors file is finite.
bool all_finite(const fs::path& file) {
  dl::SafetensorsReader r(file);
  for (const auto& name : r.names()) {
    dl::Tensor t = r.read(name);
    const float* x = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i)
      if (!std::isfinite(x[i])) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("a run writes config, metrics, TensorBoard events, checkpoints and summary") {
  TempDir d("run");
  write_file(d / "c.toml", kSmallGpt);
  fs::path run_dir = d / "run";
  RunResult r = train({(d / "c.toml").string(), "--run-dir", run_dir.string(), "--steps", "6", "--json",
                       "--set", "train.checkpoint_every=0"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);

  // stdout carries the same records as metrics.jsonl.
  std::string metrics = read_file(run_dir / "metrics.jsonl");
  CHECK(r.out == metrics);
  auto loss = losses_of(metrics);
  REQUIRE(loss.size() == 6);
  for (const auto& line : lines(metrics)) {
    json j = json::parse(line);
    if (!j.contains("loss")) continue;
    for (const char* key : {"step", "loss", "lr", "grad_norm", "tokens_per_sec", "elapsed_s"}) CHECK(j.contains(key));
    CHECK(j["tokens_per_sec"].get<double>() > 0);
  }
  CHECK(loss[1] > 4.0);  // about log(256) at the start: random guessing over bytes

  // The resolved config round-trips and records the override.
  dl::Config cfg = dl::load_config(run_dir / "config.toml");
  CHECK(cfg.train.steps == 6);
  CHECK(cfg.model.n_embd == 32);

  // TensorBoard: an independent reader checks every record's CRCs and gives the same losses.
  fs::path events;
  for (const auto& e : fs::directory_iterator(run_dir))
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) events = e.path();
  REQUIRE(!events.empty());
  RunResult tb = run(torch_python(), {source_path("tests/scripts/check_tfevents.py").string(), events.string()});
  INFO(tb.err);
  REQUIRE(tb.exit_code == 0);
  int matched = 0;
  for (const auto& line : lines(tb.out)) {
    json j = json::parse(line);
    if (j["tag"] == "train/loss") {
      CHECK(j["value"].get<double>() == doctest::Approx(loss[j["step"].get<int64_t>()]).epsilon(1e-6));
      ++matched;
    }
  }
  CHECK(matched == 6);

  // The checkpoint: Hugging Face names, checked by an independent safetensors reader.
  fs::path ck = run_dir / "checkpoints" / "step_00000006";
  for (const char* f : {"model.safetensors", "optimizer.safetensors", "config.json", "trainer_state.json"})
    CHECK(fs::exists(ck / f));
  RunResult st = run(torch_python(), {source_path("tests/scripts/check_safetensors.py").string(),
                                      (ck / "model.safetensors").string()});
  INFO(st.err);
  REQUIRE(st.exit_code == 0);
  json tensors = json::parse(st.out);
  CHECK(tensors["wte.weight"]["shape"] == json::array({256, 32}));
  CHECK(tensors["h.0.attn.c_attn.weight"]["shape"] == json::array({32, 96}));  // Conv1D [in, out]
  CHECK(tensors["h.0.mlp.c_proj.weight"]["shape"] == json::array({128, 32}));
  CHECK(tensors["__metadata__"]["format"] == "pt");
  CHECK(tensors.size() == 2 + 12 + 2 + 1);  // wte, wpe, 12 per block, ln_f, metadata
  json hf = json::parse(read_file(ck / "config.json"));
  CHECK(hf["model_type"] == "gpt2");
  CHECK(hf["n_embd"] == 32);
  CHECK(hf["vocab_size"] == 256);
  CHECK(hf["activation_function"] == "gelu_new");
  RunResult so = run(torch_python(), {source_path("tests/scripts/check_safetensors.py").string(),
                                      (ck / "optimizer.safetensors").string()});
  REQUIRE(so.exit_code == 0);
  CHECK(json::parse(so.out).contains("exp_avg_sq.h.0.ln_1.weight"));

  json summary = json::parse(read_file(run_dir / "summary.json"));
  CHECK(summary["status"] == "completed");
  CHECK(summary["steps"] == 6);
  CHECK(!has_temp_files(run_dir));
}

TEST_CASE("resume: 40 steps equal 20 steps + resume + 20 steps, bit for bit") {
  TempDir d("resume");
  write_file(d / "c.toml", kSmallGpt);
  RunResult full = train({(d / "c.toml").string(), "--run-dir", (d / "full").string(), "--json"});
  REQUIRE(full.exit_code == 0);
  RunResult first = train({(d / "c.toml").string(), "--run-dir", (d / "split").string(), "--steps", "20", "--json"});
  REQUIRE(first.exit_code == 0);
  RunResult second = train({"--resume", (d / "split").string(), "--steps", "40", "--json"});
  INFO(second.err);
  REQUIRE(second.exit_code == 0);
  CHECK(second.err.find("resumed from") != std::string::npos);

  auto a = losses_of(full.out);
  auto b = losses_of(first.out);
  for (auto [s, v] : losses_of(second.out)) b[s] = v;
  REQUIRE(a.size() == 40);
  REQUIRE(b.size() == 40);
  for (int64_t s = 1; s <= 40; ++s) {
    CAPTURE(s);
    CHECK(a[s] == b[s]);  // exact: same bits
  }
  // The resumed run's metrics file holds each step once, plus the evaluations at the end of
  // each part (steps 20 and 40).
  auto metric_lines = lines(read_file(d / "split" / "metrics.jsonl"));
  CHECK(losses_of(read_file(d / "split" / "metrics.jsonl")).size() == 40);
  REQUIRE(metric_lines.size() == 42);
  std::vector<int64_t> eval_steps;
  for (const auto& l : metric_lines) {
    json j = json::parse(l);
    if (j.contains("val_loss")) eval_steps.push_back(j["step"].get<int64_t>());
  }
  CHECK(eval_steps == std::vector<int64_t>{20, 40});
}

TEST_CASE("--resume of a run already at --steps trains nothing and rewrites nothing") {
  TempDir d("resume-done");
  write_file(d / "c.toml", kTinyGpt);
  RunResult first = train({(d / "c.toml").string(), "--run-dir", (d / "run").string(), "--steps", "3", "-q"});
  REQUIRE_MESSAGE(first.exit_code == 0, first.err);
  const std::string summary = read_file(d / "run" / "summary.json"), metrics = read_file(d / "run" / "metrics.jsonl");
  const double loss = json::parse(summary)["final_train_loss"].get<double>();
  REQUIRE(loss > 0);
  for (const char* steps : {"3", "2"}) {
    CAPTURE(steps);
    RunResult again = train({"--resume", (d / "run").string(), "--steps", steps});
    INFO(again.err);
    CHECK(again.exit_code == 0);
    CHECK(has(again.err, "is at step 3 and train.steps is " + std::string(steps) + ": nothing to train"));
    // Before: summary.json said final_train_loss 0.0 and median_tokens_per_sec 0.0, and the last
    // evaluation was appended to metrics.jsonl again.
    CHECK(read_file(d / "run" / "summary.json") == summary);
    CHECK(read_file(d / "run" / "metrics.jsonl") == metrics);
    char shown[32];
    std::snprintf(shown, sizeof shown, "%.4f", loss);
    CHECK(has(again.out, shown));  // the run's loss in the summary table, not 0.0000
  }
}

TEST_CASE("SIGINT writes a checkpoint, exits 130, and the run resumes to the same losses") {
  TempDir d("sigint");
  write_file(d / "c.toml", kSmallGpt);
  // Steps of about a millisecond and a long run, so the signal lands early; the schedule's
  // horizon is fixed so a short run follows the same learning rates as the 2000-step one.
  std::vector<std::string> slow = {"--set", "model.n_embd=64", "--set", "model.block_size=32", "--set",
                                   "train.batch_size=16", "--set", "schedule.decay_steps=2000", "--set",
                                   "train.checkpoint_every=0", "--json"};
  auto with = [&](std::vector<std::string> args) {
    args.insert(args.end(), slow.begin(), slow.end());
    return args;
  };
  Process p(tool("dl-train"), with({(d / "c.toml").string(), "--run-dir", (d / "int").string(), "--steps", "2000"}));
  bool reached = p.wait_for_line([](const std::string& l) { return l.find("\"step\":5,") != std::string::npos; }, 120);
  REQUIRE(reached);
  p.send_signal(SIGINT);
  int code = p.wait(60);
  INFO(p.err());
  CHECK(code == 130);
  CHECK(p.err().find("interrupted") != std::string::npos);
  json summary = json::parse(read_file(d / "int" / "summary.json"));
  CHECK(summary["status"] == "interrupted");
  int64_t stopped = summary["steps"].get<int64_t>();
  CHECK(stopped >= 5);
  CHECK(fs::exists(d / "int" / "checkpoints" / step_name(stopped) / "trainer_state.json"));

  // However many steps the signal took to land on a busy machine (no speed bar here), the
  // resumed run goes 5 steps past the stop, at least to step 30, and equals an uninterrupted one.
  const int64_t until = std::max<int64_t>(30, stopped + 5);
  RunResult rest = train(with({"--resume", (d / "int").string(), "--steps", std::to_string(until)}));
  INFO(rest.err);
  REQUIRE(rest.exit_code == 0);
  RunResult full = train(with({(d / "c.toml").string(), "--run-dir", (d / "full").string(), "--steps",
                               std::to_string(until)}));
  REQUIRE(full.exit_code == 0);
  auto a = losses_of(full.out);
  auto b = losses_of(read_file(d / "int" / "metrics.jsonl"));
  REQUIRE(a.size() == static_cast<size_t>(until));
  REQUIRE(b.size() == static_cast<size_t>(until));
  for (int64_t s = 1; s <= until; ++s) {
    CAPTURE(s);
    CHECK(a[s] == b[s]);
  }
}

TEST_CASE("divergence exits 3 naming the step and keeps the last good checkpoint, which resumes") {
  TempDir d("nan");
  write_file(d / "c.toml", kSmallGpt);
  // SGD at a learning rate warming up to 1000 and no clipping: finite losses that grow about
  // 100-fold per step, then NaN (step 7 here). A checkpoint after every step.
  const std::vector<std::string> blow_up = {"--set", "optim.name=sgd", "--set", "optim.lr=1e3", "--set",
                                            "optim.grad_clip=0", "--set", "schedule.warmup_steps=10", "--set",
                                            "train.checkpoint_every=1", "--json"};
  auto with = [](std::vector<std::string> args, const std::vector<std::string>& more) {
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };
  RunResult r = train(with({(d / "c.toml").string(), "--run-dir", (d / "run").string()}, blow_up));
  INFO(r.err);
  CHECK(r.exit_code == 3);
  CHECK(r.err.find("NaN") + r.err.find("Inf") != 2 * std::string::npos);
  const int64_t bad = diverged_at(r.err);
  auto loss = losses_of(r.out);
  REQUIRE(bad >= 3);  // it blew up later, not at once
  REQUIRE(loss.size() == static_cast<size_t>(bad - 1));
  CHECK(loss.rbegin()->first == bad - 1);
  for (auto [s, v] : loss) CHECK(std::isfinite(v));
  // The newest checkpoint is the step before the failed one (the weights it started from),
  // nothing of the failed step was saved, and the older ones are kept as keep_checkpoints says.
  const std::string good = step_name(bad - 1);
  CHECK(r.err.find("the last good checkpoint is " + (d / "run" / "checkpoints" / good).string()) != std::string::npos);
  const std::vector<int64_t> steps = checkpoint_steps(d / "run");
  REQUIRE(!steps.empty());
  CHECK(steps.back() == bad - 1);
  CHECK(steps.size() == static_cast<size_t>(std::min<int64_t>(5, bad - 1)));
  for (int64_t s : steps) CHECK(fs::exists(d / "run" / "checkpoints" / step_name(s) / "trainer_state.json"));
  CHECK(!has_temp_files(d / "run"));
  CHECK(all_finite(d / "run" / "checkpoints" / good / "model.safetensors"));
  // Resumed as it is, the run repeats the failed step from the same weights and fails the same
  // way; the good checkpoint survives the second failure too.
  RunResult again = train({"--resume", (d / "run").string(), "--json"});
  INFO(again.err);
  CHECK(again.exit_code == 3);
  CHECK(again.err.find("resumed from " + (d / "run" / "checkpoints" / good).string()) != std::string::npos);
  CHECK(diverged_at(again.err) == bad);
  CHECK(checkpoint_steps(d / "run") == steps);

  // fp16 from loss scale 1 at the same learning rates: step 3 overflows fp16's range, every
  // later step is skipped while the scale halves below 2^-24, then the run stops. Its last good
  // checkpoint (f32 master weights) resumes in fp32 at a learning rate that trains on.
  RunResult h = train(with({(d / "c.toml").string(), "--run-dir", (d / "fp16").string(), "--set",
                            "train.precision=fp16", "--set", "train.loss_scale=1", "--set", "train.steps=60"},
                           blow_up));
  INFO(h.err);
  CHECK(h.exit_code == 3);
  CHECK(h.err.find("fp16 loss scale down to") != std::string::npos);
  const int64_t bad16 = diverged_at(h.err);
  REQUIRE(bad16 > 3);
  const std::vector<int64_t> steps16 = checkpoint_steps(d / "fp16");
  REQUIRE(!steps16.empty());
  CHECK(steps16.back() == bad16 - 1);
  CHECK(all_finite(d / "fp16" / "checkpoints" / step_name(bad16 - 1) / "model.safetensors"));
  RunResult on = train({"--resume", (d / "fp16").string(), "--json", "--steps", std::to_string(bad16 + 1), "--set",
                        "train.precision=fp32", "--set", "optim.lr=1e-3"});
  INFO(on.err);
  REQUIRE(on.exit_code == 0);
  CHECK(on.err.find("resumed from " + (d / "fp16" / "checkpoints" / step_name(bad16 - 1)).string()) !=
        std::string::npos);
  auto resumed = losses_of(on.out);
  REQUIRE(resumed.size() == 2);
  CHECK(resumed.begin()->first == bad16);
  for (auto [s, v] : resumed) CHECK(std::isfinite(v));
  CHECK(checkpoint_steps(d / "fp16").back() == bad16 + 1);
}

TEST_CASE("bad input: clear errors, exit 2, no run directory") {
  TempDir d("bad");
  struct Case {
    std::string name, toml, expect;
  };
  std::string base = kSmallGpt;
  auto replace = [&](const std::string& from, const std::string& to) {
    std::string s = base;
    s.replace(s.find(from), from.size(), to);
    return s;
  };
  std::vector<Case> cases = {
      {"broken TOML", replace("n_layer = 1", "n_layer = = 1"), "c.toml:3"},
      {"unknown key", replace("n_layer = 1", "n_layers = 1"), "did you mean 'model.n_layer'"},
      {"wrong type", replace("n_layer = 1", "n_layer = \"one\""), "model.n_layer must be an integer"},
      {"out of range", replace("lr = 3e-3", "lr = -1.0"), "optim.lr"},
      {"missing data file", replace("synthetic:addition", "text:no/such/file.txt"), "file not found"},
      {"heads do not divide width", replace("n_head = 2", "n_head = 3"), "n_head"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.name);
    write_file(d / "c.toml", c.toml);
    RunResult r = train({(d / "c.toml").string(), "--run-dir", (d / "run").string()});
    CHECK(r.exit_code == 2);
    CHECK(r.err.find(c.expect) != std::string::npos);
    CHECK(r.err.find("error") != std::string::npos);
    CHECK(!fs::exists(d / "run"));
  }
  RunResult r = train({(d / "missing.toml").string()});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("missing.toml") != std::string::npos);

  write_file(d / "c.toml", base);
  r = train({(d / "c.toml").string(), "--set", "model.n_embd=abc"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--set model.n_embd=abc") != std::string::npos);
  r = train({(d / "c.toml").string(), "--no-such-flag"});
  CHECK(r.exit_code == 2);
}

TEST_CASE("a corrupt token shard is reported by name with exit 2") {
  TempDir d("shard");
  // llm.c header (magic 20240520, version 1, 1000 tokens) but only 998 tokens of data.
  std::string shard(1024 + 2 * 998, '\0');
  int32_t header[3] = {20240520, 1, 1000};
  std::memcpy(shard.data(), header, sizeof header);
  write_file(d / "train_000.bin", shard);
  std::string cfg = kSmallGpt;
  cfg.replace(cfg.find("synthetic:addition"), 18, "tokens:" + (d / "train_*.bin").string());
  write_file(d / "c.toml", cfg);
  RunResult r = train({(d / "c.toml").string(), "--run-dir", (d / "run").string()});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("train_000.bin") != std::string::npos);
  CHECK(!fs::exists(d / "run"));
}

TEST_CASE("a corrupt or truncated checkpoint is reported and the previous one is used") {
  TempDir d("ckpt");
  write_file(d / "c.toml", kSmallGpt);
  fs::path run_dir = d / "run";
  REQUIRE(train({(d / "c.toml").string(), "--run-dir", run_dir.string(), "--steps", "40"}).exit_code == 0);
  fs::path newest = run_dir / "checkpoints" / "step_00000040";
  fs::path older = run_dir / "checkpoints" / "step_00000020";
  REQUIRE(fs::exists(older));
  // Flip one byte in the newest weights: its CRC fails, resume falls back to step 20.
  std::string w = read_file(newest / "model.safetensors");
  w[w.size() / 2] = static_cast<char>(w[w.size() / 2] ^ 0x5a);
  write_file(newest / "model.safetensors", w);
  RunResult r = train({"--resume", run_dir.string(), "--steps", "40", "--json"});
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.err.find("skipping checkpoint step_00000040") != std::string::npos);
  CHECK(r.err.find("CRC-32C") != std::string::npos);
  CHECK(r.err.find("resumed from") != std::string::npos);
  CHECK(losses_of(r.out).begin()->first == 21);

  // Truncate every checkpoint: nothing usable, exit 2 naming the files.
  for (const auto& e : fs::directory_iterator(run_dir / "checkpoints")) {
    fs::resize_file(e.path() / "model.safetensors", 100);
  }
  r = train({"--resume", run_dir.string(), "--steps", "50"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("truncated") != std::string::npos);
  CHECK(r.err.find("failed verification") != std::string::npos);

  // A directory left by a crash mid-write (no manifest) is never taken as a checkpoint.
  TempDir d2("ckpt2");
  write_file(d2 / "c.toml", kSmallGpt);
  REQUIRE(train({(d2 / "c.toml").string(), "--run-dir", (d2 / "run").string(), "--steps", "20"}).exit_code == 0);
  fs::create_directories(d2 / "run" / "checkpoints" / "step_00000030");
  write_file(d2 / "run" / "checkpoints" / "step_00000030" / "model.safetensors", "partial");
  r = train({"--resume", (d2 / "run").string(), "--steps", "21", "--json"});
  CHECK(r.exit_code == 0);
  CHECK(losses_of(r.out).begin()->first == 21);
}

TEST_CASE("an existing run directory is never overwritten without --resume") {
  TempDir d("exists");
  write_file(d / "c.toml", kSmallGpt);
  REQUIRE(train({(d / "c.toml").string(), "--run-dir", (d / "run").string(), "--steps", "2"}).exit_code == 0);
  auto before = tree(d / "run");
  std::string metrics = read_file(d / "run" / "metrics.jsonl");
  RunResult r = train({(d / "c.toml").string(), "--run-dir", (d / "run").string(), "--steps", "2"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--resume") != std::string::npos);
  CHECK(tree(d / "run") == before);
  CHECK(read_file(d / "run" / "metrics.jsonl") == metrics);
}

TEST_CASE("--print-config, --help, --version") {
  TempDir d("misc");
  write_file(d / "c.toml", kSmallGpt);
  RunResult r = train({(d / "c.toml").string(), "--print-config", "--set", "train.steps=7"});
  REQUIRE(r.exit_code == 0);
  write_file(d / "resolved.toml", r.out);
  dl::Config c = dl::load_config(d / "resolved.toml");
  CHECK(c.train.steps == 7);
  CHECK(c.model.n_embd == 32);
  CHECK(r.out.find("[parallel]") != std::string::npos);
  CHECK(!fs::exists("runs"));

  r = train({"--help"});
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("Examples:") != std::string::npos);
  for (const char* sub : {"sample", "eval"}) {
    r = train({sub, "--help"});
    CHECK(r.exit_code == 0);
    CHECK(r.out.find("Examples:") != std::string::npos);
  }
  r = train({"--version"});
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("OpenBLAS") != std::string::npos);
  r = train({"--help-keys"});
  CHECK(r.out.find("model.n_layer") != std::string::npos);
  // A choice lists its values, a number its range (they were left out).
  CHECK(has(r.out, "train.precision (string, default \"fp32\", one of fp32, bf16, fp16): "));
  CHECK(has(r.out, "data.val_fraction (float, default 0.1, in [0, 0.5]): "));
}

TEST_CASE("eval and sample read the newest checkpoint") {
  TempDir d("evalsample");
  write_file(d / "c.toml", kSmallGpt);
  REQUIRE(train({(d / "c.toml").string(), "--run-dir", (d / "run").string(), "--steps", "4"}).exit_code == 0);
  RunResult e = train({"eval", "--run-dir", (d / "run").string(), "--format", "json"});
  INFO(e.err);
  REQUIRE(e.exit_code == 0);
  json j = json::parse(e.out);
  CHECK(j["step"] == 4);
  CHECK(j["loss"].get<double>() > 0);
  CHECK(j["targets"].get<int64_t>() > 0);
  CHECK(j.contains("exact_match"));

  RunResult s = train({"sample", "--run-dir", (d / "run").string(), "--prompt", "123+456=", "--tokens", "5",
                       "--format", "json"});
  INFO(s.err);
  REQUIRE(s.exit_code == 0);
  json sj = json::parse(s.out);
  REQUIRE(sj.size() == 1);
  CHECK(sj[0]["prompt"] == "123+456=");
  CHECK(sj[0]["completion"].get<std::string>().size() <= 5);

  RunResult bad = train({"eval", "--run-dir", (d / "nope").string()});
  CHECK(bad.exit_code == 2);
}

TEST_CASE("the MLP learns the iris data from CSV") {
  TempDir d("iris");
  RunResult r = train({source_path("configs/iris.toml").string(), "--run-dir", (d / "run").string(), "--quiet",
                       "--set", "train.threads=1"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  json summary = json::parse(read_file(d / "run" / "summary.json"));
  CHECK(summary["final_eval"]["val_accuracy"].get<double>() >= 0.9);
}

// configs/llama-tiny.toml as shipped (its data path, its model), shortened to 12 small steps:
// the loss falls and the checkpoint's config.json is transformers' LlamaConfig.
TEST_CASE("configs/llama-tiny.toml trains out of the box") {
  TempDir d("llama-tiny");
  RunResult r = train({source_path("configs/llama-tiny.toml").string(), "--run-dir", (d / "run").string(), "--json",
                       "--set", "train.steps=12", "--set", "train.batch_size=4", "--set", "schedule.warmup_steps=3",
                       "--set", "train.eval_every=0", "--set", "log.samples=0", "--set", "log.every=1",
                       "--set", "train.checkpoint_every=12"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  std::map<int64_t, double> loss;
  for (const auto& l : lines(r.out))
    if (!l.empty() && l[0] == '{')
      if (json j = json::parse(l); j.contains("loss")) loss[j["step"].get<int64_t>()] = j["loss"].get<double>();
  REQUIRE(loss.size() == 12);
  CHECK(loss[12] < loss[1] - 0.5);
  json hf = json::parse(read_file(d / "run" / "checkpoints" / "step_00000012" / "config.json"));
  CHECK(hf["model_type"] == "llama");
  CHECK(hf["num_key_value_heads"] == 2);
  CHECK(hf["intermediate_size"] == 512);
  CHECK(hf["tie_word_embeddings"] == false);
}

TEST_CASE("text and token-shard data train end to end") {
  TempDir d("textdata");
  std::string text;
  for (int i = 0; i < 200; ++i) text += "the quick brown fox jumps over the lazy dog " + std::to_string(i % 7) + "\n";
  write_file(d / "t.txt", text);
  std::string cfg = kSmallGpt;
  cfg.replace(cfg.find("synthetic:addition"), 18, "text:t.txt");  // relative to the config's folder
  write_file(d / "c.toml", cfg);
  // No validation split, so both sources cut the same windows from the same bytes.
  RunResult r = train({(d / "c.toml").string(), "--run-dir", (d / "run").string(), "--steps", "5", "--json", "--set",
                       "data.val_fraction=0"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(losses_of(r.out).size() == 5);

  // The same bytes as an llm.c shard (header + uint16 tokens).
  std::string shard(1024, '\0');
  int32_t header[3] = {20240520, 1, static_cast<int32_t>(text.size())};
  std::memcpy(shard.data(), header, sizeof header);
  for (unsigned char c : text) {
    uint16_t t = c;
    shard.append(reinterpret_cast<const char*>(&t), 2);
  }
  write_file(d / "tok_000.bin", shard);
  cfg = kSmallGpt;
  cfg.replace(cfg.find("synthetic:addition"), 18, "tokens:tok_*.bin");
  write_file(d / "c2.toml", cfg);
  RunResult r2 = train({(d / "c2.toml").string(), "--run-dir", (d / "run2").string(), "--steps", "5", "--json",
                        "--set", "data.val_fraction=0"});
  INFO(r2.err);
  REQUIRE(r2.exit_code == 0);
  // Byte-level text and its token shard are the same data: the same losses.
  auto a = losses_of(r.out), b = losses_of(r2.out);
  for (int64_t s = 1; s <= 5; ++s) CHECK(a[s] == b[s]);
}

TEST_CASE("every run records its environment; --env-lock refuses breaking drift") {
  TempDir d("envlock");
  write_file(d / "c.toml", kSmallGpt);
  // kSmallGpt is kTinyGpt's shape, which leaves env.lock out (log.env_lock = false): the default is on.
  REQUIRE(train({(d / "c.toml").string(), "--run-dir", (d / "run").string(), "--steps", "2", "--set", "log.env_lock=true"})
              .exit_code == 0);
  std::string lock = read_file(d / "run" / "env.lock");
  CHECK(lock.find("created-by = \"dl-train") != std::string::npos);
  CHECK(lock.find("[cuda.runtime]") != std::string::npos);
  // dl-envlock accepts the run's snapshot as a lock for this same machine.
  RunResult same = run(tool("dl-envlock"), {"check", (d / "run" / "env.lock").string()});
  INFO(same.out << same.err);
  CHECK(same.exit_code == 0);
  // log.env_lock = false: no probes, no env.lock; the rest of the run is the same.
  REQUIRE(train({(d / "c.toml").string(), "--run-dir", (d / "quiet").string(), "--steps", "2", "--set",
                 "log.env_lock=false"})
              .exit_code == 0);
  CHECK(fs::exists(d / "quiet" / "config.toml"));
  CHECK(!fs::exists(d / "quiet" / "env.lock"));

  // A lock claiming another CUDA major is breaking drift: refuse, exit 2, show the table,
  // create nothing.
  std::string other = lock;
  size_t at = other.find("[cuda.runtime]\nversion = \"");
  REQUIRE(at != std::string::npos);
  at += std::string("[cuda.runtime]\nversion = \"").size();
  other.replace(at, other.find('"', at) - at, "11.8");
  write_file(d / "old.lock", other);
  RunResult r = train({(d / "c.toml").string(), "--run-dir", (d / "run2").string(), "--env-lock",
                       (d / "old.lock").string()});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("breaking") != std::string::npos);
  CHECK(r.err.find("cuda.runtime") != std::string::npos);
  CHECK(!fs::exists(d / "run2"));
  // The matching lock lets it start.
  r = train({(d / "c.toml").string(), "--run-dir", (d / "run3").string(), "--steps", "1", "--env-lock",
             (d / "run" / "env.lock").string()});
  INFO(r.err);
  CHECK(r.exit_code == 0);
}
