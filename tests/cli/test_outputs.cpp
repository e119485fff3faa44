// Where the tools write (README "Outputs"), for every -o/--output of the five tools: dl-envlock
// snapshot and resolve, dl-shard merge and split, dl-train runs --plot and tokenize (dl-bench and
// dl-cost have none; dl-bench's internal --rows-file takes the same path). A character device
// stays a device and a FIFO receives the bytes (neither is replaced), "-" is stdout, a symlink is
// written through with the link kept, and an output that is one of the command's inputs exits 2
// with the input untouched.
#include <doctest/doctest.h>

#include <functional>
#include <set>

#include "support/special_files.hpp"
#include "support/support.hpp"

using namespace dl::test;
namespace fs = std::filesystem;

namespace {

// A 3-step single-process Iris MLP run, trained once per test binary: what merge, split and
// runs read.
struct Trained {
  TempDir dir{"outputs-run"};
  fs::path run, step;
  std::string model;  // its checkpoint's model.safetensors: what merging it writes
};

const Trained& trained() {
  static Trained t;
  static bool done = false;
  if (!done) {
    t.run = t.dir / "run";
    RunResult r = run(tool("dl-train"), {source_path("configs/iris.toml").string(), "--run-dir", t.run.string(), "-q",
                                         "--set", "train.steps=3", "--set", "train.eval_every=0", "--set",
                                         "log.tensorboard=false"}, "", {}, 300);
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    t.step = t.run / "checkpoints" / "step_00000003";
    t.model = read_file(t.step / "model.safetensors");
    done = true;
  }
  return t;
}

RunResult tool_run(const std::string& name, const std::vector<std::string>& args) {
  return run(tool(name), args, "", {kNoProbes}, 120);
}

// The commands under test, each writing to `out`.
RunResult envlock_snapshot(const fs::path& out) {
  return tool_run("dl-envlock", {"snapshot", "--no-hashes", "--probe-timeout", "2", "-o", out.string()});
}
// --force: the symlink case's target exists (merge refuses an existing file without it).
RunResult shard_merge(const fs::path& out) {
  return tool_run("dl-shard", {"merge", trained().run.string(), "-o", out.string(), "--force"});
}
RunResult shard_split(const fs::path& out) {
  return tool_run("dl-shard", {"split", trained().run.string(), "--ranks", "2", "-o", out.string()});
}
RunResult runs_plot(const fs::path& out) {
  return tool_run("dl-train", {"runs", trained().run.string(), "--plot", "loss", "-o", out.string()});
}

std::set<std::string> listing(const fs::path& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

}  // namespace

TEST_CASE("every -o onto a character device writes through it and leaves it a device") {
  TempDir d("outputs-dev");
  const fs::path dev = d / "null";
  const std::string why = make_null_device(dev);
  if (!why.empty()) {
    MESSAGE("skipped: cannot make a character device here (", why, ")");
    return;
  }
  write_file(d / "a.txt", "Hello world. Hello outputs.\n");
  write_file(d / "env.toml", "");
  struct Case {
    std::string what;
    RunResult result;
    int exit_code;  // a folder output refuses a device with 2; a file output writes through it
  };
  const std::vector<Case> cases = {
      {"dl-envlock snapshot", envlock_snapshot(dev), 0},
      {"dl-envlock resolve", tool_run("dl-envlock", {"resolve", (d / "env.toml").string(), "-o", dev.string()}), 0},
      {"dl-shard merge", shard_merge(dev), 0},
      {"dl-shard split", shard_split(dev), 2},
      {"dl-train runs --plot", runs_plot(dev), 0},
      {"dl-train tokenize", tool_run("dl-train", {"tokenize", (d / "a.txt").string(), "--tokenizer",
                                                  shared_path("data/gpt2").string(), "-o", dev.string()}), 2},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    CHECK_MESSAGE(c.result.exit_code == c.exit_code, c.result.err);
    CHECK(fs::is_character_file(fs::symlink_status(dev)));
  }
  // Nothing beside it: no temp file, no tokenizer or optimizer file in the device's folder.
  CHECK(listing(d.path()) == std::set<std::string>{"null", "a.txt", "env.toml"});
}

TEST_CASE("every file -o onto a FIFO sends the bytes into it and leaves it a FIFO") {
  TempDir d("outputs-fifo");
  struct Case {
    std::string what;
    std::function<RunResult(const fs::path&)> command;
    std::function<bool(const std::string&)> bytes_ok;
  };
  const std::string& model = trained().model;
  const std::vector<Case> cases = {
      {"dl-envlock snapshot", envlock_snapshot, [](const std::string& b) { return has(b, "[header]"); }},
      {"dl-shard merge", shard_merge, [&](const std::string& b) { return b == model; }},
      {"dl-train runs --plot", runs_plot, [](const std::string& b) { return has(b, "<svg") && has(b, "</svg>"); }},
  };
  int i = 0;
  for (const Case& c : cases) {
    CAPTURE(c.what);
    const fs::path fifo = d / ("pipe" + std::to_string(i++));
    FifoReader reader(fifo);
    const RunResult r = c.command(fifo);
    const std::string bytes = reader.finish();
    CHECK_MESSAGE(r.exit_code == 0, r.err);
    CHECK(fs::is_fifo(fs::symlink_status(fifo)));
    CHECK_MESSAGE(c.bytes_ok(bytes), bytes.size(), " bytes: ", bytes.substr(0, 200));
  }
  CHECK(listing(d.path()) == std::set<std::string>{"pipe0", "pipe1", "pipe2"});
}

TEST_CASE("-o - writes to stdout; dl-shard merge then prints its summary on stderr") {
  RunResult m = shard_merge("-");
  CHECK_MESSAGE(m.exit_code == 0, m.err);
  CHECK(m.out == trained().model);
  CHECK(has(m.err, "tensors"));  // the summary table
  RunResult e = envlock_snapshot("-");
  CHECK_MESSAGE(e.exit_code == 0, e.err);
  CHECK(has(e.out, "[header]"));
  RunResult p = runs_plot("-");
  CHECK_MESSAGE(p.exit_code == 0, p.err);
  CHECK(has(p.out, "<svg"));
  CHECK(!fs::exists("-"));
}

TEST_CASE("a symlink -o is written through: the target is replaced, the link kept") {
  TempDir d("outputs-link");
  fs::create_directories(d / "store");
  struct Case {
    std::string what, target;
    std::function<RunResult(const fs::path&)> command;
    std::function<bool(const fs::path&)> written;
  };
  const std::string& model = trained().model;
  const std::vector<Case> cases = {
      {"dl-envlock snapshot", "env.lock", envlock_snapshot,
       [](const fs::path& t) { return has(read_file(t), "[header]"); }},
      {"dl-shard merge", "model.safetensors", shard_merge, [&](const fs::path& t) { return read_file(t) == model; }},
      {"dl-train runs --plot", "loss.svg", runs_plot, [](const fs::path& t) { return has(read_file(t), "<svg"); }},
      {"dl-shard split", "split-run", shard_split,
       [](const fs::path& t) { return fs::exists(t / "checkpoints" / "step_00000003" / "trainer_state.json"); }},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    const fs::path target = d / "store" / c.target, link = d / ("link-" + c.target);
    if (c.what == "dl-shard split") fs::create_directories(target);  // an empty folder it may fill
    else write_file(target, "old");
    fs::create_symlink(fs::path("store") / c.target, link);
    const RunResult r = c.command(link);
    CHECK_MESSAGE(r.exit_code == 0, r.err);
    CHECK(fs::is_symlink(fs::symlink_status(link)));
    CHECK(fs::read_symlink(link) == fs::path("store") / c.target);
    CHECK(c.written(target));
  }
  CHECK(listing(d / "store") == std::set<std::string>{"env.lock", "model.safetensors", "loss.svg", "split-run"});
}

TEST_CASE("an -o that is one of the command's inputs exits 2 before anything is written") {
  const Trained& t = trained();
  TempDir d("outputs-input");
  const fs::path manifest = t.step / "trainer_state.json", metrics = t.run / "metrics.jsonl";
  const std::string manifest_bytes = read_file(manifest), metrics_bytes = read_file(metrics);
  const auto step_listing = listing(t.step);
  fs::create_symlink(t.step / "model.safetensors", d / "model-link.safetensors");
  write_file(d / "env.toml", "deb.libopenblas-dev = \"*\"\n");
  struct Case {
    std::string what;
    RunResult result;
    std::string input;  // the input the message names
  };
  const std::vector<Case> cases = {
      {"merge onto the manifest it reads", shard_merge(manifest), manifest.string()},
      {"merge through a symlink onto its model file", shard_merge(d / "model-link.safetensors"),
       (t.step / "model.safetensors").string()},
      {"split into the checkpoint it reads", shard_split(t.step / "split"), t.step.string()},
      {"runs --plot onto the metrics it reads", runs_plot(metrics), metrics.string()},
      {"resolve onto its constraints",
       tool_run("dl-envlock", {"resolve", (d / "env.toml").string(), "-o", (d / "env.toml").string()}),
       (d / "env.toml").string()},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    CHECK(c.result.exit_code == 2);
    CHECK_MESSAGE(has(c.result.err, "the input " + c.input), c.result.err);
  }
  CHECK(read_file(manifest) == manifest_bytes);
  CHECK(read_file(t.step / "model.safetensors") == t.model);
  CHECK(read_file(metrics) == metrics_bytes);
  CHECK(read_file(d / "env.toml") == "deb.libopenblas-dev = \"*\"\n");
  CHECK(listing(t.step) == step_listing);
  CHECK(fs::is_symlink(fs::symlink_status(d / "model-link.safetensors")));
  // A device, a FIFO or stdout gets the model alone: --with-optimizer needs a folder beside it.
  RunResult opt = tool_run("dl-shard", {"merge", t.run.string(), "--with-optimizer", "-o", "-"});
  CHECK(opt.exit_code == 2);
  CHECK(has(opt.err, "--with-optimizer"));
  CHECK(opt.out.empty());
}
