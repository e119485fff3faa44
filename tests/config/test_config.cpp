// Config loading: defaults, a full file, every class of error with its file and line, --set
// overrides, data-path resolution, the TOML dump round trip and the key docs.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <iomanip>
#include <set>
#include <sstream>

#include "dl/config/config.hpp"
#include "dl/config/hf_gpt2_config.hpp"
#include "dl/config/schema.hpp"
#include "dl/core/error.hpp"
#include "support/support.hpp"

using namespace dl;
using namespace dl::test;

namespace {

// The message of the dl::Error(usage) that f throws ("" and a failed check when none).
std::string usage_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::usage);
    return e.what();
  }
  FAIL_CHECK("expected a dl::Error(usage)");
  return "";
}

Config parse(const std::string& text, const std::vector<std::string>& overrides = {}) {
  return parse_config(text, "x.toml", fs::current_path(), overrides);
}
std::string parse_error(const std::string& text, const std::vector<std::string>& overrides = {}) {
  return usage_error([&] { parse(text, overrides); });
}
std::string set_error(const std::string& override_text) { return parse_error("", {override_text}); }

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Restores the working directory when a test changes it.
struct Cwd {
  fs::path saved = fs::current_path();
  explicit Cwd(const fs::path& p) { fs::current_path(p); }
  ~Cwd() { fs::current_path(saved); }
};

}  // namespace

TEST_CASE("empty text gives the documented defaults") {
  Config c = parse("");
  CHECK(c == Config{});
  CHECK(c.model.type == ModelType::gpt);
  CHECK(c.model.n_layer == 4);
  CHECK(c.model.hidden == std::vector<int64_t>{64, 64});
  CHECK(c.data.source == "synthetic:addition");
  CHECK(c.data.val_source.empty());
  CHECK(c.optim.lr == 1e-3);
  CHECK(c.parallel.dp == -1);  // "auto": every process not taken by tp and pp is data parallel
  CHECK(c.log.progress == Progress::automatic);
}

TEST_CASE("a full valid file sets every section") {
  TempDir dir("config");
  fs::create_directories(dir / "data");
  write_file(dir / "data/train.txt", "hello world\n");
  write_file(dir / "data/val.txt", "hello\n");
  write_file(dir / "run.toml", R"(# a comment
[model]
type = "gpt"
n_layer = 2
n_head = 2
n_embd = 64
block_size = 32
vocab_size = 256
init_std = 0.01
hidden = [16, 8]
activation = "gelu"

[data]
source = "text:data/train.txt"
val_source = "text:data/val.txt"
val_fraction = 0.25
digits = 2
label_column = 0
normalize = false

[optim]
name = "sgd"
lr = 3e-4
weight_decay = 0.0
beta1 = 0.8
beta2 = 0.99
eps = 1e-6
momentum = 0.5
nesterov = true
grad_clip = 0

[schedule]
decay = "linear"
warmup_steps = 10
decay_steps = 90
min_lr_ratio = 0.0

[train]
steps = 100
batch_size = 8
grad_accum = 2
seed = 7
device = "auto"
precision = "bf16"
threads = 2
eval_every = 0
eval_batches = 1
checkpoint_every = 50
keep_checkpoints = 1

[parallel]
dp = "auto"
tp = 2
pp = 2
zero = 3
offload = "cpu"
microbatches = 4
schedule = "gpipe"
activation_checkpointing = true

[log]
every = 5
tensorboard = false
progress = "none"
samples = 0
)");
  Config c = load_config(dir / "run.toml");
  fs::path base = fs::absolute(dir.path()).lexically_normal();
  CHECK(c.model.n_layer == 2);
  CHECK(c.model.n_embd == 64);
  CHECK(c.model.init_std == 0.01);
  CHECK(c.model.hidden == std::vector<int64_t>{16, 8});
  CHECK(c.model.activation == Activation::gelu);
  CHECK(c.data.source == "text:" + (base / "data/train.txt").string());
  CHECK(c.data.val_source == "text:" + (base / "data/val.txt").string());
  CHECK(c.data.val_fraction == 0.25);
  CHECK(c.data.digits == 2);
  CHECK(c.data.label_column == 0);
  CHECK(c.data.normalize == false);
  CHECK(c.optim.name == OptimizerKind::sgd);
  CHECK(c.optim.lr == 3e-4);
  CHECK(c.optim.eps == 1e-6);
  CHECK(c.optim.nesterov == true);
  CHECK(c.optim.grad_clip == 0.0);  // integer 0 accepted for a float
  CHECK(c.schedule.decay == Decay::linear);
  CHECK(c.schedule.warmup_steps == 10);
  CHECK(c.schedule.decay_steps == 90);
  CHECK(c.train.steps == 100);
  CHECK(c.train.device == DeviceChoice::automatic);
  CHECK(c.train.precision == Precision::bf16);
  CHECK(c.train.keep_checkpoints == 1);
  CHECK(c.parallel.dp == -1);
  CHECK(c.parallel.tp == 2);
  CHECK(c.parallel.zero == 3);
  CHECK(c.parallel.offload == Offload::cpu);
  CHECK(c.parallel.schedule == PipelineSchedule::gpipe);
  CHECK(c.parallel.activation_checkpointing == true);
  CHECK(c.log.every == 5);
  CHECK(c.log.tensorboard == false);
  CHECK(c.log.progress == Progress::none);
  CHECK(c.log.samples == 0);
}

TEST_CASE("dotted keys and integer-valued floats") {
  Config c = parse("model.n_layer = 3\noptim.lr = 1\nparallel.dp = 2\n");
  CHECK(c.model.n_layer == 3);
  CHECK(c.optim.lr == 1.0);
  CHECK(c.parallel.dp == 2);
}

TEST_CASE("TOML syntax errors give file, line and column") {
  std::string e = parse_error("[model]\nn_layer = 4\nn_head = = 2\n");
  CHECK(e.rfind("x.toml:3:", 0) == 0);
  CHECK(contains(e, ": TOML syntax error: "));
  e = parse_error("[model]\nn_layer = 4\nn_layer = 5\n");
  CHECK(e.rfind("x.toml:3:", 0) == 0);
  CHECK(contains(e, "TOML syntax error"));
}

TEST_CASE("unknown keys and sections suggest the closest known key") {
  CHECK(parse_error("[model]\ntype = \"gpt\"\nn_layers = 4\n") ==
        "x.toml:3: unknown key 'model.n_layers' — did you mean 'model.n_layer'?");
  // a key in the wrong section suggests the right full key
  CHECK(parse_error("[train]\nsteps = 10\nlr = 0.1\n") == "x.toml:3: unknown key 'train.lr' — did you mean 'optim.lr'?");
  CHECK(parse_error("[log]\n\nwarmup_step = 3\n") ==
        "x.toml:3: unknown key 'log.warmup_step' — did you mean 'schedule.warmup_steps'?");
  CHECK(parse_error("\n[modle]\nn_layer = 4\n") == "x.toml:2: unknown section 'modle' — did you mean 'model'?");
  CHECK(parse_error("n_layer = 4\n") == "x.toml:1: unknown key 'n_layer' — did you mean 'model.n_layer'?");
  // nothing close: list what exists
  CHECK(parse_error("[model]\nwibble = 1\n") ==
        "x.toml:2: unknown key 'model.wibble'; the keys of [model] are type, n_layer, n_head, n_embd, block_size, "
        "vocab_size, init_std, tie_embeddings, init_from, n_kv_head, ffn_hidden, rms_norm_eps, rope_theta, "
        "rope_scaling, rope_factor, rope_low_freq_factor, rope_high_freq_factor, rope_original_max_position, qkv_bias, "
        "n_experts, n_experts_active, expert_ffn_hidden, n_shared_experts, n_dense_layers, hidden, activation");
  CHECK(parse_error("[zzzzzzzz]\n") ==
        "x.toml:1: unknown section 'zzzzzzzz'; the sections are model, data, optim, schedule, train, parallel, dist, log");
  // a sub-table under a known section is an unknown key
  CHECK(contains(parse_error("[model.extra]\na = 1\n"), "x.toml:1: unknown key 'model.extra'"));
  CHECK(parse_error("model = 4\n") == "x.toml:1: model must be a section ([model] followed by its keys), got integer 4");
}

TEST_CASE("type errors name the key, the line and the value") {
  CHECK(parse_error("[model]\nn_layer = \"four\"\n") == "x.toml:2: model.n_layer must be an integer, got string \"four\"");
  CHECK(parse_error("[model]\nn_layer = 4.0\n") == "x.toml:2: model.n_layer must be an integer, got float 4.0");
  CHECK(parse_error("[model]\nn_layer = 4.5\n") == "x.toml:2: model.n_layer must be an integer, got float 4.5");
  CHECK(parse_error("[optim]\n\nlr = \"fast\"\n") == "x.toml:3: optim.lr must be a number, got string \"fast\"");
  CHECK(parse_error("[optim]\nnesterov = 1\n") == "x.toml:2: optim.nesterov must be true or false, got integer 1");
  CHECK(parse_error("[optim]\nnesterov = \"yes\"\n") == "x.toml:2: optim.nesterov must be true or false, got string \"yes\"");
  CHECK(parse_error("[train]\ndevice = 1\n") == "x.toml:2: train.device must be a string, got integer 1");
  CHECK(parse_error("[model]\nhidden = 64\n") == "x.toml:2: model.hidden must be an array of integers, got integer 64");
  CHECK(parse_error("[model]\nhidden = [64, \"a\"]\n") ==
        "x.toml:2: model.hidden must be an array of integers, got array [64, \"a\"]");
  CHECK(parse_error("[model]\nhidden = [64, 1.5]\n") ==
        "x.toml:2: model.hidden must be an array of integers, got array [64, 1.5]");
  CHECK(parse_error("[parallel]\ndp = \"max\"\n") ==
        "x.toml:2: parallel.dp must be an integer or \"auto\", got string \"max\"");
  CHECK(parse_error("[model]\n[model.hidden]\na = 1\n") == "x.toml:2: model.hidden must be an array of integers, got table");
  CHECK(contains(parse_error("[train]\nseed = 1979-05-27\n"), "x.toml:2: train.seed must be an integer, got date 1979-05-27"));
}

TEST_CASE("range and choice errors") {
  CHECK(parse_error("[optim]\nlr = -0.001\n") == "x.toml:2: optim.lr must be > 0, got -0.001");
  CHECK(parse_error("[optim]\nlr = 0\n") == "x.toml:2: optim.lr must be > 0, got 0");
  CHECK(parse_error("[train]\ndevice = \"gpu\"\n") == "x.toml:2: train.device must be one of cpu, cuda, auto; got \"gpu\"");
  CHECK(parse_error("[optim]\nbeta1 = 1\n") == "x.toml:2: optim.beta1 must be in [0, 1), got 1");
  CHECK(parse_error("[optim]\nbeta2 = -0.5\n") == "x.toml:2: optim.beta2 must be in [0, 1), got -0.5");
  CHECK(parse_error("[optim]\nlr = nan\n") == "x.toml:2: optim.lr must be a finite number, got nan");
  CHECK(parse_error("[optim]\ngrad_clip = -1\n") == "x.toml:2: optim.grad_clip must be >= 0, got -1");
  CHECK(parse_error("[data]\nval_fraction = 0.7\n") == "x.toml:2: data.val_fraction must be in [0, 0.5], got 0.7");
  CHECK(parse_error("[parallel]\nzero = 4\n") == "x.toml:2: parallel.zero must be in [0, 3], got 4");
  CHECK(parse_error("[parallel]\nschedule = \"zb\"\n") == "x.toml:2: parallel.schedule must be one of gpipe, 1f1b; got \"zb\"");
  CHECK(parse_error("[parallel]\ndp = 0\n") == "x.toml:2: parallel.dp must be >= 1 or \"auto\", got 0");
  CHECK(parse_error("[parallel]\noffload = \"nvme\"\n") == "x.toml:2: parallel.offload must be one of none, cpu; got \"nvme\"");
  CHECK(parse_error("[train]\nprecision = \"fp8\"\n") == "x.toml:2: train.precision must be one of fp32, bf16, fp16; got \"fp8\"");
  CHECK(parse_error("[optim]\nname = \"adam\"\n") == "x.toml:2: optim.name must be one of adamw, sgd; got \"adam\"");
  CHECK(parse_error("[schedule]\ndecay = \"step\"\n") ==
        "x.toml:2: schedule.decay must be one of cosine, linear, constant; got \"step\"");
  CHECK(parse_error("[log]\nprogress = \"quiet\"\n") == "x.toml:2: log.progress must be one of auto, bar, lines, none; got \"quiet\"");
  CHECK(parse_error("[model]\nactivation = \"tanh\"\n") == "x.toml:2: model.activation must be one of relu, gelu; got \"tanh\"");
  CHECK(parse_error("[model]\nhidden = []\n") == "x.toml:2: model.hidden must not be empty");
  CHECK(parse_error("[model]\ntype = \"mlp\"\nhidden = [32, 0]\n") == "x.toml:3: model.hidden[1] must be >= 1, got 0");
  CHECK(parse_error("[model]\nn_layer = 0\n") == "x.toml:2: model.n_layer must be >= 1, got 0");
  CHECK(parse_error("[model]\nn_layer = 3000000000\n") == "x.toml:2: model.n_layer must be <= 2147483647, got 3000000000");
  CHECK(parse_error("[model]\nvocab_size = 1\n") == "x.toml:2: model.vocab_size must be >= 2, got 1");
  CHECK(parse_error("[model]\nblock_size = 0\n") == "x.toml:2: model.block_size must be >= 1, got 0");
  CHECK(parse_error("[train]\nbatch_size = 0\n") == "x.toml:2: train.batch_size must be >= 1, got 0");
  CHECK(parse_error("[train]\nsteps = -1\n") == "x.toml:2: train.steps must be in [0, 1000000000], got -1");
  CHECK(parse_error("[train]\ngrad_accum = 0\n") == "x.toml:2: train.grad_accum must be >= 1, got 0");
  CHECK(parse_error("[train]\nkeep_checkpoints = 0\n") == "x.toml:2: train.keep_checkpoints must be >= 1, got 0");
  CHECK(parse_error("[train]\nthreads = -1\n") == "x.toml:2: train.threads must be >= 0, got -1");
  CHECK(parse_error("[log]\nevery = 0\n") == "x.toml:2: log.every must be >= 1, got 0");
}

TEST_CASE("config choices: one enum and one name table each, parsed once") {
  CHECK(choice_name(Precision::bf16) == "bf16");
  CHECK(parse_choice<PipelineSchedule>("1f1b") == PipelineSchedule::one_f_one_b);
  CHECK_FALSE(parse_choice<DeviceChoice>("gpu").has_value());
  CHECK(choice_list<Progress>() == "auto, bar, lines, none");
  // The last value wins: an unknown name replaced by a known one is no error.
  Config c = parse("[train]\nprecision = \"fp8\"\n", {"train.precision=fp16"});
  CHECK(c.train.precision == Precision::fp16);
  CHECK(str(c.train.precision, " ", Decay::linear) == "fp16 linear");
  CHECK(set_error("train.precision=fp8") == "--set train.precision=fp8: train.precision must be one of fp32, bf16, fp16; got \"fp8\"");
  CHECK_THROWS_AS(choice_from_name<Offload>("nvme"), Error);
}

TEST_CASE("every declared range and choice is enforced") {
  // Walk the one list: for each constrained key, a value just outside its constraint fails
  // naming that key, and a value on (or next to) its bound that is not the default parses and is
  // stored in that key's field.
  TempDir dir("ranges");
  write_file(dir / "t.txt", "text");
  const std::string text_file = "text:" + fs::absolute(dir / "t.txt").lexically_normal().string();
  Config defaults;
  int checked = 0;
  config_schema::visit_config(defaults, [&](std::string_view s, std::string_view k, auto& field, const config_schema::Spec& spec) {
    using T = std::decay_t<decltype(field)>;
    std::string key = std::string(s) + "." + std::string(k);
    CAPTURE(key);
    std::string bad, good;
    T inside{};
    if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, double>) {
      if (std::isfinite(spec.lo)) bad = std::to_string(static_cast<int64_t>(spec.lo) - (spec.lo_open ? 0 : 1));
      else if (std::isfinite(spec.hi)) bad = std::to_string(static_cast<int64_t>(spec.hi) + 1);
      if (spec.auto_int && bad == "-1") bad = "-2";
      auto allowed = [&](double x) {
        return (spec.lo_open ? x > spec.lo : x >= spec.lo) && (spec.hi_open ? x < spec.hi : x <= spec.hi);
      };
      for (double x : {spec.lo, spec.hi, spec.lo + 1, spec.hi - 1, (spec.lo + spec.hi) / 2})
        if (std::isfinite(x) && allowed(x) && static_cast<T>(x) != field) {
          inside = static_cast<T>(x);
          std::ostringstream os;
          os << std::setprecision(17) << inside;
          good = os.str();
          break;
        }
    } else if constexpr (requires { typename T::Enum; }) {  // a Choice<E>
      bad = "\"no-such-choice\"";
      for (std::string_view c : choice_names(typename T::Enum{}))
        if (c != field.name()) {
          inside = T(choice_from_name<typename T::Enum>(c));
          break;
        }
      good = "\"" + std::string(inside.name()) + "\"";
    } else if constexpr (std::is_same_v<T, std::string>) {
      if (spec.source) bad = "\"nowhere:x\"";
      if (spec.source) inside = field == text_file ? "synthetic:addition" : text_file;
      good = "\"" + inside + "\"";
    } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
      bad = "[0]";
      good = "[1, 2]";
      inside = {1, 2};
    }
    if (bad.empty()) return;
    ++checked;
    std::string e = set_error(key + "=" + bad);
    CHECK(e.rfind("--set " + key + "=" + bad + ": " + key, 0) == 0);
    REQUIRE(!good.empty());
    // n_head = 1 first, so that any model.n_embd passes the divisibility check.
    Config c;
    try {
      c = parse("", {"model.n_head=1", key + "=" + good});
    } catch (const Error& ex) {
      FAIL_CHECK(key, "=", good, " was refused: ", std::string(ex.what()));
      return;
    }
    int stored = 0;
    config_schema::visit_config(c, [&](std::string_view s2, std::string_view k2, auto& f2, const config_schema::Spec&) {
      if constexpr (std::is_same_v<std::decay_t<decltype(f2)>, T>)
        if (s2 == s && k2 == k) stored += f2 == inside;
    });
    CHECK_MESSAGE(stored == 1, key, "=", good, " was not stored");
  });
  CHECK(checked == 64);  // the constrained keys of schema.hpp
}

TEST_CASE("llama's cross-field checks name the key and its line") {
  CHECK(parse_error("[model]\ntype = \"llama\"\nn_head = 4\nn_kv_head = 3\n") ==
        "x.toml:4: model.n_kv_head (3) must divide model.n_head (4): each K/V head serves a whole group of query heads");
  CHECK(parse_error("[model]\ntype = \"llama\"\nn_head = 4\nn_embd = 36\n") ==
        "x.toml:4: model.n_embd (36) must be model.n_head (4) heads of an even size for a llama model (rotary "
        "embeddings rotate pairs)");
  CHECK(parse_error("[model]\ntype = \"llama\"\nrope_scaling = \"llama3\"\nrope_high_freq_factor = 0.5\n") ==
        "x.toml:4: model.rope_high_freq_factor (0.5) must be above model.rope_low_freq_factor (1) for rope_scaling = "
        "\"llama3\"");
  CHECK(parse_error("[model]\ntype = \"llama\"\nrope_scaling = \"yarn\"\n").find("x.toml:3") == 0);
  // A gpt config ignores the llama keys' cross-checks.
  CHECK_NOTHROW(parse_config("[model]\nn_kv_head = 3\n", "x.toml", "."));
}

TEST_CASE("cross-field checks name the first named key that was set") {
  CHECK(parse_error("[model]\nn_head = 4\nn_embd = 130\n") ==
        "x.toml:3: model.n_embd (130) must be divisible by model.n_head (4) for a gpt model");
  CHECK(parse_error("[model]\nn_head = 5\n") ==
        "x.toml:2: model.n_embd (128) must be divisible by model.n_head (5) for a gpt model");
  CHECK(parse("[model]\ntype = \"mlp\"\nn_head = 5\n").model.n_head == 5);  // only gpt needs it
  // Nesterov momentum needs momentum and no dampening, as torch.optim.SGD says; only sgd reads them.
  CHECK(parse_error("[optim]\nname = \"sgd\"\nnesterov = true\ndampening = 0.1\n") ==
        "x.toml:3: optim.nesterov needs optim.momentum > 0 and optim.dampening = 0 (as torch.optim.SGD), got momentum "
        "0.9 and dampening 0.1");
  CHECK(parse("[optim]\nname = \"sgd\"\nmomentum = 0\n").optim.momentum == 0.0);  // plain SGD is fine
  CHECK(parse_error("[optim]\nname = \"sgd\"\nmomentum = 0\n", {"optim.nesterov=true"}) ==
        "--set optim.nesterov=true: optim.nesterov needs optim.momentum > 0 and optim.dampening = 0 (as "
        "torch.optim.SGD), got momentum 0 and dampening 0");
  CHECK(parse("[optim]\nname = \"sgd\"\ndampening = 0.25\n").optim.dampening == 0.25);
  CHECK(parse("[optim]\nnesterov = true\ndampening = 0.25\n").optim.dampening == 0.25);  // adamw ignores both
  // A warm-up longer than the run is legitimate (a short smoke test of a long config).
  CHECK(parse("", {"train.steps=10", "schedule.warmup_steps=20"}).schedule.warmup_steps == 20);
  CHECK(parse("[schedule]\nwarmup_steps = 2000\ndecay_steps = 5000\n").schedule.warmup_steps == 2000);
}

TEST_CASE("--set overrides every type") {
  Config c = parse("[model]\nn_layer = 2\n",
                   {"model.n_layer=6", "optim.lr=3e-4", "optim.weight_decay=0", "optim.nesterov=true",
                    "train.device=cuda", "train.precision=\"bf16\"", "model.hidden=[32,32,8]", "parallel.dp=auto",
                    "data.source=synthetic:addition", " log.every = 7 "});
  CHECK(c.model.n_layer == 6);
  CHECK(c.optim.lr == 3e-4);
  CHECK(c.optim.weight_decay == 0.0);
  CHECK(c.optim.nesterov == true);
  CHECK(c.train.device == DeviceChoice::cuda);
  CHECK(c.train.precision == Precision::bf16);
  CHECK(c.model.hidden == std::vector<int64_t>{32, 32, 8});
  CHECK(c.parallel.dp == -1);
  CHECK(c.data.source == "synthetic:addition");
  CHECK(c.log.every == 7);
  // later overrides win; an override repairs a bad file value before validation
  CHECK(parse("", {"parallel.dp=auto", "parallel.dp=2"}).parallel.dp == 2);
  CHECK(parse("[optim]\nlr = -1\n", {"optim.lr=0.5"}).optim.lr == 0.5);
  // a string key takes the text even when it also reads as another TOML type
  CHECK(set_error("train.device=inf") == "--set train.device=inf: train.device must be one of cpu, cuda, auto; got \"inf\"");
  CHECK(parse("", {"data.val_source="}).data.val_source.empty());
}

TEST_CASE("--set errors name the override") {
  CHECK(set_error("model.n_layers=4") == "--set model.n_layers=4: unknown key 'model.n_layers' — did you mean 'model.n_layer'?");
  CHECK(set_error("train.lr=0.1") == "--set train.lr=0.1: unknown key 'train.lr' — did you mean 'optim.lr'?");
  CHECK(set_error("n_layer=4") == "--set n_layer=4: unknown key 'n_layer' — did you mean 'model.n_layer'?");
  CHECK(set_error("modle.n_layer=4") == "--set modle.n_layer=4: unknown key 'modle.n_layer' — did you mean 'model.n_layer'?");
  CHECK(set_error("zzzzzzzz.qqqqqqqq=4") ==
        "--set zzzzzzzz.qqqqqqqq=4: unknown section 'zzzzzzzz'; the sections are model, data, optim, schedule, train, "
        "parallel, dist, log");
  CHECK(set_error("model.n_layer") == "--set model.n_layer: expected section.key=value, e.g. --set model.n_layer=VALUE");
  CHECK(set_error("model.n_layr") ==
        "--set model.n_layr: expected section.key=value; unknown key 'model.n_layr' — did you mean 'model.n_layer'?");
  CHECK(set_error("model.n_layer=four") == "--set model.n_layer=four: model.n_layer must be an integer, got string \"four\"");
  CHECK(set_error("model.n_layer=2.5") == "--set model.n_layer=2.5: model.n_layer must be an integer, got float 2.5");
  CHECK(set_error("optim.nesterov=yes") == "--set optim.nesterov=yes: optim.nesterov must be true or false, got string \"yes\"");
  CHECK(set_error("model.hidden=[32,x]") ==
        "--set model.hidden=[32,x]: model.hidden must be an array of integers, got string \"[32,x]\"");
  CHECK(set_error("optim.lr=-1") == "--set optim.lr=-1: optim.lr must be > 0, got -1");
  CHECK(set_error("model.n_layer=1\nx=2") ==
        "--set model.n_layer=1\nx=2: model.n_layer must be an integer, got string \"1\\nx=2\"");
}

TEST_CASE("data paths resolve against the config file's folder, and the cwd for --set") {
  TempDir dir("config");
  fs::path base = fs::absolute(dir.path()).lexically_normal();
  fs::create_directories(dir / "configs/data");
  fs::create_directories(dir / "shards");
  write_file(dir / "configs/data/x.txt", "abc\n");
  write_file(dir / "configs/data/t.csv", "1,2,0\n");
  write_file(dir / "shards/b_001.bin", "");
  write_file(dir / "shards/a_000.bin", "");
  write_file(dir / "shards/readme.md", "");
  write_file(dir / "configs/run.toml", "[data]\nsource = \"text:data/x.txt\"\nval_source = \"csv:./data/../data/t.csv\"\n");

  Config c = load_config(dir / "configs/run.toml");
  CHECK(c.data.source == "text:" + (base / "configs/data/x.txt").string());
  CHECK(c.data.val_source == "csv:" + (base / "configs/data/t.csv").string());
  CHECK(split_data_source(c.data.source).kind == "text");
  CHECK(split_data_source(c.data.source).arg == (base / "configs/data/x.txt").string());

  // a relative config path works the same from another folder
  {
    Cwd cwd(dir.path());
    CHECK(load_config("configs/run.toml").data.source == "text:" + (base / "configs/data/x.txt").string());
    // --set paths are relative to the current directory
    Config s = load_config("configs/run.toml", {"data.source=tokens:shards/*.bin", "data.val_source=text:configs/data/x.txt"});
    CHECK(s.data.source == "tokens:" + (base / "shards/*.bin").string());
    CHECK(s.data.val_source == "text:" + (base / "configs/data/x.txt").string());
    CHECK(glob_files(split_data_source(s.data.source).arg) ==
          std::vector<std::string>{(base / "shards/a_000.bin").string(), (base / "shards/b_001.bin").string()});
    CHECK(usage_error([] { load_config("configs/run.toml", {"data.source=text:data/x.txt"}); }) ==
          "--set data.source=text:data/x.txt: data.source: file not found: " + (base / "data/x.txt").string() +
              " (paths in --set are relative to the current directory)");
  }

  // absolute paths stay as they are
  std::string abs_src = "text:" + (base / "configs/data/x.txt").string();
  CHECK(parse("[data]\nsource = \"" + abs_src + "\"\n").data.source == abs_src);
  // a resolved config re-parses to itself from anywhere
  CHECK(parse_config(config_to_toml(c), "dump.toml", "/") == c);
}

TEST_CASE("data source errors") {
  TempDir dir("config");
  fs::path base = fs::absolute(dir.path()).lexically_normal();
  fs::create_directories(dir / "configs/sub");
  write_file(dir / "configs/x.toml", "[model]\nn_layer = 2\n\n[data]\nval_fraction = 0.1\n\nsource = \"text:missing.txt\"\n");
  CHECK(usage_error([&] { load_config(dir / "configs/x.toml"); }) ==
        (dir / "configs/x.toml").string() + ":7: data.source: file not found: " + (base / "configs/missing.txt").string() +
            " (paths are relative to the config file's folder)");
  CHECK(parse_error("[data]\nsource = \"tokens:" + base.string() + "/none_*.bin\"\n") ==
        "x.toml:2: data.source: no files match " + base.string() + "/none_*.bin");
  write_file(dir / "configs/g.toml", "[data]\nsource = \"tokens:sub/*.bin\"\n");
  CHECK(usage_error([&] { load_config(dir / "configs/g.toml"); }) ==
        (dir / "configs/g.toml").string() + ":2: data.source: no files match " + (base / "configs/sub/*.bin").string() +
            " (paths are relative to the config file's folder)");
  CHECK(parse_error("[data]\nsource = \"csv:" + base.string() + "\"\n") ==
        "x.toml:2: data.source: not a regular file: " + base.string());
  CHECK(parse_error("[data]\nsource = \"input.txt\"\n") ==
        "x.toml:2: data.source must be synthetic:addition, text:PATH, tokens:GLOB or csv:PATH; got \"input.txt\"");
  CHECK(parse_error("[data]\nsource = \"\"\n") ==
        "x.toml:2: data.source must not be empty; use synthetic:addition, text:PATH, tokens:GLOB or csv:PATH");
  CHECK(parse_error("[data]\nsource = \"synthetic:multiplication\"\n") ==
        "x.toml:2: data.source: unknown synthetic task \"multiplication\"; known: addition");
  CHECK(parse_error("[data]\nval_source = \"text:\"\n") ==
        "x.toml:2: data.val_source: text: needs a path, e.g. text:data/input.txt");
}

TEST_CASE("data.tokenizer: bytes, or gpt2:DIR resolved like data paths; text: may be a glob") {
  TempDir dir("config");
  const fs::path base = fs::absolute(dir.path()).lexically_normal();
  fs::create_directories(dir / "configs/gpt2");
  write_file(dir / "configs/a.txt", "a");
  write_file(dir / "configs/b.txt", "b");
  write_file(dir / "configs/run.toml", "[data]\nsource = \"text:*.txt\"\ntokenizer = \"gpt2:gpt2\"\n");
  Config c = load_config(dir / "configs/run.toml");
  CHECK(c.data.tokenizer == "gpt2:" + (base / "configs/gpt2").string());
  CHECK(c.data.source == "text:" + (base / "configs/*.txt").string());
  CHECK(Config{}.data.tokenizer == "bytes");
  CHECK(parse_config(config_to_toml(c), "dump.toml", "/") == c);
  write_file(dir / "configs/bad.toml", "[data]\ntokenizer = \"gpt2:none\"\n");
  CHECK(usage_error([&] { load_config(dir / "configs/bad.toml"); }) ==
        (dir / "configs/bad.toml").string() + ":2: data.tokenizer: no such folder: " + (base / "configs/none").string() +
            " (paths are relative to the config file's folder)");
  CHECK(parse_error("[data]\ntokenizer = \"bpe\"\n") ==
        "x.toml:2: data.tokenizer must be \"bytes\", \"gpt2:DIR\" (a folder with vocab.json + merges.txt or "
        "tokenizer.json) or \"hf:DIR\" (a folder with a Hugging Face tokenizer.json); got \"bpe\"");
  write_file(dir / "configs/hf.toml", "[data]\nsource = \"text:*.txt\"\ntokenizer = \"hf:gpt2\"\n");
  CHECK(load_config(dir / "configs/hf.toml").data.tokenizer == "hf:" + (base / "configs/gpt2").string());
  CHECK(parse_error("[data]\ntokenizer = \"hf:\"\n").find("must be \"bytes\", \"gpt2:DIR\"") != std::string::npos);
}

TEST_CASE("a missing config file") {
  CHECK(usage_error([] { load_config("/no/such/dir/run.toml"); }) == "config file not found: /no/such/dir/run.toml");
  TempDir dir("config");
  CHECK(usage_error([&] { load_config(dir.path()); }) == "config file is a directory: " + dir.path().string());
}

TEST_CASE("config_to_toml round-trips a non-default config exactly") {
  TempDir dir("config");
  // A file name with a quote, a backslash and a non-ASCII letter exercises string escaping.
  fs::path weird = fs::absolute(dir / "we\"ird\\ñame.txt");
  write_file(weird, "x");
  Config c;
  c.model.type = ModelType::mlp;
  c.model.n_layer = 12;
  c.model.init_std = 0.1 + 0.2;  // 0.30000000000000004
  c.model.hidden = {3, 1, 4, 1, 5};
  c.model.activation = Activation::gelu;
  c.data.source = "text:" + weird.string();
  c.data.val_fraction = 1.0 / 3.0;
  c.data.label_column = -2;
  c.data.normalize = false;
  c.optim.lr = 6e-4;
  c.optim.eps = 1e-300;
  c.optim.weight_decay = 2.0;  // integral float
  c.optim.beta2 = 0.999;
  c.optim.grad_clip = 1e10;
  c.schedule.decay = Decay::constant;
  c.schedule.warmup_steps = 5000;
  c.schedule.decay_steps = 6000;
  c.schedule.min_lr_ratio = 0.0;
  c.train.steps = 10;
  c.train.seed = -9223372036854775807LL - 1;
  c.train.device = DeviceChoice::cuda;
  c.parallel.dp = -1;
  c.parallel.zero = 2;
  c.parallel.activation_checkpointing = true;
  c.log.progress = Progress::lines;
  c.log.tensorboard = false;
  REQUIRE(!(c == Config{}));

  std::string text = config_to_toml(c);
  CHECK(contains(text, "\ndp = \"auto\"\n"));
  CHECK(contains(text, "\nweight_decay = 2.0\n"));
  CHECK(contains(text, "\ninit_std = 0.30000000000000004\n"));
  CHECK(contains(text, "\nlr = 0.0006\n"));
  CHECK(contains(text, "\neps = 1e-300\n"));
  CHECK(contains(text, "\ngrad_clip = 10000000000.0\n"));
  CHECK(contains(text, "\nseed = -9223372036854775808\n"));
  CHECK(contains(text, "\nhidden = [3, 1, 4, 1, 5]\n"));
  CHECK(contains(text, "\nsource = \"text:" + dir.path().string() + "/we\\\"ird\\\\ñame.txt\"\n"));
  Config back = parse_config(text, "dump.toml", "/");
  CHECK(back == c);
  CHECK(config_to_toml(back) == text);
  // the defaults round-trip too
  CHECK(parse_config(config_to_toml(Config{}), "dump.toml", "/") == Config{});
}

TEST_CASE("floats print so that they parse back to the same bits") {
  uint64_t state = 12345;
  auto next = [&] {  // splitmix64
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  };
  for (int i = 0; i < 2000; ++i) {
    Config c;
    // positive finite doubles over the whole exponent range, and short decimals
    uint64_t bits = next() & 0x7fefffffffffffffULL;
    std::memcpy(&c.optim.lr, &bits, sizeof bits);
    if (c.optim.lr == 0) c.optim.lr = 1;
    c.optim.grad_clip = static_cast<double>(next() % 100000) / 1000.0;
    Config back = parse_config(config_to_toml(c), "dump.toml", "/");
    CAPTURE(c.optim.lr);
    CHECK(std::memcmp(&back.optim.lr, &c.optim.lr, sizeof(double)) == 0);
    CHECK(back.optim.grad_clip == c.optim.grad_clip);
  }
}

TEST_CASE("config_to_toml lists every section and key in declaration order") {
  std::string text = config_to_toml(Config{});
  std::vector<std::string> headers, keys;
  for (const auto& l : lines(text)) {
    if (l.empty() || l[0] == '#') continue;
    if (l[0] == '[') headers.push_back(l);
    else keys.push_back(l.substr(0, l.find(" = ")));
  }
  CHECK(headers == std::vector<std::string>{"[model]", "[data]", "[optim]", "[schedule]", "[train]", "[parallel]", "[dist]", "[log]"});
  auto docs = config_key_docs();
  REQUIRE(keys.size() == docs.size());
  for (size_t i = 0; i < keys.size(); ++i) CHECK(docs[i].key.substr(docs[i].key.find('.') + 1) == keys[i]);
  CHECK(contains(text, "[model]\n# model family"));
}

TEST_CASE("config_key_docs has one entry per key with type, default and help") {
  auto docs = config_key_docs();
  CHECK(docs.size() == 75);
  std::set<std::string> names;
  for (const auto& d : docs) {
    CAPTURE(d.key);
    CHECK(names.insert(d.key).second);
    CHECK(!d.help.empty());
    CHECK(!d.type.empty());
  }
  auto find = [&](const std::string& key) {
    for (const auto& d : docs)
      if (d.key == key) return d;
    FAIL("no doc for " << key);
    return ConfigKeyDoc{};
  };
  ConfigKeyDoc d = find("model.n_layer");
  CHECK(d.type == "int");
  CHECK(d.default_value == "4");
  CHECK(d.help == "gpt, llama: number of transformer blocks");
  CHECK(d.allowed == ">= 1");
  CHECK(find("parallel.dp").type == "int or \"auto\"");
  CHECK(find("parallel.dp").allowed == ">= 1, or \"auto\"");
  CHECK(find("optim.lr").type == "float");
  CHECK(find("optim.lr").default_value == "0.001");
  CHECK(find("optim.lr").allowed == "> 0");
  CHECK(find("optim.nesterov").type == "bool");
  CHECK(find("optim.nesterov").default_value == "false");
  CHECK(find("optim.dampening").default_value == "0.0");
  CHECK(find("optim.dampening").allowed == "in [0, 1]");
  CHECK(find("train.device").type == "string");
  CHECK(find("train.device").default_value == "\"cpu\"");
  CHECK(find("train.device").allowed == "one of cpu, cuda, auto");
  CHECK(find("model.hidden").type == "int array");
  CHECK(find("model.hidden").default_value == "[64, 64]");
  CHECK(find("data.val_fraction").allowed == "in [0, 0.5]");
}

TEST_CASE("model.init_from: the folder's config.json sets the shape; a set key that differs names both values") {
  TempDir dir("config-init");
  const fs::path base = fs::absolute(dir.path()).lexically_normal();
  ModelConfig shape;
  shape.n_layer = 3, shape.n_head = 6, shape.n_embd = 48, shape.block_size = 64, shape.vocab_size = 50257;
  fs::create_directories(dir / "gpt2");
  write_file(dir / "gpt2/config.json", hf_gpt2_config_json(shape));
  write_file(dir / "run.toml", "[model]\ninit_from = \"gpt2\"\nn_head = 6\n");
  Config c = load_config(dir / "run.toml");
  CHECK(c.model.init_from == (base / "gpt2").string());
  CHECK(c.model.n_layer == 3);
  CHECK(c.model.n_head == 6);  // given and equal: fine
  CHECK(c.model.n_embd == 48);
  CHECK(c.model.block_size == 64);
  CHECK(c.model.vocab_size == 50257);
  CHECK(c.data.tokenizer == "bytes");  // the folder has no tokenizer files
  // The resolved config round-trips (a resumed run reads it back).
  CHECK(parse_config(config_to_toml(c), "dump.toml", base) == c);

  const std::string toml_path = (dir / "run.toml").string(), cfg_json = (base / "gpt2/config.json").string();
  CHECK(usage_error([&] { load_config(dir / "run.toml", {"model.n_embd=64"}); }) ==
        "--set model.n_embd=64: model.n_embd = 64, but " + cfg_json +
            " says n_embd = 48 (model.init_from fixes the model's shape: leave model.n_embd out or set it to 48)");
  // The folder's tokenizer files make GPT-2's tokenizer the default; data.tokenizer, when given, wins.
  write_file(dir / "gpt2/vocab.json", "{}");
  write_file(dir / "gpt2/merges.txt", "#version: 0.2\n");
  CHECK(load_config(dir / "run.toml").data.tokenizer == "gpt2:" + (base / "gpt2").string());
  CHECK(load_config(dir / "run.toml", {"data.tokenizer=bytes"}).data.tokenizer == "bytes");
  fs::remove(dir / "gpt2/merges.txt");
  CHECK(load_config(dir / "run.toml").data.tokenizer == "bytes");  // vocab.json alone is not a tokenizer
  fs::remove(dir / "gpt2/vocab.json");
  // A tokenizer.json alone (a Llama folder's) is a Hugging Face tokenizer.
  write_file(dir / "gpt2/tokenizer.json", "{}");
  CHECK(load_config(dir / "run.toml").data.tokenizer == "hf:" + (base / "gpt2").string());
  fs::remove(dir / "gpt2/tokenizer.json");
  write_file(dir / "bad.toml", "[model]\ntype = \"mlp\"\ninit_from = \"gpt2\"\n");
  CHECK(contains(usage_error([&] { load_config(dir / "bad.toml"); }), "bad.toml:2: model.init_from holds a gpt model"));
  write_file(dir / "missing.toml", "[model]\ninit_from = \"nowhere\"\n");
  CHECK(usage_error([&] { load_config(dir / "missing.toml"); }) ==
        (dir / "missing.toml").string() + ":2: model.init_from: folder not found: " + (base / "nowhere").string() +
            " (paths are relative to the config file's folder)");
}
