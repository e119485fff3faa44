// The analytic model: every number checked against a hand calculation or a published worked
// example (../shared/REFERENCE.md, docs/PLANNING.md).
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "dl/cli/table.hpp"
#include "dl/config/config.hpp"
#include "dl/core/error.hpp"
#include "dl/nn/gpt.hpp"
#include "dl/nn/gpt_from_config.hpp"
#include "dl/nn/mlp.hpp"
#include "dl/plan/gpus.hpp"
#include "dl/plan/plan.hpp"
#include "dl/plan/report.hpp"
#include "dl/plan/speed.hpp"
#include "support/support.hpp"

using namespace dl;
using namespace dl::plan;

namespace {

// A small transformer for hand calculations: s=8, b=2 (given per call), h=16, a=4, L=2, V=32.
ModelShape tiny(int64_t layers = 2) {
  ModelShape m;
  m.name = "tiny";
  m.n_layer = layers;
  m.hidden = 16;
  m.heads = 4;
  m.seq = 8;
  m.vocab = 32;
  m.params = static_cast<double>(layers) * (12 * 16 * 16 + 13 * 16) + 32 * 16 + 8 * 16 + 2 * 16;
  return m;
}

Layout layout(int64_t dp, int64_t tp, int64_t pp, int64_t zero, const std::string& precision = "bf16") {
  Layout l;
  l.dp = dp;
  l.tp = tp;
  l.pp = pp;
  l.gpus = dp * tp * pp;
  l.zero = zero;
  l.precision = parse_precision(precision);
  return l;
}

Config gpt_config(int64_t vocab) {
  std::string toml = "[model]\ntype = \"gpt\"\nn_layer = 12\nn_head = 12\nn_embd = 768\nblock_size = 1024\nvocab_size = " +
                     std::to_string(vocab) + "\n[data]\nsource = \"synthetic:addition\"\n";
  return parse_config(toml, "gpt2-124m.toml", ".");
}

}  // namespace

TEST_CASE("ZeRO worked example: 7.5B parameters, 64 GPUs, mixed-precision Adam") {
  const double psi = 7.5e9;
  // The table in REFERENCE.md, exactly.
  CHECK(zero_model_state_bytes(psi, 64, 0) == 120e9);
  CHECK(zero_model_state_bytes(psi, 64, 1) == 31.40625e9);
  CHECK(zero_model_state_bytes(psi, 64, 2) == 16.640625e9);
  CHECK(zero_model_state_bytes(psi, 64, 3) == 1.875e9);
  // ... and at the precision the paper prints (decimal GB).
  CHECK(format_bytes(zero_model_state_bytes(psi, 64, 0)) == "120 GB");
  CHECK(format_bytes(zero_model_state_bytes(psi, 64, 1)) == "31.4 GB");
  CHECK(format_bytes(zero_model_state_bytes(psi, 64, 2)) == "16.6 GB");
  CHECK(format_bytes(zero_model_state_bytes(psi, 64, 3)) == "1.88 GB");
  // memory_per_rank gives the same model states, with and without an architecture.
  const double want[4] = {120e9, 31.40625e9, 16.640625e9, 1.875e9};
  ModelShape bare = model_from_params(psi);
  ModelShape arch = model_from_params(psi, 32, 4096, 32, 2048, 50257);
  for (int64_t z = 0; z < 4; ++z) {
    CAPTURE(z);
    CHECK(memory_per_rank(bare, layout(64, 1, 1, z)).model_states() == doctest::Approx(want[z]).epsilon(1e-12));
    CHECK(memory_per_rank(arch, layout(64, 1, 1, z)).model_states() == doctest::Approx(want[z]).epsilon(1e-12));
  }
  MemoryBreakdown m1 = memory_per_rank(bare, layout(64, 1, 1, 1));
  CHECK(m1.params == 15e9);
  CHECK(m1.grads == 15e9);
  CHECK(m1.optimizer == 90e9 / 64);
  CHECK(m1.overhead == kOverheadBytes);
  CHECK(m1.activations == 0);  // no architecture: not estimated
}

TEST_CASE("bytes per parameter: mixed precision, fp32, optimizers") {
  StateBytes mixed = state_bytes("bf16");
  CHECK(mixed.params == 2);
  CHECK(mixed.grads == 2);
  CHECK(mixed.optimizer == 12);
  CHECK(state_bytes("fp16").total() == 16);
  StateBytes fp32 = state_bytes("fp32");  // weights, grads, exp_avg + exp_avg_sq; no master copy
  CHECK(fp32.params == 4);
  CHECK(fp32.grads == 4);
  CHECK(fp32.optimizer == 8);
  CHECK(state_bytes("fp32", "sgd-momentum").optimizer == 4);
  CHECK(state_bytes("fp32", "sgd").optimizer == 0);
  CHECK(state_bytes("bf16", "sgd").optimizer == 4);  // the fp32 master copy
  CHECK(state_bytes("bf16", "sgd-momentum").optimizer == 8);
  CHECK_THROWS_AS(state_bytes("fp4"), Error);
  CHECK_THROWS_AS(state_bytes("fp32", "lion"), Error);
  // fp32 Adam over 1000 parameters on one rank: 16 kB of model state.
  ModelShape m = model_from_params(1000);
  Layout l = layout(1, 1, 1, 0, "fp32");
  MemoryBreakdown mem = memory_per_rank(m, l);
  CHECK(mem.params == 4000);
  CHECK(mem.grads == 4000);
  CHECK(mem.optimizer == 8000);
  CHECK(activation_value_bytes("fp32") == 4);
  CHECK(activation_value_bytes("bf16") == 2);
}

TEST_CASE("model_from_config: GPT-2 124M counts what dl-train counts") {
  ModelShape m = model_from_config(gpt_config(50257), "gpt2-124m");
  CHECK(m.params == 124439808.0);
  GptConfig g;
  g.n_layer = 12, g.n_head = 12, g.n_embd = 768, g.block_size = 1024, g.vocab_size = 50257;
  CHECK(m.params == static_cast<double>(gpt_param_count(g)));
  CHECK(m.n_layer == 12);
  CHECK(m.hidden == 768);
  CHECK(m.heads == 12);
  CHECK(m.seq == 1024);
  CHECK(m.vocab == 50257);
  CHECK(m.is_transformer());
  CHECK(model_from_config(gpt_config(50304)).params == 124475904.0);
  // The analytic per-rank count without sharding is the whole model.
  CHECK(params_per_rank(m, 1, 1) == 124439808.0);
}

TEST_CASE("model_from_config: mlp reads its input width and classes from the data") {
  test::TempDir dir("plan-mlp");
  // 5 features, labels a/b/c -> 3 classes.
  std::string csv = "f1,f2,f3,f4,f5,label\n";
  for (int i = 0; i < 30; ++i)
    csv += std::to_string(i) + ",1,2,3," + std::to_string(i % 7) + "," + std::string(1, char('a' + i % 3)) + "\n";
  test::write_file(dir / "d.csv", csv);
  test::write_file(dir / "mlp.toml", "[model]\ntype = \"mlp\"\nhidden = [16, 8]\n[data]\nsource = \"csv:d.csv\"\n");
  Config c = load_config(dir / "mlp.toml");
  ModelShape m = model_from_config(c);
  MlpConfig mc;
  mc.n_inputs = 5;
  mc.hidden = {16, 8};
  mc.n_classes = 3;
  CHECK(m.params == static_cast<double>(mlp_param_count(mc)));
  CHECK(m.params == 5 * 16 + 16 + 16 * 8 + 8 + 8 * 3 + 3);
  CHECK(m.type == ModelType::mlp);
  CHECK_FALSE(m.is_transformer());
  CHECK(m.note.find("5 inputs and 3 classes") != std::string::npos);
  // A missing data file is a usage error that names it.
  test::write_file(dir / "bad.toml", "[model]\ntype = \"mlp\"\n[data]\nsource = \"csv:nope.csv\"\n");
  try {
    Config bad = load_config(dir / "bad.toml");
    model_from_config(bad);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::usage);
    CHECK(std::string(e.what()).find("nope.csv") != std::string::npos);
  }
}

TEST_CASE("model_from_params: hints and their consistency") {
  ModelShape m = model_from_params(7.5e9);
  CHECK(m.name == "7.5e9 params");
  CHECK_FALSE(m.is_transformer());
  CHECK_THROWS_AS(model_from_params(0), Error);
  CHECK_THROWS_AS(model_from_params(1e9, 32, 4096, 30), Error);  // 30 heads do not divide 4096
  // 48 layers of width 8192 alone need 38.7e9 parameters.
  try {
    model_from_params(7.5e9, 48, 8192);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::usage);
  }
  const std::string named = dl::test::named_option_error([] { model_from_params(7.5e9, 48, 8192); }, {{"layers", "--layers"}});
  CHECK(named.find("--layers") != std::string::npos);
}

TEST_CASE("model_from_params: a rounded count within 5% of the hints is their exact count") {
  // GPT-2 small's hints: 12 x (12 x 768^2 + 13 x 768) + 50257 x 768 + 1024 x 768 + 2 x 768.
  const double exact = 124439808;
  for (double typed : {124e6, 124.44e6, 125e6, 120e6, exact}) {
    CAPTURE(typed);
    ModelShape m = model_from_params(typed, 12, 768, 12, 1024, 50257);
    CHECK(m.params == exact);
    CHECK((typed == exact) == m.note.empty());
    if (typed != exact) CHECK(m.note.find("124,439,808") != std::string::npos);
  }
  // 118M is 5.5% short of 124,439,808: the hints or the count are wrong.
  try {
    model_from_params(118e6, 12, 768, 12, 1024, 50257);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::usage);
    CHECK(std::string(e.what()).find("fewer than the architecture") != std::string::npos);
  }
  // Without --vocab/--seq the hints are a lower bound: a larger count stays as given, a count
  // up to 5% below the blocks' 84,953,088 becomes that.
  CHECK(model_from_params(124e6, 12, 768).params == 124e6);
  CHECK(model_from_params(82e6, 12, 768).params == 12 * (12 * 768.0 * 768 + 13 * 768));
  CHECK_THROWS_AS(model_from_params(80e6, 12, 768), Error);
}

TEST_CASE("FLOPs per token: both formulas by hand") {
  ModelShape m = model_from_config(gpt_config(50257));
  // PaLM: 6N + 12 L H Q T = 6 x 124,439,808 + 12 x 12 x 768 x 1024
  CHECK(flops_per_token(m, FlopFormula::palm) == 746638848.0 + 113246208.0);
  CHECK(flops_per_token(m, FlopFormula::palm) == 859885056.0);
  // llm.c: 6N + 6 L D T
  CHECK(flops_per_token(m, FlopFormula::llmc) == 803261952.0);
  CHECK(attention_flops_per_token(m, FlopFormula::llmc) == 56623104.0);
  // Without an architecture: 6N.
  CHECK(flops_per_token(model_from_params(7.5e9)) == 45e9);
  CHECK(flop_formula_name(FlopFormula::palm) == "6N+12LHQT (PaLM)");
  CHECK(parse_flop_formula("llmc") == FlopFormula::llmc);
  CHECK_THROWS_AS(parse_flop_formula("chinchilla"), Error);
}

TEST_CASE("activations per layer by hand (Korthikanti et al.), with tp and recompute") {
  ModelShape m = tiny();
  // s=8 b=2 h=16 -> sbh = 256; 5as/h = 5*4*8/16 = 10.
  CHECK(activation_bytes_per_layer(m, 2, 1, Recompute::none) == 256 * (34 + 10));
  // t=2: 10 + 24/2 + 10/2 = 27
  CHECK(activation_bytes_per_layer(m, 2, 2, Recompute::none) == 256 * 27);
  // selective: the attention-score term goes
  CHECK(activation_bytes_per_layer(m, 2, 1, Recompute::selective) == 256 * 34);
  CHECK(activation_bytes_per_layer(m, 2, 2, Recompute::selective) == 256 * 22);
  // full: the layer input only, 2sbh
  CHECK(activation_bytes_per_layer(m, 2, 1, Recompute::full) == 512);
  CHECK(activation_bytes_per_layer(m, 2, 4, Recompute::full) == 512);
  // fp32 values: twice the 16-bit formula
  CHECK(activation_bytes_per_layer(m, 2, 1, Recompute::none, 4.0) == 2 * 256 * 44);
  CHECK(activation_bytes_per_layer(model_from_params(1e9), 2, 1, Recompute::none) == 0);
  // Without dropout (dl-train's GPT): sbh(8 + 24/t + 2as/(ht)); 2as/h = 4.
  ModelShape nd = m;
  nd.dropout = false;
  CHECK(activation_bytes_per_layer(nd, 2, 1, Recompute::none) == 256 * (32 + 4));
  CHECK(activation_bytes_per_layer(nd, 2, 2, Recompute::none) == 256 * (8 + 12 + 2));
  CHECK(activation_bytes_per_layer(nd, 2, 2, Recompute::selective) == 256 * 20);
  CHECK(activation_bytes_per_layer(nd, 2, 2, Recompute::full) == 512);
  // That is what dl-train's GPT stores per layer in fp32: 16 values of width h per token (ln_1,
  // qkv 3, attention output, residual in, residual2, ln_2, fc 4, gelu 4) plus a x T scores.
  CHECK(activation_bytes_per_layer(nd, 2, 1, Recompute::none, 4.0) == 8 * 2 * (16 * 16 + 4 * 8) * 4);
  CHECK_FALSE(model_from_config(gpt_config(50257)).dropout);

  // Whole rank: L layers + backward working set of sbh(2 + 8/t) 16-bit values + output layer
  // (4sbh at 16 bits + the logits in the activation dtype, sbV/t values: dl-train keeps them at
  // 16 bits and writes their gradient in place; Korthikanti et al.'s fp32 logits would be 4sbV/t).
  const double output = 4 * 256 + 2 * 8 * 2 * 32;  // 1024 + 1024
  const double work = 256 * 10 * 2;                // t = 1: 10 values of 2 bytes per sbh
  Layout l = layout(1, 1, 1, 0);
  l.micro_batch = 2;
  CHECK(activation_bytes(m, l) == 2 * 11264 + work + output);
  l.recompute = Recompute::full;  // stored inputs + one layer recomputed in full
  CHECK(activation_bytes(m, l) == 2 * 512 + 11264 + work + output);
  // tp = 2: logits split over the vocabulary, GELU gradients too
  Layout lt = layout(1, 2, 1, 0);
  lt.micro_batch = 2;
  CHECK(activation_bytes(m, lt) == 2 * 6912 + 256 * 6 * 2 + 1024 + 512);
  // pp = 2 with 4 micro-batches: stage 0 holds min(pp, m) = 2 for 1F1B, all 4 for GPipe.
  Layout lp = layout(1, 1, 2, 0);
  lp.micro_batch = 2;
  lp.microbatches = 4;
  CHECK(activation_bytes(m, lp) == 1 * 11264 * 2 + work);  // first stage > last 11264 + work + 2048
  lp.schedule = PipelineSchedule::gpipe;  // every stage holds all 4; the last one with its output layer
  CHECK(activation_bytes(m, lp) == (11264 + output) * 4 + work);
  lp.microbatches = 1;  // one micro-batch: the last stage (with the output layer) is the larger
  CHECK(activation_bytes(m, lp) == 11264 + work + output);
}

TEST_CASE("flash attention: a log-sum-exp state per row per head instead of the scores") {
  ModelShape m = tiny();
  const Recompute none = Recompute::none;
  // s=8 b=2 h=16 a=4: sbh = 256. The state is 2 values per row per head: 2 a s b / t values,
  // 2 x 4 x 8 x 2 = 128 values = 256 bytes at 16 bits; with t = 2, 2 heads per rank: 128 bytes.
  CHECK(activation_bytes_per_layer(m, 2, 1, none, 2.0, Attention::flash) == 256 * 34 + 256);  // 8960
  CHECK(activation_bytes_per_layer(m, 2, 2, none, 2.0, Attention::flash) == 256 * 22 + 128);  // 5760
  // Below the materialized formula by exactly the scores term (5as/(ht) sbh) minus the state.
  CHECK(activation_bytes_per_layer(m, 2, 1, none) - activation_bytes_per_layer(m, 2, 1, none, 2.0, Attention::flash) ==
        256 * 10 - 256);
  CHECK(activation_bytes_per_layer(m, 2, 2, none) - activation_bytes_per_layer(m, 2, 2, none, 2.0, Attention::flash) ==
        256 * 5 - 128);
  // The default is the published formula.
  CHECK(activation_bytes_per_layer(m, 2, 1, none, 2.0) ==
        activation_bytes_per_layer(m, 2, 1, none, 2.0, Attention::materialized));
  // Without dropout in fp32: what dl-train's CUDA backend keeps per layer — 16 values of width h
  // per token and the [B, H, 2T] attention state (2 a values per token).
  ModelShape nd = m;
  nd.dropout = false;
  CHECK(activation_bytes_per_layer(nd, 2, 1, none, 4.0, Attention::flash) == 8 * 2 * (16 * 16 + 2 * 4) * 4);  // 16896
  CHECK(activation_bytes_per_layer(nd, 2, 1, none, 4.0) - activation_bytes_per_layer(nd, 2, 1, none, 4.0, Attention::flash) ==
        8 * 2 * (4 * 8 - 2 * 4) * 4);  // a T scores - 2 a state values per token
  // Selective recompute keeps neither the scores nor the state; full recompute the layer input.
  for (int64_t t : {1, 2}) {
    CAPTURE(t);
    CHECK(activation_bytes_per_layer(m, 2, t, Recompute::selective, 2.0, Attention::flash) ==
          activation_bytes_per_layer(m, 2, t, Recompute::selective));
    CHECK(activation_bytes_per_layer(m, 2, t, Recompute::full, 2.0, Attention::flash) == 512);
  }
  CHECK(activation_bytes_per_layer(model_from_params(1e9), 2, 1, none, 2.0, Attention::flash) == 0);

  // Whole rank: as in the materialized case, with 8960 per layer; under full recompute the one
  // re-materialised layer is a flash layer too.
  const double output = 4 * 256 + 2 * 8 * 2 * 32, work = 256 * 10 * 2;
  Layout l = layout(1, 1, 1, 0);
  l.micro_batch = 2;
  l.attention = Attention::flash;
  CHECK(activation_bytes(m, l) == 2 * 8960 + work + output);
  CHECK(memory_per_rank(m, l).activations == 2 * 8960 + work + output);
  l.recompute = Recompute::full;
  CHECK(activation_bytes(m, l) == 2 * 512 + 8960 + work + output);
  l.recompute = Recompute::selective;
  CHECK(activation_bytes(m, l) == 2 * 256 * 34 + work + output);
  // The layout says so; materialized layouts read as before.
  CHECK(l.describe() == "dp=1 tp=1 pp=1 zero=0 offload=none recompute=selective mb=2 attention=flash");
  l.attention = Attention::materialized;
  CHECK(l.describe() == "dp=1 tp=1 pp=1 zero=0 offload=none recompute=selective mb=2");
}

TEST_CASE("attention: names, --attention parsing and the default from train.device") {
  CHECK(attention_name(Attention::flash) == "flash");
  CHECK(attention_name(Attention::materialized) == "materialized");
  CHECK(parse_attention("flash") == Attention::flash);
  CHECK(parse_attention("materialized") == Attention::materialized);
  for (const char* bad : {"Flash", "sdpa", ""}) {
    CAPTURE(bad);
    try {
      parse_attention(bad);
      FAIL("expected an error");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::usage);  // exit 2
      const std::string what = dl::test::named_option_error([&] { parse_attention(bad); }, {{"attention", "--attention"}});
      CHECK(what.find("--attention") != std::string::npos);
      CHECK(what.find("flash or materialized") != std::string::npos);
    }
  }
  CHECK(attention_for_device(DeviceChoice::cpu) == Attention::materialized);
  CHECK(attention_for_device(DeviceChoice::cuda) == Attention::flash);
  CHECK(attention_for_device(DeviceChoice::automatic) == Attention::flash);
  CHECK_THROWS_AS(choice_from_name<DeviceChoice>("tpu"), Error);

  // make_plan: the config's device decides unless --attention does; --params plans flash.
  test::TempDir dir("plan-attention");
  test::write_file(dir / "g.toml",
                   "[model]\ntype = \"gpt\"\nn_layer = 2\nn_head = 4\nn_embd = 16\nblock_size = 8\nvocab_size = 32\n"
                   "[data]\nsource = \"synthetic:addition\"\n[train]\nbatch_size = 2\nprecision = \"bf16\"\n");
  PlanInputs in;
  in.config_path = (dir / "g.toml").string();
  in.gpus = 1;
  in.gpu_mem = 80e9;
  in.fixed.zero = 0;
  auto activations = [](const PlanReport& r) {
    REQUIRE(r.rows.size() == 1);
    return r.rows[0].memory.activations;
  };
  auto has_note = [](const PlanReport& r, const std::string& what) {
    for (const auto& n : r.notes)
      if (n.find(what) != std::string::npos) return true;
    return false;
  };
  PlanReport cpu = make_plan(in);  // train.device defaults to "cpu"
  CHECK(cpu.base.attention == Attention::materialized);
  CHECK(cpu.rows[0].layout.attention == Attention::materialized);
  CHECK(has_note(cpu, "# attention: materialized (train.device = \"cpu\")"));
  in.sets = {"train.device=auto"};
  PlanReport gpu = make_plan(in);
  CHECK(gpu.base.attention == Attention::flash);
  CHECK(has_note(gpu, "# attention: flash (train.device = \"auto\""));
  // No dropout in dl-train's GPT: per layer the scores term (2as/h) sbh = 4 x 256 = 1024 bytes
  // gives way to 2 a s b = 128 values = 256 bytes of state; two layers.
  CHECK(activations(cpu) - activations(gpu) == 2 * (1024 - 256));
  CHECK(gpu.rows[0].layout.describe().find("attention=flash") != std::string::npos);
  in.sets = {"train.device=cuda"};
  CHECK(make_plan(in).base.attention == Attention::flash);
  in.attention = Attention::materialized;  // --attention wins over the device
  in.flags = {{"attention", "--attention"}};  // the note names the tool's flag
  PlanReport forced = make_plan(in);
  CHECK(forced.base.attention == Attention::materialized);
  CHECK(activations(forced) == activations(cpu));
  CHECK(has_note(forced, "# attention: materialized (--attention)"));
  // recommend carries it into every layout it searches.
  in.attention = Attention::flash;
  in.fixed = {};
  for (const auto& e : make_recommendation(in).rows) CHECK(e.layout.attention == Attention::flash);
  // --params without a config: flash, the GPU default.
  PlanInputs p;
  p.params = 7.5e9;
  p.layers = 36, p.hidden = 4096, p.heads = 32, p.seq = 2048, p.vocab = 50257;
  p.gpus = 8;
  p.gpu_mem = 80e9;
  p.fixed.zero = 3;
  PlanReport pr = make_plan(p);
  CHECK(pr.base.attention == Attention::flash);
  CHECK(has_note(pr, "# attention: flash (the GPU default without a config)"));
  p.attention = Attention::materialized;
  // Per layer (b = 1) the scores term (5as/h) sbh = 5 a s^2 bytes (Korthikanti's 16-bit constants)
  // less the state, 2 a s values of 2 bytes; 36 layers.
  CHECK(activations(make_plan(p)) - activations(pr) == 36.0 * (5.0 * 32 * 2048 * 2048 - 2.0 * 32 * 2048 * 2));
}

TEST_CASE("parameters per rank under tensor and pipeline parallelism") {
  ModelShape m = model_from_config(gpt_config(50257));
  // matrices and column biases / 2; wte's 50257 rows split 25128 + 25129, the busier rank's
  CHECK(params_per_rank(m, 2, 1) == 62641536.0 + 768 / 2);
  CHECK(params_per_rank(m, 1, 2) == 81911040.0);   // first stage: 6 layers + wte + wpe
  CHECK(params_per_rank(m, 2, 2) == 41362560.0 + 768 / 2);
  CHECK(params_per_rank(model_from_params(8e9), 2, 4) == 1e9);  // bare count: psi / (tp pp)
}

TEST_CASE("parameters per rank are what the busiest rank of dl-train's GPT declares: tied or untied head, any "
          "vocabulary") {
  for (const bool tied : {true, false})
    for (const int64_t vocab : {50257, 50304, 97})
      for (const int tp : {1, 2, 3})
        for (const int pp : {1, 2}) {
          CAPTURE(tied);
          CAPTURE(vocab);
          CAPTURE(tp);
          CAPTURE(pp);
          Config c = parse_config("[model]\nn_layer = 2\nn_head = 6\nn_embd = 48\nblock_size = 32\nvocab_size = " +
                                      std::to_string(vocab) + "\ntie_embeddings = " + (tied ? "true" : "false") + "\n",
                                  "c.toml", ".");
          ModelShape m = model_from_config(c);
          GptConfig g = gpt_config_from(c.model);
          CHECK(m.params == static_cast<double>(gpt_param_count(g)));
          int64_t busiest = 0;
          for (int t = 0; t < tp; ++t)
            for (int p = 0; p < pp; ++p) {
              GptParallel par;
              par.tp_size = tp, par.tp_rank = t, par.pp_size = pp, par.pp_rank = p;
              busiest = std::max(busiest, GptModel::declarations(g, par).numel());
            }
          CHECK(params_per_rank(m, tp, pp) == static_cast<double>(busiest));
        }
}

TEST_CASE("communication per step by hand") {
  ModelShape bare = model_from_params(1e9);
  // dp = 4, ring factor 3/4, 2-byte gradients: all-reduce 2 x 1e9 x 2 x 3/4.
  CHECK(comm_per_rank(bare, layout(4, 1, 1, 0)).dp == 3e9);
  CHECK(comm_per_rank(bare, layout(4, 1, 1, 1)).dp == 3e9);
  CHECK(comm_per_rank(bare, layout(4, 1, 1, 2)).dp == 3e9);
  CHECK(comm_per_rank(bare, layout(4, 1, 1, 3)).dp == 4.5e9);  // 3 psi: 1.5x
  CHECK(comm_per_rank(bare, layout(4, 1, 1, 3)).dp_params == 3e9);
  CHECK(comm_per_rank(bare, layout(4, 1, 1, 0, "fp32")).dp == 6e9);
  CHECK(comm_per_rank(bare, layout(1, 1, 1, 0)).total() == 0);
  // Gradient accumulation over 4 micro-batches: DP/ZeRO-1 reduce once; ZeRO-2 reduce-scatters
  // each micro-batch (4 x 1.5e9 + the 1.5e9 gather); ZeRO-3 repeats everything per micro-batch.
  Layout acc = layout(4, 1, 1, 0);
  acc.microbatches = 4;
  CHECK(comm_per_rank(bare, acc).dp == 3e9);
  acc.zero = 2;
  CHECK(comm_per_rank(bare, acc).dp == 7.5e9);
  acc.zero = 3;
  CHECK(comm_per_rank(bare, acc).dp == 18e9);

  // Tensor parallel: 4 all-reduces per layer of s*b*h values, ring 2(t-1)/t.
  ModelShape m = tiny(4);
  Layout t2 = layout(1, 2, 1, 0);
  t2.micro_batch = 2;
  const double sbh_bytes = 8 * 2 * 16 * 2;  // 512
  CHECK(comm_per_rank(m, t2).tp == 4 * 4 * sbh_bytes * 2 * 1 / 2.0);
  t2.recompute = Recompute::full;  // the recomputed forward repeats its 2
  CHECK(comm_per_rank(m, t2).tp == 6 * 4 * sbh_bytes);
  Layout t4 = layout(1, 4, 1, 0);
  t4.micro_batch = 2;
  t4.microbatches = 3;
  CHECK(comm_per_rank(m, t4).tp == 4 * 4 * 3 * sbh_bytes * 2 * 3 / 4.0);
  // Pipeline: s*b*h each way per micro-batch; a middle stage sends both directions.
  Layout p2 = layout(1, 1, 2, 0);
  p2.micro_batch = 2;
  p2.microbatches = 5;
  CHECK(comm_per_rank(m, p2).pp == 5 * sbh_bytes);
  Layout p4 = layout(1, 1, 4, 0);
  p4.micro_batch = 2;
  p4.microbatches = 5;
  CHECK(comm_per_rank(m, p4).pp == 2 * 5 * sbh_bytes);
  // The 7.5B example on 64 ranks: 2 psi x 2 bytes x 63/64 for DP, 1.5x that for ZeRO-3.
  CHECK(comm_per_rank(model_from_params(7.5e9), layout(64, 1, 1, 0)).dp == doctest::Approx(29.53125e9));
  CHECK(comm_per_rank(model_from_params(7.5e9), layout(64, 1, 1, 3)).dp == doctest::Approx(1.5 * 29.53125e9));
}

TEST_CASE("pipeline bubble") {
  CHECK(bubble_fraction(1, 8) == 0);
  CHECK(bubble_fraction(4, 8) == doctest::Approx(3.0 / 11.0));
  CHECK(bubble_fraction(2, 1) == doctest::Approx(0.5));
  CHECK(bubble_fraction(8, 64) == doctest::Approx(7.0 / 71.0));
}

TEST_CASE("check_layout names the constraint") {
  ModelShape m = model_from_params(7.5e9, 32, 4096, 32, 2048, 50257);
  auto why = [&](Layout l, int64_t B = 0) { return check_layout(m, l, B); };
  CHECK(why(layout(8, 1, 1, 0)).empty());
  CHECK(why(layout(2, 3, 1, 0)).find("tp = 3 does not divide the 32 attention heads") != std::string::npos);
  CHECK(why(layout(2, 1, 5, 0)).find("pp = 5 does not divide the 32 layers") != std::string::npos);
  Layout wide = layout(1, 16, 1, 0);
  CHECK(why(wide).find("more than the 8 GPUs per node") != std::string::npos);
  Layout wrong = layout(2, 2, 2, 0);
  wrong.gpus = 16;
  CHECK(why(wrong).find("is not the 16 GPUs") != std::string::npos);
  Layout off = layout(8, 1, 1, 0);
  off.offload_cpu = true;
  CHECK(why(off).find("needs zero >= 1") != std::string::npos);
  CHECK(why(layout(8, 1, 1, 4)).find("ZeRO stage") != std::string::npos);
  CHECK(why(layout(8, 1, 1, 0), 12).find("not a multiple of dp x micro-batch = 8") != std::string::npos);
  // estimate() reports it instead of throwing.
  Estimate e = estimate(m, layout(2, 3, 1, 0), Hardware{}, 0);
  CHECK_FALSE(e.valid);
  CHECK_FALSE(e.fits);
  CHECK(e.why_not.find("attention heads") != std::string::npos);
}

TEST_CASE("estimate: step time by hand") {
  ModelShape m = model_from_params(1e9);  // no seq: one token per sequence
  Hardware hw;
  hw.peak_flops = 1e15;
  hw.achievable_fraction = 0.5;
  hw.intra_node_bw = 100e9;
  hw.inter_node_bw = 10e9;
  hw.host_bw = 25e9;
  hw.gpu_mem_bytes = 80e9;
  Layout l = layout(8, 1, 1, 0);
  Estimate e = estimate(m, l, hw, 8);
  REQUIRE(e.valid);
  CHECK(e.layout.microbatches == 1);
  CHECK(e.model_flops == 48e9);
  CHECK(e.compute_seconds == doctest::Approx(48e9 / (8 * 1e15 * 0.5)));  // 1.2e-5 s
  // all-reduce 2 x 1e9 x 2 x 7/8 = 3.5e9 bytes at 100 GB/s = 35 ms, of which the backward of the
  // one micro-batch (2/3 of compute) hides 8 us.
  CHECK(e.comm.dp == 3.5e9);
  CHECK(e.comm_total_seconds == doctest::Approx(0.035));
  CHECK(e.comm_seconds == doctest::Approx(0.035 - 8e-6));
  CHECK(e.step_seconds == doctest::Approx(1.2e-5 + 0.035 - 8e-6));
  // fp16 + Adam: 16 GB of state + 50 MB buckets + 2 GB overhead fits in 80 GB.
  CHECK(e.memory.total() == doctest::Approx(16e9 + 50e6 + 2e9));
  CHECK(e.fits);
  CHECK(e.headroom == doctest::Approx(80e9 - 18.05e9));
  // Across nodes (16 GPUs, 8 per node) the dp group uses the inter-node bandwidth.
  Estimate e16 = estimate(m, layout(16, 1, 1, 0), hw, 16);
  CHECK(e16.comm_total_seconds == doctest::Approx(2 * 1e9 * 2 * 15.0 / 16.0 / 10e9));
  // Offload: gradient shard down, parameter shard up: (2 + 2) bytes x 1e9/8 at 25 GB/s, and the
  // host's optimizer step: 28 bytes of host memory traffic per parameter at 25 GB/s per GPU.
  Layout off = layout(8, 1, 1, 1);
  off.offload_cpu = true;
  Estimate eo = estimate(m, off, hw, 8);
  CHECK(eo.cpu_optimizer_seconds == doctest::Approx(28 * 1.25e8 / 25e9));
  CHECK(eo.offload_seconds == doctest::Approx(4 * 1.25e8 / 25e9 + 28 * 1.25e8 / 25e9));
  CHECK(eo.memory.optimizer == 0);
  CHECK(eo.memory.host_offload == doctest::Approx(12 * 1.25e8 + 2 * 1.25e8));
  // Full recompute runs the forward twice: 4/3 of the model FLOPs.
  ModelShape g = model_from_config(gpt_config(50257));
  Layout r = layout(1, 1, 1, 0);
  r.recompute = Recompute::full;
  Estimate er = estimate(g, r, hw, 4);
  CHECK(er.model_flops == 859885056.0 * 4 * 1024);
  CHECK(er.hardware_flops == doctest::Approx(er.model_flops * 4.0 / 3.0));
  r.recompute = Recompute::selective;  // + the attention-score forward: 1/3 of 12LDT
  Estimate es = estimate(g, r, hw, 4);
  CHECK(es.hardware_flops == doctest::Approx(er.model_flops + 113246208.0 / 3.0 * 4 * 1024));
  // The bubble stretches compute: pp=2 with 2 micro-batches -> bubble 1/3.
  ModelShape t = tiny();
  Estimate ep = estimate(t, layout(1, 1, 2, 0), hw, 2);
  CHECK(ep.bubble == doctest::Approx(1.0 / 3.0));
  CHECK(ep.compute_seconds == doctest::Approx(ep.hardware_flops / (2 * 0.5e15) / (2.0 / 3.0)));
}

TEST_CASE("estimate explains why a layout does not fit") {
  ModelShape m = model_from_params(7.5e9);
  Hardware hw;  // 80 GB
  Estimate e = estimate(m, layout(8, 1, 1, 0), hw, 0);
  CHECK_FALSE(e.fits);
  CHECK(e.headroom < 0);
  CHECK(e.why_not.find("needs 122 GB of 80.0 GB") != std::string::npos);
  CHECK(e.why_not.find("optimizer state 90.0 GB") != std::string::npos);
  CHECK(e.why_not.find("try zero >= 1 or offload") != std::string::npos);
}

TEST_CASE("enumerate_layouts: 7.5B on 8 x 80 GB") {
  ModelShape m = model_from_params(7.5e9, 36, 4096, 32, 2048, 50257);
  Layout base;
  base.gpus = 8;
  Hardware hw;
  auto all = enumerate_layouts(m, base, hw, 8);
  REQUIRE(!all.empty());
  // Fitting layouts first, fastest first; then the rest with a reason.
  CHECK(all.front().valid);
  CHECK(all.front().fits);
  size_t fitting = 0;
  bool seen_nonfit = false;
  for (size_t i = 0; i < all.size(); ++i) {
    const auto& e = all[i];
    CHECK(e.valid);  // automatically generated impossible layouts are dropped
    CHECK(e.layout.dp * e.layout.tp * e.layout.pp == 8);
    CHECK(32 % e.layout.tp == 0);
    if (e.fits) {
      CHECK_FALSE(seen_nonfit);
      ++fitting;
      if (i > 0 && all[i - 1].fits) CHECK(all[i - 1].step_seconds <= e.step_seconds * 1.001);
      CHECK(e.memory.total() <= 80e9);
    } else {
      seen_nonfit = true;
      CHECK(e.why_not.find("needs ") != std::string::npos);
      CHECK(e.why_not.find("of 80.0 GB") != std::string::npos);
    }
  }
  CHECK(fitting > 0);
  CHECK(seen_nonfit);
  // Plain DP without ZeRO cannot hold 120 GB of model state on 80 GB.
  for (const auto& e : all)
    if (e.layout.dp == 8 && e.layout.zero == 0) CHECK_FALSE(e.fits);
  // A fixed impossible choice is explained, not dropped.
  LayoutSearch s;
  s.tp = 3;
  auto bad = enumerate_layouts(m, base, hw, 8, s);
  REQUIRE(bad.size() >= 1);
  for (const auto& e : bad) CHECK_FALSE(e.valid);
  bool names_tp = false;
  for (const auto& e : bad) names_tp = names_tp || e.why_not.find("tp x pp = 3 does not divide the 8 GPUs") != std::string::npos;
  CHECK(names_tp);
  // Fixed valid choices restrict the search.
  LayoutSearch z;
  z.zero = 3;
  z.tp = 2;
  for (const auto& e : enumerate_layouts(m, base, hw, 8, z)) {
    CHECK(e.layout.zero == 3);
    CHECK(e.layout.tp == 2);
  }
}

TEST_CASE("recommend's rule: the simplest fitting layout within 5% of the fastest, the others say why not") {
  auto row = [](double step, int64_t zero, bool offload, int64_t tp, Recompute rc, bool fits = true) {
    Estimate e;
    e.layout.zero = zero;
    e.layout.offload_cpu = offload;
    e.layout.tp = tp;
    e.layout.recompute = rc;
    e.step_seconds = step;
    e.fits = fits;
    return e;
  };
  std::vector<Estimate> rows = {row(10.0, 1, true, 1, Recompute::none),        // fastest, offload
                                row(10.2, 0, false, 2, Recompute::none),       // tp=2
                                row(10.4, 0, false, 1, Recompute::selective),  // the simplest within 5%
                                row(11.0, 0, false, 1, Recompute::none),       // simpler, but 10% slower
                                row(1.0, 0, false, 1, Recompute::none, false)};  // does not fit
  prefer_simplest(rows);
  CHECK(rows[0].step_seconds == 10.4);
  CHECK(rows[0].passed_over.empty());
  CHECK(rows[1].passed_over == "passed over: needs CPU offload; 3.8% faster (within 5% of the fastest)");
  CHECK(rows[2].passed_over == "passed over: needs tp=2 where tp=1 fits; 1.9% faster (within 5% of the fastest)");
  CHECK(rows[3].passed_over == "passed over: 10.0% slower than the fastest");
  CHECK(rows[4].passed_over.empty());
}

TEST_CASE("dl-shard's step time starts from dl-cost's calibrated MFU of the GPU at the model's size") {
  PlanInputs in;
  in.params = 7e9;
  in.gpus = 8;
  in.gpu = "A100-SXM-80GB";
  PlanReport a100 = make_plan(in);
  CHECK(a100.hardware.achievable_fraction == calibrated_mfu(*gpu_spec("A100-SXM-80GB"), 7e9));
  CHECK(a100.hardware.achievable_fraction == doctest::Approx(0.644).epsilon(2e-3));  // the 7B knot
  in.gpu = "H100-SXM";
  in.params = 124.44e6;
  PlanReport h100 = make_plan(in);
  CHECK(h100.hardware.achievable_fraction == calibrated_mfu(*gpu_spec("H100-SXM"), 124.44e6));
  bool noted = false;
  for (const auto& n : h100.notes) noted = noted || n.find("achievable fraction: the calibrated MFU") != std::string::npos;
  CHECK(noted);
  in.mfu = 0.45;  // --mfu fixes it
  CHECK(make_plan(in).hardware.achievable_fraction == 0.45);
}
