// dl-shard merge and split against dl-train's own checkpoints: splitting onto a layout gives the
// files dl-train writes for it, byte for byte; split then merge gives back the single-process
// files; a dp=2 zero=3 run merges to the single-process run's weights; dl-train resumes from
// split shards; damaged or mismatched shards exit 2 naming what is wrong and write nothing.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "dl/checkpoint/format.hpp"
#include "dl/core/strings.hpp"
#include "dl/io/crc32c.hpp"
#include "dl/io/safetensors.hpp"
#include "support/support.hpp"
#include "support/tiny_gpt.hpp"

using namespace dl::test;
using nlohmann::json;

namespace {

// The GPT of the layout tests, 8 steps: every layout runs in a second on 2 cores.
const std::string kReshardGpt = layout_gpt({{"optim.lr", "3e-3"}, {"train.steps", "8"}});



struct Trained {
  int code = -1;
  std::string err;
  std::map<int64_t, double> loss, grad_norm;
};

Trained collect(const RunResult& r) {
  Trained t;
  t.code = r.exit_code;
  t.err = r.err;
  for (const auto& l : lines(r.out)) {
    if (l.empty() || l[0] != '{') continue;
    json j = json::parse(l);
    if (!j.contains("loss")) continue;
    t.loss[j["step"].get<int64_t>()] = j["loss"].get<double>();
    t.grad_norm[j["step"].get<int64_t>()] = j.at("grad_norm").get<double>();
  }
  return t;
}

Trained train(const fs::path& cfg, const fs::path& run_dir, int nproc, const std::vector<std::string>& sets,
              const std::vector<std::string>& extra = {}) {
  auto args = with_nproc({cfg.string(), "--run-dir", run_dir.string(), "--json"}, nproc, sets);
  args.insert(args.end(), extra.begin(), extra.end());
  return collect(run(tool("dl-train"), args, "", {}, 300));
}

Trained resume(const fs::path& run_dir, int nproc, const std::vector<std::string>& sets) {
  return collect(run(tool("dl-train"), with_nproc({"--resume", run_dir.string(), "--json"}, nproc, sets), "", {}, 300));
}

fs::path step_dir(const fs::path& run_dir, int step) {
  char name[32];
  std::snprintf(name, sizeof name, "step_%08d", step);
  return run_dir / "checkpoints" / name;
}

// Relative path -> bytes of every file under a folder.
std::map<std::string, std::string> tree(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) out[fs::relative(e.path(), dir).string()] = read_file(e.path());
  return out;
}

std::set<std::string> listing(const fs::path& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

// Runs trained once per test binary: 4 of 8 steps single-process, dp=2 zero=3 and tp=2 x pp=2
// (the same global batch of 8 sequences), and the uninterrupted 8-step single-process run.
struct Runs {
  TempDir dir{"reshard"};
  fs::path cfg, single, zero3, tppp, full;
  Trained full_run;
};

const Runs& runs() {
  static Runs r;
  static bool done = false;
  if (!done) {
    r.cfg = r.dir / "c.toml";
    write_file(r.cfg, kReshardGpt);
    r.single = r.dir / "single";
    r.zero3 = r.dir / "zero3";
    r.tppp = r.dir / "tppp";
    r.full = r.dir / "full";
    Trained a = train(r.cfg, r.single, 1, {}, {"--steps", "4"});
    REQUIRE_MESSAGE(a.code == 0, a.err);
    Trained b = train(r.cfg, r.zero3, 2, {"parallel.dp=2", "parallel.zero=3", "train.batch_size=4"}, {"--steps", "4"});
    REQUIRE_MESSAGE(b.code == 0, b.err);
    Trained c = train(r.cfg, r.tppp, 4, {"parallel.tp=2", "parallel.pp=2", "train.batch_size=2", "parallel.microbatches=4"},
                      {"--steps", "4"});
    REQUIRE_MESSAGE(c.code == 0, c.err);
    Trained f = train(r.cfg, r.full, 1, {});
    REQUIRE_MESSAGE(f.code == 0, f.err);
    REQUIRE(f.loss.size() == 8);
    r.full_run = f;
    done = true;
  }
  return r;
}

RunResult shard(const std::vector<std::string>& args) { return run(tool("dl-shard"), args, "", {}, 120); }

}  // namespace

TEST_CASE("split onto a checkpoint's own layout gives dl-train's files byte for byte") {
  const Runs& r = runs();
  struct Case {
    fs::path run;
    std::string layout;
  };
  for (const Case& c : {Case{r.single, "dp=1"}, Case{r.zero3, "dp=2,zero=3"}, Case{r.tppp, "tp=2,pp=2"}}) {
    CAPTURE(c.layout);
    fs::path out = r.dir / ("self-" + c.run.filename().string());
    RunResult s = shard({"split", c.run.string(), "--layout", c.layout, "-o", out.string()});
    REQUIRE_MESSAGE(s.exit_code == 0, s.err);
    auto want = tree(step_dir(c.run, 4)), got = tree(step_dir(out, 4));
    REQUIRE(want.size() == got.size());
    for (const auto& [file_name, bytes] : want) {
      const auto& file = file_name;  // clang 14: a structured binding cannot be captured (CAPTURE)
      CAPTURE(file);
      REQUIRE(got.count(file));
      CHECK(got[file] == bytes);  // shards, config.json and the manifest (pieces, CRCs, layout)
    }
  }
}

TEST_CASE("split then merge gives back the single-process files; the summary in every format") {
  const Runs& r = runs();
  const std::string model = read_file(step_dir(r.single, 4) / "model.safetensors");
  const std::string optimizer = read_file(step_dir(r.single, 4) / "optimizer.safetensors");
  struct Case {
    std::vector<std::string> how;
    int world;
    size_t files;  // as dl-train: without ZeRO only dp rank 0 writes (the others hold copies)
  };
  std::vector<Case> cases = {{{"--layout", "dp=4,zero=3"}, 4, 4},   {{"--layout", "dp=2,tp=2,pp=2"}, 8, 4},
                             {{"--layout", "tp=2"}, 2, 2},           {{"--ranks", "2"}, 2, 1},
                             {{"--layout", "dp=2 zero=2"}, 2, 2},    {{"--layout", "pp=2,dp=2,zero=1"}, 4, 4}};
  int i = 0;
  for (const auto& c : cases) {
    CAPTURE(c.how[1]);
    fs::path out = r.dir / ("split" + std::to_string(i++));
    std::vector<std::string> args = {"split", r.single.string(), "-o", out.string(), "--format", "json"};
    args.insert(args.end(), c.how.begin(), c.how.end());
    RunResult s = shard(args);
    REQUIRE_MESSAGE(s.exit_code == 0, s.err);
    json doc = json::parse(s.out);
    CHECK(doc["to"]["world"] == c.world);
    CHECK(doc["files"].size() == c.files);
    CHECK(doc["step"] == 4);
    CHECK(doc["config_written"] == true);
    json manifest = json::parse(read_file(step_dir(out, 4) / "trainer_state.json"));
    CHECK(manifest["layout"] == doc["to"]);
    // Every file verifies against the manifest's CRC-32C.
    RunResult ins = shard({"inspect", out.string(), "--format", "json"});
    CHECK_MESSAGE(ins.exit_code == 0, ins.err);
    // Merged back: the single-process checkpoint's model.safetensors and optimizer.safetensors.
    fs::path merged = out / "merged" / "model.safetensors";
    fs::create_directories(merged.parent_path());
    RunResult m = shard({"merge", out.string(), "-o", merged.string(), "--with-optimizer"});
    REQUIRE_MESSAGE(m.exit_code == 0, m.err);
    CHECK(read_file(merged) == model);
    CHECK(read_file(merged.parent_path() / "optimizer.safetensors") == optimizer);
  }
  // Merge of a single-process checkpoint is its model.safetensors; json/csv/md summaries.
  RunResult j = shard({"merge", r.single.string(), "-o", (r.dir / "m.safetensors").string(), "--format", "json"});
  REQUIRE_MESSAGE(j.exit_code == 0, j.err);
  CHECK(read_file(r.dir / "m.safetensors") == model);
  json doc = json::parse(j.out);
  CHECK(doc["tensors"] == 28);  // wte, wpe, 2 x 12 block tensors, ln_f weight and bias
  CHECK(doc["files"][0]["file"] == "m.safetensors");
  CHECK(doc["files"][0]["file_bytes"] == model.size());
  CHECK(doc["files"][0]["crc32c"] == "0x" + dl::hex32(dl::crc32c(model.data(), model.size())));
  // The same output again: refused, then replaced with --force (as split refuses a folder with files).
  RunResult again = shard({"merge", r.single.string(), "-o", (r.dir / "m.safetensors").string()});
  CHECK(again.exit_code == 2);
  CHECK(has(again.err, "m.safetensors exists; merge replaces it only with --force"));
  RunResult csv = shard({"merge", r.single.string(), "-o", (r.dir / "m.safetensors").string(), "--format", "csv", "--force"});
  CHECK(csv.exit_code == 0);
  CHECK(lines(csv.out).size() == 2);
  RunResult table = shard({"merge", r.single.string(), "-o", (r.dir / "m.safetensors").string(), "--force"});
  CHECK(has(table.out, "28 tensors"));
  CHECK(has(table.err, "merging"));  // logs on stderr, data on stdout
  // A merged folder loads back: config.json is copied beside the model (init_from said "no
  // config.json"), and dl-train starts from it.
  const fs::path hf = r.dir / "merged-hf";
  fs::create_directories(hf);
  RunResult to_hf = shard({"merge", r.single.string(), "-o", (hf / "model.safetensors").string()});
  REQUIRE_MESSAGE(to_hf.exit_code == 0, to_hf.err);
  CHECK(read_file(hf / "config.json") == read_file(step_dir(r.single, 4) / "config.json"));
  RunResult tuned = run(tool("dl-train"), {r.cfg.string(), "--run-dir", (r.dir / "from-merged").string(), "--steps", "1",
                                           "--set", "model.init_from=\"" + hf.string() + "\"", "-q"});
  CHECK_MESSAGE(tuned.exit_code == 0, tuned.err);
  RunResult md =
      shard({"split", r.single.string(), "--layout", "dp=2,zero=1", "-o", (r.dir / "md").string(), "--format", "md"});
  CHECK(md.exit_code == 0);
  CHECK(has(md.out, "| shards/rank00001.safetensors |"));
  CHECK(has(md.out, "resume: dl-train --resume"));
}

TEST_CASE("merge: a dp=2 zero=3 run and a tp=2 x pp=2 run equal the single-process run after the same steps") {
  const Runs& r = runs();
  dl::SafetensorsReader want(step_dir(r.single, 4) / "model.safetensors");
  for (const fs::path& run_dir : {r.zero3, r.tppp}) {
    CAPTURE(run_dir.filename().string());
    fs::path out = r.dir / (run_dir.filename().string() + ".safetensors");
    RunResult m = shard({"merge", run_dir.string(), "-o", out.string()});
    REQUIRE_MESSAGE(m.exit_code == 0, m.err);
    dl::SafetensorsReader got(out);
    REQUIRE(got.names() == want.names());  // Hugging Face names, declaration order
    CHECK(got.metadata() == want.metadata());
    double worst = 0;
    for (const auto& name : want.names()) {
      CAPTURE(name);
      REQUIRE(got.info(name).shape == want.info(name).shape);
      dl::Tensor a = want.read(name), b = got.read(name);
      const float* x = a.data<float>();
      const float* y = b.data<float>();
      for (int64_t k = 0; k < a.numel(); ++k)
        worst = std::max(worst, std::fabs(double(x[k]) - double(y[k])) / std::max(1.0, std::fabs(double(x[k]))));
    }
    MESSAGE(run_dir.filename().string() << ": largest weight difference from the single-process run " << worst);
    // Four AdamW steps at lr 3e-3 from the same weights; only the order of float sums differs.
    CHECK(worst < 1e-5);
  }
}

TEST_CASE("an untied head over a vocabulary tp does not divide: tp=3 gives the single-process losses; split, merge and "
          "inspect carry lm_head.weight and round-trip byte for byte") {
  TempDir dir("reshard-untied");
  // 3 heads so tp=3 splits them; 256 vocabulary rows split 85 + 85 + 86.
  std::string toml = kReshardGpt;
  toml.replace(toml.find("n_head = 4"), 10, "n_head = 3");
  toml.replace(toml.find("n_embd = 32"), 11, "n_embd = 24\ntie_embeddings = false");
  write_file(dir / "c.toml", toml);
  Trained single = train(dir / "c.toml", dir / "single", 1, {}, {"--steps", "4"});
  REQUIRE_MESSAGE(single.code == 0, single.err);
  Trained tp3 = train(dir / "c.toml", dir / "tp3", 3, {"parallel.tp=3"}, {"--steps", "4"});
  REQUIRE_MESSAGE(tp3.code == 0, tp3.err);
  REQUIRE(tp3.loss.size() == 4);
  double worst = 0;
  for (const auto& [step, loss] : single.loss) {
    worst = std::max(worst, std::fabs(tp3.loss.at(step) - loss) / loss);
    worst = std::max(worst, std::fabs(tp3.grad_norm.at(step) - single.grad_norm.at(step)) / single.grad_norm.at(step));
  }
  MESSAGE("tp=3 (vocabulary 85 + 85 + 86 rows, untied head): largest relative difference of loss or gradient norm "
          << worst);
  CHECK(worst < 1e-5);

  // The checkpoint's model: lm_head.weight whole, config.json untied.
  const fs::path ckpt = step_dir(dir / "tp3", 4);
  CHECK(json::parse(read_file(ckpt / "config.json"))["tie_word_embeddings"] == false);
  RunResult ins = shard({"inspect", ckpt.string(), "--format", "json"});
  REQUIRE_MESSAGE(ins.exit_code == 0, ins.err);
  CHECK(json::parse(ins.out)["ok"] == true);
  // tp=3 -> one process -> tp=3: dl-train's own files, byte for byte.
  RunResult one = shard({"split", (dir / "tp3").string(), "--layout", "tp=1", "-o", (dir / "one").string()});
  REQUIRE_MESSAGE(one.exit_code == 0, one.err);
  RunResult ins1 = shard({"inspect", step_dir(dir / "one", 4).string(), "--format", "json"});
  REQUIRE_MESSAGE(ins1.exit_code == 0, ins1.err);
  bool head_listed = false;
  const json listed = json::parse(ins1.out);
  for (const auto& t : listed["tensors"])
    if (t["tensor"] == "lm_head.weight" && t["shape"].dump() == "[256,24]")
      head_listed = true;
  CHECK(head_listed);
  RunResult back = shard({"split", (dir / "one").string(), "--layout", "tp=3", "-o", (dir / "back").string()});
  REQUIRE_MESSAGE(back.exit_code == 0, back.err);
  auto want = tree(ckpt), got = tree(step_dir(dir / "back", 4));
  REQUIRE(want.size() == got.size());
  for (const auto& [file_, bytes] : want) {
    const auto& file = file_;  // clang 14 cannot capture a structured binding in CAPTURE's lambda
    CAPTURE(file);
    REQUIRE(got.count(file));
    CHECK(got[file] == bytes);
  }
  // Merged from tp=3 and from one process: the same model.safetensors, lm_head.weight included.
  RunResult m3 = shard({"merge", (dir / "tp3").string(), "-o", (dir / "m3.safetensors").string()});
  REQUIRE_MESSAGE(m3.exit_code == 0, m3.err);
  RunResult m1 = shard({"merge", (dir / "one").string(), "-o", (dir / "m1.safetensors").string()});
  REQUIRE_MESSAGE(m1.exit_code == 0, m1.err);
  CHECK(read_file(dir / "m3.safetensors") == read_file(dir / "m1.safetensors"));
  dl::SafetensorsReader merged(dir / "m3.safetensors");
  REQUIRE(merged.contains("lm_head.weight"));
  CHECK(merged.info("lm_head.weight").shape == dl::Shape{256, 24});
  CHECK(merged.names().size() == 29);
  // A config whose head is tied does not describe the checkpoint: exit 2 naming the key.
  std::string tied_toml = toml;
  tied_toml.replace(tied_toml.find("tie_embeddings = false"), 22, "tie_embeddings = true");
  write_file(dir / "tied.toml", tied_toml);
  RunResult tied = shard({"split", (dir / "tp3").string(), "--layout", "tp=1", "-o", (dir / "tied").string(), "--config",
                          (dir / "tied.toml").string()});
  CHECK(tied.exit_code == 2);
  CHECK_MESSAGE(has(tied.err, "model.tie_embeddings = true but the checkpoint's model has false"), tied.err);
}

TEST_CASE("dl-train resumes from split shards and continues the single-process losses and gradient norms") {
  const Runs& r = runs();
  // Single process -> dp=2 zero=3: the run directory's config.toml carries the layout and half
  // the batch per rank, so --resume OUT --nproc-per-node 2 is the whole command.
  fs::path a = r.dir / "resume-zero3";
  RunResult s = shard({"split", r.single.string(), "--layout", "dp=2,zero=3", "-o", a.string()});
  REQUIRE_MESSAGE(s.exit_code == 0, s.err);
  CHECK(has(s.out, "train.batch_size 8 -> 4"));
  CHECK(has(s.out, "resume: dl-train --resume " + a.string() + " --nproc-per-node 2"));
  Trained ra = resume(a, 2, {"train.steps=8"});
  INFO(ra.err);
  REQUIRE(ra.code == 0);
  CHECK(has(ra.err, "resumed from"));
  // tp=2 x pp=2 -> one process (the single-process files: model.safetensors + optimizer).
  fs::path b = r.dir / "resume-single";
  RunResult s1 = shard({"split", step_dir(r.tppp, 4).string(), "--ranks", "1", "-o", b.string()});
  REQUIRE_MESSAGE(s1.exit_code == 0, s1.err);
  CHECK(fs::exists(step_dir(b, 4) / "model.safetensors"));
  CHECK_FALSE(fs::exists(step_dir(b, 4) / "shards"));
  Trained rb = resume(b, 1, {"train.steps=8"});
  INFO(rb.err);
  REQUIRE(rb.code == 0);
  // The gradient norm too: a gradient scaled uniformly (summed instead of averaged over ranks)
  // leaves AdamW's update, and so the losses, nearly as they were.
  const Trained& full = r.full_run;
  for (const auto* t : {&ra, &rb}) {
    REQUIRE(t->loss.size() == 4);
    REQUIRE(t->grad_norm.size() == 4);
    for (auto [step_number, loss] : t->loss) {
      const auto step = step_number;  // clang 14: a structured binding cannot be captured (CAPTURE)
      CAPTURE(step);
      REQUIRE(full.loss.count(step));
      CHECK(std::fabs(loss - full.loss.at(step)) <= 1e-5 * std::fabs(full.loss.at(step)));
      const double norm = t->grad_norm.at(step), want = full.grad_norm.at(step);
      CHECK(std::fabs(norm - want) <= 1e-5 * want);
    }
  }
}

TEST_CASE("damaged, missing or mismatched shards exit 2 naming them; nothing is written") {
  const Runs& r = runs();
  TempDir d("reshard-bad");
  const fs::path good = step_dir(r.zero3, 4);
  auto fresh = [&](const std::string& name) {
    fs::path p = d / name / "step_00000004";
    fs::create_directories(p.parent_path());
    fs::copy(good, p, fs::copy_options::recursive);
    return p;
  };
  auto manifest_of = [](const fs::path& ckpt) { return json::parse(read_file(ckpt / "trainer_state.json")); };
  // The edit sealed with a new checksum, to reach the checks behind it.
  auto save_manifest = [](const fs::path& ckpt, json m) {
    dl::seal_checkpoint_manifest(m);
    write_file(ckpt / "trainer_state.json", m.dump(1));
  };
  // Both commands on a damaged checkpoint: exit 2, the message names `what`, no output.
  auto both_fail = [&](const fs::path& ckpt, const std::vector<std::string>& names) {
    auto before = listing(d.path());
    RunResult m = shard({"merge", ckpt.string(), "-o", (d / "out.safetensors").string()});
    RunResult s = shard({"split", ckpt.string(), "--ranks", "2", "-o", (d / "out-run").string()});
    for (const RunResult* x : {&m, &s}) {
      CHECK(x->exit_code == 2);
      for (const auto& n : names) CHECK_MESSAGE(has(x->err, n), x->err);
      CHECK(x->out.empty());
    }
    CHECK(listing(d.path()) == before);  // no output, no temporary left behind
  };
  const std::string rank1 = "shards/rank00001.safetensors";

  SUBCASE("a missing shard file") {
    fs::path c = fresh("missing");
    fs::remove(c / rank1);
    both_fail(c, {"rank00001.safetensors", "missing"});
  }
  SUBCASE("a flipped byte fails the CRC") {
    fs::path c = fresh("crc");
    std::string bytes = read_file(c / rank1);
    bytes[bytes.size() - 7] ^= 0x40;
    write_file(c / rank1, bytes);
    both_fail(c, {"rank00001.safetensors", "corrupt"});
  }
  SUBCASE("a truncated shard") {
    fs::path c = fresh("truncated");
    std::string bytes = read_file(c / rank1);
    write_file(c / rank1, bytes.substr(0, bytes.size() / 2));
    both_fail(c, {"rank00001.safetensors", "truncated"});
  }
  SUBCASE("a manifest edited after it was written fails its checksum") {
    fs::path c = fresh("edited");
    json m = manifest_of(c);
    m["data_position"] = m["data_position"].get<int64_t>() + 1;
    write_file(c / "trainer_state.json", m.dump(1));
    both_fail(c, {"trainer_state.json", "manifest_crc32c"});
  }
  SUBCASE("a rank missing from the manifest") {
    fs::path c = fresh("lost-rank");
    json m = manifest_of(c);
    json kept = json::array();
    for (const auto& p : m["pieces"])
      if (p["file"] != rank1) kept.push_back(p);
    m["pieces"] = kept;
    m["files"].erase(rank1);
    save_manifest(c, m);
    fs::remove(c / rank1);
    both_fail(c, {"rank 1", "rank00001.safetensors", "missing a rank's shard"});
  }
  SUBCASE("a piece with another range than its layout writes") {
    fs::path c = fresh("range");
    json m = manifest_of(c);
    bool changed = false;
    for (auto& p : m["pieces"])
      if (p["file"] == rank1 && p["name"] == "h.0.mlp.c_fc.weight" && p["kind"] == "param") {
        p["range"][0] = p["range"][0].get<int64_t>() + 1;
        changed = true;
        break;
      }
    REQUIRE(changed);
    save_manifest(c, m);
    both_fail(c, {"h.0.mlp.c_fc.weight@", "rank00001.safetensors", "mismatched shards"});
  }
  SUBCASE("a whole shape that disagrees with the model") {
    fs::path c = fresh("shape");
    json m = manifest_of(c);
    m["tensors"]["h.1.mlp.c_fc.weight"]["shape"] = json::array({32, 64});
    save_manifest(c, m);
    both_fail(c, {"h.1.mlp.c_fc.weight", "shape disagreement"});
  }
  SUBCASE("a shard whose tensor holds fewer elements than its piece (CRCs rewritten to match)") {
    fs::path c = fresh("short-tensor");
    dl::SafetensorsWriter w;
    std::vector<dl::Tensor> keep;
    {
      dl::SafetensorsReader in(c / rank1);
      for (const auto& name : in.names()) {
        dl::Tensor t = in.read(name);
        if (name == "wpe.weight") t = t.view({t.numel()}).flat_slice(0, {t.numel() - 1}).clone();
        keep.push_back(t);
        w.add(name, t);
      }
      w.set_metadata(in.metadata());
    }
    uint32_t crc = w.write(c / rank1);
    json m = manifest_of(c);
    m["files"][rank1] = {{"crc32c", crc}, {"bytes", fs::file_size(c / rank1)}};
    save_manifest(c, m);
    both_fail(c, {"rank00001.safetensors", "'wpe.weight'", "shapes disagree"});
  }
}

TEST_CASE("split: layouts the model does not allow, and bad arguments, exit 2 before writing") {
  const Runs& r = runs();
  TempDir d("reshard-args");
  const auto before = listing(d.path());
  struct Case {
    std::vector<std::string> args;
    std::string expect;
  };
  const std::string src = r.single.string(), out = (d / "out").string();
  std::vector<Case> cases = {
      {{"--layout", "tp=3"}, "must divide model.n_head = 4"},
      {{"--layout", "pp=4"}, "must divide model.n_layer = 2"},
      {{"--layout", "dp=2,pp=2,zero=2"}, "zero = 2 with pipeline parallel"},
      {{"--layout", "dp=2,sp=2"}, "unknown key 'sp'"},
      {{"--layout", "dp=two"}, "not a whole number"},
      {{"--layout", "zero=4"}, "not a ZeRO stage"},
      {{"--layout", "dp=0"}, "must be at least 1"},
      {{"--layout", "dp=2", "--ranks", "2"}, "excludes"},
      {{}, "--layout"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.expect);
    std::vector<std::string> args = {"split", src, "-o", out};
    args.insert(args.end(), c.args.begin(), c.args.end());
    RunResult s = shard(args);
    CHECK(s.exit_code == 2);
    CHECK_MESSAGE(has(s.err, c.expect), s.err);
  }
  CHECK(listing(d.path()) == before);
  // An existing, non-empty output is never overwritten.
  fs::create_directories(d / "taken");
  write_file(d / "taken" / "x", "keep");
  RunResult taken = shard({"split", src, "--ranks", "2", "-o", (d / "taken").string()});
  CHECK(taken.exit_code == 2);
  CHECK(has(taken.err, "not empty"));
  CHECK(read_file(d / "taken" / "x") == "keep");
  // A config for another model is refused, naming the key.
  write_file(d / "other.toml", std::string(kReshardGpt).replace(std::string(kReshardGpt).find("n_embd = 32"), 11, "n_embd = 64"));
  RunResult other = shard({"split", src, "--ranks", "2", "--config", (d / "other.toml").string(), "-o", out});
  CHECK(other.exit_code == 2);
  CHECK(has(other.err, "model.n_embd = 64"));
  // Not a checkpoint at all; merge into a folder that does not exist.
  CHECK(shard({"merge", d.path().string(), "-o", (d / "m.safetensors").string()}).exit_code == 2);
  RunResult nodir = shard({"merge", src, "-o", (d / "no" / "such" / "m.safetensors").string()});
  CHECK(nodir.exit_code == 2);
  CHECK(has(nodir.err, "does not exist"));
}

TEST_CASE("an MLP checkpoint merges under its torch.nn.Linear names and splits over dp") {
  TempDir d("reshard-mlp");
  auto iris = source_path("configs/iris.toml");
  std::vector<std::string> quiet = {"train.steps=3", "train.eval_every=0", "log.tensorboard=false"};
  Trained one = train(iris, d / "one", 1, quiet);
  REQUIRE_MESSAGE(one.code == 0, one.err);
  auto two_sets = quiet;
  two_sets.insert(two_sets.end(), {"parallel.dp=2", "parallel.zero=1", "train.batch_size=16"});
  Trained two = train(iris, d / "two", 2, two_sets);
  REQUIRE_MESSAGE(two.code == 0, two.err);
  // dp=2 zero=1 merged: layers.{i}.weight [out, in], the single-process order and shapes.
  RunResult m = shard({"merge", (d / "two").string(), "-o", (d / "two.safetensors").string()});
  REQUIRE_MESSAGE(m.exit_code == 0, m.err);
  dl::SafetensorsReader got(d / "two.safetensors"), want(step_dir(d / "one", 3) / "model.safetensors");
  CHECK(got.names() == want.names());
  CHECK(got.names() == std::vector<std::string>{"layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias",
                                                "layers.2.weight", "layers.2.bias"});
  CHECK(got.info("layers.0.weight").shape == dl::Shape{32, 4});
  CHECK(got.info("layers.2.weight").shape == dl::Shape{3, 32});
  // Split the single-process MLP over dp=2 zero=1 and merge it back: the same bytes.
  RunResult s = shard({"split", (d / "one").string(), "--layout", "dp=2,zero=1", "-o", (d / "split").string()});
  REQUIRE_MESSAGE(s.exit_code == 0, s.err);
  RunResult back = shard({"merge", (d / "split").string(), "-o", (d / "back.safetensors").string()});
  REQUIRE_MESSAGE(back.exit_code == 0, back.err);
  CHECK(read_file(d / "back.safetensors") == read_file(step_dir(d / "one", 3) / "model.safetensors"));
  // Tensor parallelism needs the GPT.
  RunResult tp = shard({"split", (d / "one").string(), "--layout", "tp=2", "-o", (d / "tp").string()});
  CHECK(tp.exit_code == 2);
  CHECK(has(tp.err, "model.type = \"gpt\""));
}

TEST_CASE("SafetensorsStreamWriter: SafetensorsWriter's bytes from appended parts; incomplete files never appear") {
  TempDir d("stream-writer");
  dl::Tensor a = dl::Tensor::empty({3, 2}, dl::DType::f32), b = dl::Tensor::empty({5}, dl::DType::f32);
  for (int64_t k = 0; k < 6; ++k) a.data<float>()[k] = 0.5f * static_cast<float>(k);
  for (int64_t k = 0; k < 5; ++k) b.data<float>()[k] = -1.0f * static_cast<float>(k);
  dl::SafetensorsWriter whole;
  whole.add("a", a);
  whole.add("empty", dl::Tensor::empty({0}, dl::DType::f32));
  whole.add("b", b);
  whole.set_metadata({{"format", "pt"}});
  const uint32_t crc = whole.write(d / "whole.safetensors");
  std::vector<dl::SafetensorsEntry> entries = {
      {"a", dl::DType::f32, {3, 2}}, {"empty", dl::DType::f32, {0}}, {"b", dl::DType::f32, {5}}};
  {
    dl::SafetensorsStreamWriter w(d / "stream.safetensors", entries, {{"format", "pt"}});
    CHECK(w.next()->name == "a");
    w.append(a.raw(), 10);  // parts that straddle tensors
    w.append(static_cast<const char*>(a.raw()) + 10, 14);
    CHECK(w.next()->name == "b");  // the empty tensor is complete as soon as it starts
    w.append(b.raw(), 20);
    CHECK(w.next() == nullptr);
    CHECK_THROWS(w.append(b.raw(), 1));
    CHECK(w.commit() == crc);
  }
  CHECK(read_file(d / "stream.safetensors") == read_file(d / "whole.safetensors"));
  const auto before = listing(d.path());
  {
    dl::SafetensorsStreamWriter w(d / "short.safetensors", entries);
    w.append(a.raw(), 24);
    CHECK_THROWS(w.commit());  // b is missing
  }
  CHECK(listing(d.path()) == before);  // neither the file nor its temporary
}

namespace {

// A llama run of `model` (extra [model] settings) checkpointed at step 4, split to `layout` on
// `ranks` processes and merged back byte for byte (merge names the Hugging Face class); dl-train
// resumes the split shards to step 6 with the uninterrupted run's losses.
void check_llama_reshard(const std::string& name, const std::vector<TomlKey>& model,
                         const std::string& layout, int ranks, const std::string& hf_class) {
  TempDir dir(name);
  const fs::path cfg = dir / "llama.toml";
  std::vector<TomlKey> keys = {
      {"model.type", "\"llama\""}, {"model.n_kv_head", "2"}, {"model.ffn_hidden", "40"},
      {"model.tie_embeddings", "false"}, {"optim.lr", "3e-3"}, {"train.steps", "6"}};
  keys.insert(keys.end(), model.begin(), model.end());
  write_file(cfg, layout_gpt(keys));
  Trained single = train(cfg, dir / "single", 1, {}, {"--steps", "4"});
  REQUIRE_MESSAGE(single.code == 0, single.err);
  Trained full = train(cfg, dir / "full", 1, {});
  REQUIRE_MESSAGE(full.code == 0, full.err);
  const fs::path split = dir / "split";
  RunResult s = shard({"split", (dir / "single").string(), "--layout", layout, "-o", split.string()});
  REQUIRE_MESSAGE(s.exit_code == 0, s.err);
  // inspect verifies the split (the model rebuilt from its config.json declares the biases or not).
  RunResult ins = shard({"inspect", split.string(), "--format", "json"});
  REQUIRE_MESSAGE(ins.exit_code == 0, ins.err);
  CHECK(json::parse(ins.out)["ok"] == true);
  CHECK(has(ins.out, "model.layers.1.self_attn.k_proj.bias") == (hf_class == "Qwen2ForCausalLM"));
  const fs::path merged = dir / "merged" / "model.safetensors";
  fs::create_directories(merged.parent_path());
  RunResult m = shard({"merge", split.string(), "-o", merged.string(), "--with-optimizer"});
  REQUIRE_MESSAGE(m.exit_code == 0, m.err);
  CHECK(has(m.out, hf_class + " names"));
  CHECK(read_file(merged) == read_file(step_dir(dir / "single", 4) / "model.safetensors"));
  CHECK(read_file(merged.parent_path() / "optimizer.safetensors") ==
        read_file(step_dir(dir / "single", 4) / "optimizer.safetensors"));
  CHECK(read_file(merged.parent_path() / "config.json") == read_file(step_dir(dir / "single", 4) / "config.json"));
  // The ranks continue from the shards where the single process left off (tp sums the
  // vocabulary's rows in another order: equal within 1e-6, as the layout tests hold).
  Trained resumed = resume(split, ranks, {"train.steps=6"});
  REQUIRE_MESSAGE(resumed.code == 0, resumed.err);
  REQUIRE(resumed.loss.size() == 2);
  for (const auto& entry : resumed.loss) {  // not a structured binding: CAPTURE's lambda takes it (clang 14)
    const int64_t step = entry.first;
    CAPTURE(step);
    CHECK(entry.second == doctest::Approx(full.loss.at(step)).epsilon(1e-6));
  }
}

}  // namespace

TEST_CASE("a llama checkpoint (GQA 4:2, untied head) splits to tp=2 x pp=2 and merges back byte for byte; dl-train "
          "resumes the split shards") {
  check_llama_reshard("reshard-llama", {}, "dp=1,tp=2,pp=2", 4, "LlamaForCausalLM");
}

// The biases split with their heads' rows under tp, as the q/k/v weights.
TEST_CASE("a llama checkpoint with q/k/v biases (a Qwen2 folder) splits to tp=2 and merges back byte for byte; "
          "dl-train resumes the split shards") {
  check_llama_reshard("reshard-qwen2", {{"model.qkv_bias", "true"}}, "dp=1,tp=2,pp=1", 2, "Qwen2ForCausalLM");
}

// dl-train's checkpoints carry the run's tokenizer files (tokenizer.json, tokenizer_config.json);
// split's output must too, so a split checkpoint is as whole a Hugging Face folder as the source.
TEST_CASE("split carries the checkpoint's tokenizer files: onto its own layout byte for byte, onto dp=2 listed and "
          "verified") {
  TempDir d("reshard-tokenizer");
  // A byte-level BPE tokenizer.json of the 26 letters and the space.
  json vocab = json::object();
  for (int c = 0; c < 26; ++c) vocab[std::string(1, static_cast<char>('a' + c))] = c;
  vocab["\xC4\xA0"] = 26;
  const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  fs::create_directories(d / "tok");
  write_file(d / "tok" / "tokenizer.json",
             json{{"version", "1.0"}, {"added_tokens", json::array()}, {"pre_tokenizer", byte_level}, {"decoder", byte_level},
                  {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}}}}
                 .dump());
  write_file(d / "tok" / "tokenizer_config.json", R"({"tokenizer_class": "PreTrainedTokenizerFast"})");
  std::string text;
  for (int i = 0; i < 400; ++i) text += "the quick brown fox jumps over the lazy dog ";
  write_file(d / "text.txt", text);
  write_file(d / "c.toml", layout_gpt({{"data.source", "\"text:" + (d / "text.txt").string() + "\""},
                                       {"data.tokenizer", "\"hf:" + (d / "tok").string() + "\""},
                                       {"model.vocab_size", "32"}, {"train.steps", "2"}}));
  Trained t = train(d / "c.toml", d / "run", 1, {});
  REQUIRE_MESSAGE(t.code == 0, t.err);
  const fs::path source = step_dir(d / "run", 2);
  REQUIRE(fs::exists(source / "tokenizer.json"));

  RunResult self = shard({"split", (d / "run").string(), "--layout", "dp=1", "-o", (d / "self").string()});
  REQUIRE_MESSAGE(self.exit_code == 0, self.err);
  const auto want = tree(source), got = tree(step_dir(d / "self", 2));
  CHECK(listing(step_dir(d / "self", 2)) == listing(source));
  for (const auto& entry : want) {
    const std::string file = entry.first;
    CAPTURE(file);
    REQUIRE(got.count(file));
    CHECK(got.at(file) == entry.second);  // the tokenizer files and the manifest that lists them
  }

  RunResult dp2 = shard({"split", (d / "run").string(), "--layout", "dp=2", "-o", (d / "dp2").string()});
  REQUIRE_MESSAGE(dp2.exit_code == 0, dp2.err);
  const fs::path split = step_dir(d / "dp2", 2);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) {
    CAPTURE(f);
    CHECK(read_file(split / f) == read_file(source / f));
    CHECK(json::parse(read_file(split / dl::kCheckpointManifest))["files"].contains(f));
  }
  CHECK(shard({"inspect", split.string()}).exit_code == 0);  // every file against its CRC
}
