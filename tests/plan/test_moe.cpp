// Mixture of experts in the planner: total vs active parameters, expert parallelism's memory and
// all-to-all traffic, the layout search, and Hugging Face MoE configs.
#include <doctest/doctest.h>

#include <string>

#include "dl/core/error.hpp"
#include "dl/nn/gpt_from_config.hpp"
#include "dl/plan/plan.hpp"
#include "dl/plan/report.hpp"
#include "support/support.hpp"

using namespace dl;
using namespace dl::plan;

namespace {

// The shape flags give: --arch llama --layers ... --experts ... (model_from_hints).
ModelShape moe_shape(double params, int64_t layers, int64_t hidden, int64_t heads, int64_t kv_heads, int64_t ffn,
                     int64_t vocab, int64_t experts, int64_t active, int64_t expert_ffn = 0, int64_t shared = 0,
                     int64_t dense_layers = 0) {
  ArchHints a;
  a.family = "llama";
  a.kv_heads = kv_heads;
  a.ffn_hidden = ffn;
  a.experts = experts;
  a.active_experts = active;
  a.expert_ffn = expert_ffn;
  a.shared_experts = shared;
  a.dense_layers = dense_layers;
  return model_from_hints(params, layers, hidden, heads, 4096, vocab, a);
}

// Mixtral 8x7B (mistralai/Mixtral-8x7B-v0.1 config.json): 46.7B total, 12.9B active (Mistral AI).
ModelShape mixtral() { return moe_shape(46.7e9, 32, 4096, 32, 8, 14336, 32000, 8, 2); }

// DeepSeek-V3 (arXiv 2412.19437): 671B total, 37B active; 61 layers of width 7168, 3 dense
// layers of FFN 18432, then 256 routed + 1 shared experts of width 2048, top-8, vocabulary 129280.
// The planner has no multi-head latent attention: 128 standard heads of width 56 stand in.
ModelShape deepseek_v3() { return moe_shape(671e9, 61, 7168, 128, 0, 18432, 129280, 256, 8, 2048, 1, 3); }

std::string moe_hf_json(const std::string& arch, const std::string& type, const std::string& extra) {
  return "{\"architectures\": [\"" + arch + "\"], \"model_type\": \"" + type + "\", " + extra + "}";
}

}  // namespace

TEST_CASE("MoE parameters: Mixtral 8x7B and DeepSeek-V3 total and active counts match the published figures") {
  const ModelShape mx = mixtral();
  CHECK(mx.params == doctest::Approx(46.7e9).epsilon(0.02));
  CHECK(active_param_count(mx) == doctest::Approx(12.9e9).epsilon(0.02));
  // The router (hidden x experts per layer) counts: 32 x 4096 x 8.
  CHECK(expert_param_count(mx) == 3.0 * 4096 * 14336);
  CHECK(describe_moe_params(mx) == "46.7B total, 12.9B active");

  const ModelShape ds = deepseek_v3();
  CHECK(ds.params == doctest::Approx(671e9).epsilon(0.02));
  // Standard attention over-counts MLA's projections by ~18M per layer (4 x 7168^2 = 206M vs
  // MLA's ~187M): 61 x 18M = 1.1B of the 1.7B the active count is over 37B (38.7B, +4.5%).
  const double active = active_param_count(ds);
  MESSAGE("DeepSeek-V3: ", describe_moe_params(ds), " (published 671B total, 37B active)");
  CHECK(active == doctest::Approx(37e9).epsilon(0.05));
  CHECK(active > 37e9);
  // FLOPs per token count the active parameters (6 N_active + attention), memory the total.
  CHECK(flops_per_token(ds) == doctest::Approx(6 * active + attention_flops_per_token(ds)));
  CHECK(flops_per_token(ds) < 6 * ds.params / 10);
}

TEST_CASE("MoE from a Hugging Face config.json: Mixtral, Qwen2-MoE, DeepSeek-V3, OLMoE; unknown MoE keys refused") {
  dl::test::TempDir dir("plan-moe-hf");
  auto write = [&](const std::string& name, const std::string& text) {
    dl::test::write_file(dir / name, text);
    return (dir / name).string();
  };
  const std::string mixtral_keys =
      "\"hidden_size\": 4096, \"intermediate_size\": 14336, \"num_hidden_layers\": 32, \"num_attention_heads\": 32, "
      "\"num_key_value_heads\": 8, \"vocab_size\": 32000, \"max_position_embeddings\": 32768, \"hidden_act\": \"silu\", "
      "\"tie_word_embeddings\": false, \"sliding_window\": null, \"num_local_experts\": 8, \"num_experts_per_tok\": 2, "
      "\"router_aux_loss_coef\": 0.02, \"output_router_logits\": false";
  const ModelShape mx = model_from_hf_config(write("mixtral.json", moe_hf_json("MixtralForCausalLM", "mixtral", mixtral_keys)), 4096);
  // The flags and the config.json give the same model, to the parameter.
  CHECK(mx.params == mixtral().params);
  CHECK(active_param_count(mx) == active_param_count(mixtral()));

  const ModelShape ds = model_from_hf_config(
      write("dsv3.json",
            moe_hf_json("DeepseekV3ForCausalLM", "deepseek_v3",
                    "\"hidden_size\": 7168, \"intermediate_size\": 18432, \"moe_intermediate_size\": 2048, "
                    "\"num_hidden_layers\": 61, \"num_attention_heads\": 128, \"num_key_value_heads\": 128, "
                    "\"n_shared_experts\": 1, \"n_routed_experts\": 256, \"num_experts_per_tok\": 8, "
                    "\"first_k_dense_replace\": 3, \"moe_layer_freq\": 1, \"n_group\": 8, \"topk_group\": 4, "
                    "\"topk_method\": \"noaux_tc\", \"routed_scaling_factor\": 2.5, \"scoring_func\": \"sigmoid\", "
                    "\"norm_topk_prob\": true, \"kv_lora_rank\": 512, \"q_lora_rank\": 1536, \"qk_nope_head_dim\": 128, "
                    "\"qk_rope_head_dim\": 64, \"v_head_dim\": 128, \"num_nextn_predict_layers\": 1, "
                    "\"vocab_size\": 129280, \"max_position_embeddings\": 163840, \"hidden_act\": \"silu\", "
                    "\"tie_word_embeddings\": false, \"ep_size\": 1")),
      4096);
  CHECK(ds.params == deepseek_v3().params);
  CHECK(ds.dense_layers == 3);
  CHECK(ds.shared_experts == 1);
  CHECK(dl::test::has(ds.note, "multi-head latent attention"));
  CHECK(dl::test::has(ds.note, "672B total, 38.7B active"));

  // Qwen1.5-MoE-A2.7B: 60 experts of 1408, top-4, one shared expert of 5632; 14.3B total, 2.7B active.
  const ModelShape qwen = model_from_hf_config(
      write("qwen.json", moe_hf_json("Qwen2MoeForCausalLM", "qwen2_moe",
                                 "\"hidden_size\": 2048, \"intermediate_size\": 5632, \"moe_intermediate_size\": 1408, "
                                 "\"shared_expert_intermediate_size\": 5632, \"num_hidden_layers\": 24, "
                                 "\"num_attention_heads\": 16, \"num_key_value_heads\": 16, \"num_experts\": 60, "
                                 "\"num_experts_per_tok\": 4, \"decoder_sparse_step\": 1, \"mlp_only_layers\": [], "
                                 "\"vocab_size\": 151936, \"max_position_embeddings\": 8192, \"tie_word_embeddings\": false, "
                                 "\"use_sliding_window\": false, \"sliding_window\": 32768")));
  CHECK(qwen.params == doctest::Approx(14.3e9).epsilon(0.02));
  CHECK(active_param_count(qwen) == doctest::Approx(2.7e9).epsilon(0.05));
  // OLMoE-1B-7B: 64 experts of 1024, top-8: 6.9B total, 1.3B active.
  const ModelShape olmoe = model_from_hf_config(
      write("olmoe.json", moe_hf_json("OlmoeForCausalLM", "olmoe",
                                  "\"hidden_size\": 2048, \"intermediate_size\": 1024, \"num_hidden_layers\": 16, "
                                  "\"num_attention_heads\": 16, \"num_key_value_heads\": 16, \"num_experts\": 64, "
                                  "\"num_experts_per_tok\": 8, \"vocab_size\": 50304, \"max_position_embeddings\": 4096, "
                                  "\"tie_word_embeddings\": false")));
  CHECK(olmoe.params == doctest::Approx(6.9e9).epsilon(0.02));
  CHECK(active_param_count(olmoe) == doctest::Approx(1.3e9).epsilon(0.05));

  // Never silently dense: an MoE key the family's reader does not take, a layer pattern it does
  // not plan, more active experts than experts.
  CHECK(dl::test::has(dl::test::usage_error_of([&] {
    model_from_hf_config(write("x.json", moe_hf_json("MixtralForCausalLM", "mixtral", mixtral_keys + ", \"moe_topk_groups\": 2")));
  }), "\"moe_topk_groups\""));
  CHECK(dl::test::has(dl::test::usage_error_of([&] {
    model_from_hf_config(write("y.json", moe_hf_json("LlamaForCausalLM", "llama", mixtral_keys)));
  }), "describes a mixture of experts the LlamaForCausalLM reader does not plan"));
  const std::string sparse = "\"hidden_size\": 2048, \"intermediate_size\": 5632, \"moe_intermediate_size\": 1408, "
                             "\"num_hidden_layers\": 24, \"num_attention_heads\": 16, \"num_experts\": 60, "
                             "\"vocab_size\": 151936, \"max_position_embeddings\": 8192, ";
  CHECK(dl::test::has(dl::test::usage_error_of([&] {
    model_from_hf_config(write("z.json", moe_hf_json("Qwen2MoeForCausalLM", "qwen2_moe", sparse + "\"num_experts_per_tok\": 4, \"decoder_sparse_step\": 2")));
  }), "\"decoder_sparse_step\""));
  CHECK(dl::test::has(dl::test::usage_error_of([&] {
    model_from_hf_config(write("k.json", moe_hf_json("Qwen2MoeForCausalLM", "qwen2_moe", sparse + "\"num_experts_per_tok\": 61")));
  }), "\"num_experts_per_tok\" 61"));
}

TEST_CASE("MoE flags: bad values are usage errors naming the flag") {
  CHECK(dl::test::has(dl::test::usage_error_of([] { moe_shape(46.7e9, 32, 4096, 32, 8, 14336, 32000, 0, 2); }), "experts: need at least 1 routed expert, got 0"));
  CHECK(dl::test::has(dl::test::usage_error_of([] { moe_shape(46.7e9, 32, 4096, 32, 8, 14336, 32000, 8, 9); }), "active_experts 9"));
  CHECK(dl::test::has(dl::test::usage_error_of([] { moe_shape(46.7e9, 32, 4096, 32, 8, 14336, 32000, 8, 0); }), "active_experts 0"));
  CHECK(dl::test::has(dl::test::usage_error_of([] { moe_shape(46.7e9, 32, 4096, 32, 8, 14336, 32000, 8, 2, 0, 0, 32); }), "dense_layers 32"));
  ArchHints a;
  a.active_experts = 2;
  CHECK(dl::test::has(dl::test::usage_error_of([&] { model_from_hints(7e9, 32, 4096, 32, 4096, 32000, a); }), "give experts N"));
}

TEST_CASE("expert parallelism divides the experts' memory; ZeRO shards their state over dp / ep") {
  const ModelShape m = mixtral();
  Layout l;
  l.gpus = 64, l.dp = 64, l.attention = Attention::flash;
  const StateBytes sb = state_bytes(Precision::bf16);
  const double experts = expert_params_per_rank(m, 1, 1);
  CHECK(experts == doctest::Approx(32.0 * 8 * expert_param_count(m)));
  for (int64_t zero : {0, 1, 3}) {
    CAPTURE(zero);
    l.zero = zero;
    l.ep = 1;
    const MemoryBreakdown one = memory_per_rank(m, l);
    l.ep = 8;
    const MemoryBreakdown eight = memory_per_rank(m, l);
    // ZeRO-0: the experts' weights are 1/8 on each rank; ZeRO-1: the optimizer state of the
    // experts is sharded over 64 / 8 = 8 ranks that hold the same experts, not all 64.
    const double dense = params_per_rank(m, 1, 1) - experts;
    if (zero == 0) CHECK(one.params - eight.params == doctest::Approx(sb.params * experts * 7 / 8));
    if (zero == 1) CHECK(eight.optimizer == doctest::Approx(sb.optimizer * (dense / 64 + experts / 8 / 8)));
    // ZeRO-3 shards every state over all 64 ranks either way: ep changes who holds which shard.
    if (zero == 3) CHECK(eight.params == doctest::Approx(sb.params * (dense / 64 + experts / 8 / 8)));
    if (zero == 3) CHECK(eight.model_states() == doctest::Approx(one.model_states()));
    else CHECK(eight.model_states() < one.model_states());
  }
}

TEST_CASE("all-to-all: tokens x hidden x bytes x (ep-1)/ep, two per MoE layer forward and two backward") {
  ModelShape m = mixtral();
  m.capacity_factor = 1.25;
  Layout l;
  l.gpus = 16, l.dp = 16, l.ep = 4, l.micro_batch = 2, l.microbatches = 3;
  // 4096 tokens x 2 sequences x top-2 x 1.25 copies of 4096 bf16 values, 3/4 of them to other ranks.
  const double per = 4096.0 * 2 * 2 * 1.25 * 4096 * 2 * 3 / 4;
  CHECK(all_to_all_bytes(m, l) == doctest::Approx(per));
  CHECK(comm_per_rank(m, l).ep == doctest::Approx(4 * 32 * 3 * per));
  l.recompute = Recompute::full;  // re-runs the forward's two
  CHECK(comm_per_rank(m, l).ep == doctest::Approx(6 * 32 * 3 * per));
  l.ep = 1;
  CHECK(all_to_all_bytes(m, l) == 0);
  CHECK(comm_per_rank(m, l).ep == 0);
  // Inside a node the all-to-all runs at NVLink speed, across nodes at the fabric's.
  Hardware hw;
  l.recompute = Recompute::none, l.zero = 1;
  l.ep = 8;
  const Estimate inside = estimate(m, l, hw, 0);
  l.gpus_per_node = 4;
  const Estimate across = estimate(m, l, hw, 0);
  REQUIRE(inside.valid);
  CHECK(across.comm_total_seconds - inside.comm_total_seconds ==
        doctest::Approx(inside.comm.ep / hw.inter_node_bw - inside.comm.ep / hw.intra_node_bw));
}

TEST_CASE("node-limited routing: min(top-k, max nodes) copies of a token cross the fabric, every copy NVLink") {
  ModelShape m = deepseek_v3();
  Layout l;
  l.gpus = 64, l.dp = 64, l.ep = 64, l.micro_batch = 1, l.microbatches = 2;  // ep spans 8 nodes of 8
  const Hardware hw;
  const double routed = all_to_all_bytes(m, l);  // 4096 tokens x top-8 x 7168 x 2 bytes x 63/64
  CHECK(routed == doctest::Approx(4096.0 * 8 * 7168 * 2 * 63 / 64));
  // Unlimited (the default): no fabric share; every copy goes at the ep group's bandwidth, the fabric's.
  CHECK(all_to_all_fabric_bytes(m, l) == 0);
  const Estimate unlimited = estimate(m, l, hw, 0);
  REQUIRE(unlimited.valid);
  CHECK(unlimited.comm.ep_fabric == 0);
  CHECK(unlimited.ep_seconds == doctest::Approx(unlimited.comm.ep / hw.inter_node_bw));
  // At most 4 nodes a token: 4 copies cross to the other 7 of 8 nodes; the 8 routed copies then
  // move over NVLink.
  m.moe_max_nodes = 4;
  const double fabric = 4096.0 * 4 * 7168 * 2 * 7 / 8;
  CHECK(all_to_all_fabric_bytes(m, l) == doctest::Approx(fabric));
  const Estimate limited = estimate(m, l, hw, 0);
  const double moe_layers = 58, passes = 4, micro = 2;
  CHECK(limited.comm.ep_fabric == doctest::Approx(passes * moe_layers * micro * fabric));
  CHECK(limited.comm.ep == doctest::Approx(passes * moe_layers * micro * (routed + fabric)));
  CHECK(limited.ep_seconds == doctest::Approx(passes * moe_layers * micro * (fabric / hw.inter_node_bw + routed / hw.intra_node_bw)));
  CHECK(limited.ep_seconds < unlimited.ep_seconds / 1.7);
  // A limit above top-k changes nothing on the fabric: each copy is at most one node.
  m.moe_max_nodes = 16;
  CHECK(all_to_all_fabric_bytes(m, l) == doctest::Approx(4096.0 * 8 * 7168 * 2 * 7 / 8));
  // Inside one node there is no fabric to limit.
  m.moe_max_nodes = 4;
  l.gpus = 8, l.dp = 8, l.ep = 8;
  CHECK(all_to_all_fabric_bytes(m, l) == 0);
  CHECK(estimate(m, l, hw, 0).comm.ep_fabric == 0);
  CHECK(dl::test::has(dl::test::usage_error_of([] {
    ArchHints a;
    a.moe_max_nodes = 4;
    model_from_hints(7e9, 32, 4096, 32, 4096, 32000, a);
  }), "moe_max_nodes shape a mixture of experts"));
}

TEST_CASE("fp8 training dispatches at 1 byte a value; the combine and the backward all-to-alls at 2") {
  const ModelShape m = mixtral();
  Layout l;
  l.gpus = 16, l.dp = 16, l.ep = 4, l.micro_batch = 1, l.microbatches = 1;
  CHECK(dispatch_value_bytes(Precision::fp8) == 1);
  CHECK(dispatch_value_bytes(Precision::bf16) == 2);
  const double bf16 = comm_per_rank(m, l).ep;
  l.precision = Precision::fp8;
  const double per = all_to_all_bytes(m, l);  // at fp8's 2-byte activation values
  CHECK(bf16 == doctest::Approx(4 * 32 * per));
  // Forward: dispatch at half the bytes, combine in full; backward: two in full.
  CHECK(comm_per_rank(m, l).ep == doctest::Approx(3.5 * 32 * per));
  l.recompute = Recompute::full;  // the recomputed forward dispatches in fp8 too
  CHECK(comm_per_rank(m, l).ep == doctest::Approx(5 * 32 * per));
}

TEST_CASE("--moe-overlap full exposes only the all-to-all time beyond the step's compute") {
  const ModelShape m = mixtral();
  Layout l;
  l.gpus = 64, l.dp = 64, l.ep = 8, l.zero = 1, l.micro_batch = 1, l.attention = Attention::flash;
  l.gpus_per_node = 4;  // ep over two nodes: the fabric
  Hardware hw;
  const Estimate none = estimate(m, l, hw, 64);
  REQUIRE(none.valid);
  CHECK(none.ep_exposed_seconds == doctest::Approx(none.ep_seconds));
  l.moe_overlap = MoeOverlap::full;
  const Estimate hidden = estimate(m, l, hw, 64);
  const double compute = hidden.compute_seconds * (1 - hidden.bubble);
  REQUIRE(hidden.ep_seconds < compute);  // fits under compute: hidden in full
  CHECK(hidden.ep_exposed_seconds == 0);
  CHECK(none.step_seconds - hidden.step_seconds == doctest::Approx(none.ep_seconds));
  // A slow fabric: only the excess over compute is exposed.
  hw.inter_node_bw = none.comm.ep / (3 * compute);
  const Estimate slow = estimate(m, l, hw, 64);
  CHECK(slow.ep_seconds == doctest::Approx(3 * compute));
  CHECK(slow.ep_exposed_seconds == doctest::Approx(2 * compute));
  CHECK(parse_moe_overlap("full") == MoeOverlap::full);
  CHECK(dl::test::has(dl::test::usage_error_of([] { parse_moe_overlap("half"); }), "moe_overlap: unknown overlap 'half' (none or full)"));
}

TEST_CASE("uneven pipeline stages: DeepSeek-V3's 61 layers on 16 stages when asked for, ceil(61 / 16) blocks a stage") {
  const ModelShape m = deepseek_v3();
  Layout l;
  l.gpus = 2048, l.dp = 128, l.pp = 16, l.ep = 64, l.zero = 1;
  CHECK(dl::test::has(check_layout(m, l, 0), "pp = 16 does not divide the 61 layers (nor the 63"));
  l.uneven_stages = true;
  CHECK(check_layout(m, l, 0).empty());
  CHECK(stage_blocks(m.n_layer, l.pp).most() == 4);
  l.pp = 64, l.dp = 32, l.ep = 32;
  CHECK(dl::test::has(check_layout(m, l, 0), "pp = 64 is more stages than the 61 layers"));
}

TEST_CASE("ep must divide the experts and dp, and needs a mixture of experts") {
  const ModelShape m = mixtral();
  Layout l;
  l.gpus = 8, l.dp = 8, l.ep = 3;
  CHECK(dl::test::has(check_layout(m, l, 0), "ep = 3 does not divide the 8 experts"));
  l.gpus = 8, l.dp = 2, l.tp = 4, l.ep = 4;
  CHECK(dl::test::has(check_layout(m, l, 0), "ep = 4 does not divide dp = 2"));
  l.ep = 2;
  CHECK(check_layout(m, l, 0).empty());
  ModelShape dense = m;
  dense.experts = 0;
  CHECK(dl::test::has(check_layout(dense, l, 0), "expert parallelism"));
}

TEST_CASE("recommend tries EP before TP for a mixture of experts; --ep fixes it") {
  PlanInputs in;
  in.params = 46.7e9;
  in.layers = 32, in.hidden = 4096, in.heads = 32, in.seq = 4096, in.vocab = 32000;
  in.arch.family = "llama", in.arch.kv_heads = 8, in.arch.ffn_hidden = 14336;
  in.arch.experts = 8, in.arch.active_experts = 2;
  in.gpus = 64;
  in.gpu = "H100-SXM";
  const PlanReport r = make_recommendation(in);
  REQUIRE(r.best());
  CHECK(r.best()->layout.ep > 1);
  CHECK(r.best()->layout.tp == 1);
  CHECK(r.flops_per_token == doctest::Approx(flops_per_token(mixtral())));
  bool noted = false;
  for (const auto& n : r.notes) noted = noted || dl::test::has(n, "params 46.7B total, 12.9B active");
  CHECK(noted);
  in.fixed.ep = 2;
  const PlanReport two = make_plan(in);
  for (const auto& e : two.rows) CHECK(e.layout.ep == 2);
  in.fixed.ep = 3;
  CHECK(dl::test::has(dl::test::usage_error_of([&] { make_plan(in); }), "ep 3 does not divide the 8 experts"));
  in.fixed.ep = 8, in.fixed.tp = 8;  // dp = 8 / ... = 64 / 8 = 8: fine; with pp 2 dp = 4
  in.fixed.pp = 2;
  CHECK(dl::test::has(dl::test::usage_error_of([&] { make_plan(in); }), "ep 8 does not divide dp = 4"));
}

TEST_CASE("a llama config with model.n_experts plans a mixture of experts; dl-train's llama refuses to build it") {
  const std::string path = dl::test::source_path("configs/mixtral-8x7b.toml").string();
  const PlanConfig pc = load_plan_config(path, {});
  // The same model the flags give, to the parameter.
  CHECK(pc.model.params == mixtral().params);
  CHECK(active_param_count(pc.model) == active_param_count(mixtral()));
  CHECK(pc.model.experts == 8);
  // --set reaches the expert keys: model.n_experts = 0 is the dense Mistral-7B-like block.
  const PlanConfig dense = load_plan_config(path, {"model.n_experts=0", "model.n_experts_active=0"});
  CHECK_FALSE(dense.model.is_moe());
  CHECK(dense.model.params < pc.model.params / 5);
  CHECK(dl::test::has(dl::test::usage_error_of([&] { llama_config_from(pc.config.model); }),
                      "model.n_experts = 8: dl-train's models have no experts"));
  CHECK(dl::test::has(dl::test::usage_error_of([&] { load_plan_config(path, {"model.n_experts_active=9"}); }),
                      "model.n_experts_active (9) must be 1 to model.n_experts (8)"));
  CHECK(dl::test::has(dl::test::usage_error_of([&] { load_plan_config(path, {"model.n_experts=0"}); }),
                      "model.n_experts is 0 (a dense model)"));
}
