// The planner's arithmetic. Every formula cites its source; docs/PLANNING.md collects them with
// the assumptions made where the sources leave a choice.
#include "dl/plan/plan.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>
#include <sstream>

#include "dl/cli/table.hpp"
#include "dl/core/error.hpp"
#include "dl/core/option_error.hpp"
#include "dl/data/dataset.hpp"
#include "dl/nn/gpt.hpp"
#include "dl/nn/gpt_from_config.hpp"
#include "dl/nn/mlp.hpp"

namespace dl::plan {

namespace {

// A block's parameters in two parts (REFERENCE.md "Model arithmetic", "Llama-family
// arithmetic"). Split: what Megatron-LM (Shoeybi et al. 2019) splits t ways under tensor
// parallelism — q [D -> D], k and v [D -> KV hd each], o [D -> D], the MLP's matrices (gelu:
// D x F twice; swiglu: gate, up and down, three) and the column-parallel biases (q/k/v, gelu's
// c_fc or swiglu's gate and up). Replicated: the two norms (LayerNorm 2D each, RMSNorm D) and
// the row-parallel biases (o and the MLP's output, D each).
// GPT-2: split 12D^2 + 7D, replicated 6D: 12 D^2 + 13 D (ln_1, ln_2, c_attn, c_proj, c_fc, mlp c_proj).
struct BlockParams {
  double split = 0, replicated = 0;
  double experts = 0;  // of the total, the routed experts' (split t ways too; sharded over ep ranks)
};

double norm_params(const ModelShape& m) {
  return (m.norm == NormKind::layernorm ? 2.0 : 1.0) * static_cast<double>(m.hidden);
}

// An MLP of inner width f: gelu's D -> F -> D or swiglu's gate, up and down, with the family's biases.
BlockParams mlp_params(const ModelShape& m, double f) {
  const double d = static_cast<double>(m.hidden);
  const double in_matrices = m.mlp == MlpKind::swiglu ? 2.0 : 1.0;  // gate and up, or c_fc
  BlockParams b;
  b.split = (in_matrices + 1) * d * f;
  if (m.mlp_bias) b.split += in_matrices * f, b.replicated += d;
  return b;
}

// A block: attention, norms and either the dense MLP or (moe) the router, the routed experts and
// the shared experts. Megatron-LM splits each expert's matrices t ways as it splits the dense
// MLP's (expert tensor parallelism = tp) and replicates the router.
BlockParams block_params(const ModelShape& m, bool moe = false) {
  const double d = static_cast<double>(m.hidden), kv = m.kv_fraction() * d;
  BlockParams b;
  b.split = 2 * d * d + 2 * d * kv;
  if (m.qkv_bias) b.split += d + 2 * kv;
  if (m.proj_bias) b.replicated += d;
  b.replicated += 2 * norm_params(m);
  const auto add = [&b](const BlockParams& mlp, double count) {
    b.split += count * mlp.split;
    b.replicated += count * mlp.replicated;
  };
  if (!moe) {
    add(mlp_params(m, static_cast<double>(m.ffn())), 1);
    return b;
  }
  const BlockParams expert = mlp_params(m, static_cast<double>(m.expert_width()));
  add(expert, static_cast<double>(m.experts));
  add(mlp_params(m, static_cast<double>(m.shared_width())), static_cast<double>(m.shared_experts));
  b.replicated += d * static_cast<double>(m.experts);  // the router
  b.experts = static_cast<double>(m.experts) * (expert.split + expert.replicated);
  return b;
}

// Parameters of all n_layer blocks: dense_layers dense ones and moe_layers() of experts.
double blocks_params(const ModelShape& m) {
  const BlockParams dense = block_params(m), moe = block_params(m, true);
  const double n_moe = static_cast<double>(m.moe_layers());
  return (static_cast<double>(m.n_layer) - n_moe) * (dense.split + dense.replicated) + n_moe * (moe.split + moe.replicated);
}

// One block's parameters on a tensor-parallel rank: the split part over t, the rest whole.
double layer_params_tp(const ModelShape& m, double t, bool moe = false) {
  const BlockParams b = block_params(m, moe);
  return b.split / t + b.replicated;
}

bool has_layers(const ModelShape& m) { return m.n_layer > 0 && m.hidden > 0; }

// The width of the K and V an attention layer keeps, as a fraction of D.
double stored_kv_fraction(const ModelShape& m) { return m.kv_repeated ? 1.0 : m.kv_fraction(); }

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The MLP width whose F-wide values a block stores per token: the dense MLP's ffn(), or (moe) the
// routed copies' share of their experts (capacity_factor x active_experts x expert_width()) plus
// the shared experts every token passes through.
double stored_mlp_width(const ModelShape& m, bool moe) {
  if (!moe) return static_cast<double>(m.ffn());
  return m.capacity_factor * static_cast<double>(m.active_experts * m.expert_width()) +
         static_cast<double>(m.shared_experts * m.shared_width());
}

// The widest of the model's layer kinds (the backward working set's F-wide gradients).
double widest_mlp_width(const ModelShape& m) {
  if (!m.is_moe()) return stored_mlp_width(m, false);
  const double moe = stored_mlp_width(m, true);
  return m.dense_layers > 0 ? std::max(moe, stored_mlp_width(m, false)) : moe;
}

// PyTorch DDP's default gradient bucket (bucket_cap_mb = 25); two in flight.
constexpr double kGradBucketBytes = 25e6;
// Parameters ZeRO-3 gathers at once when the layer size is unknown: DeepSpeed's default
// stage3_prefetch_bucket_size (5e7 elements).
constexpr double kZero3GatherParams = 5e7;

// A config's expert keys (model.n_experts ...), each alone in range by the schema, together: a
// llama mixture of experts or none. Errors name the file and the keys.
void check_config_experts(const ModelConfig& c, const std::string& file) {
  if (c.n_experts == 0) {
    if (c.n_experts_active || c.expert_ffn_hidden || c.n_shared_experts || c.n_dense_layers)
      throw_usage(file, ": model.n_experts is 0 (a dense model), but model.n_experts_active, model.expert_ffn_hidden, "
                  "model.n_shared_experts or model.n_dense_layers shape experts");
    return;
  }
  if (c.type != ModelType::llama)
    throw_usage(file, ": model.n_experts = ", c.n_experts, " plans a mixture of experts of llama blocks: set model.type = \"llama\"");
  if (c.n_experts_active < 1 || c.n_experts_active > c.n_experts)
    throw_usage(file, ": model.n_experts_active (", c.n_experts_active, ") must be 1 to model.n_experts (", c.n_experts,
                "): the experts each token is routed to");
  if (c.n_dense_layers >= c.n_layer)
    throw_usage(file, ": model.n_dense_layers (", c.n_dense_layers, ") must be below model.n_layer (", c.n_layer,
                "): at least one layer holds experts");
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Model size and FLOPs

ModelShape model_from_config(const Config& c, const std::string& name) {
  ModelShape m;
  m.name = name.empty() ? std::string(c.model.type.name()) : name;
  m.type = c.model.type.get();
  if (is_token_model(c.model.type)) {
    if (c.model.type == ModelType::llama) {
      // The block dl-train builds: its K/V heads and SwiGLU width as llama_config_from resolves
      // them (0 in the config: n_head and 4 x n_embd), RMSNorm, rotary, no biases but the
      // optional q/k/v ones.
      ModelConfig dense = c.model;
      dense.n_experts = 0;  // the block's dense parts; the experts come below
      const LlamaConfig lc = llama_config_from(dense);
      m = with_family(m, Family::llama);
      m.qkv_bias = lc.qkv_bias;
      m.kv_heads = lc.n_kv_head;
      m.ffn_hidden = lc.ffn_hidden;
      m.kv_repeated = true;
      m.params = static_cast<double>(llama_param_count(lc));
    } else {
      m.params = static_cast<double>(gpt_param_count(gpt_config_from(c.model)));
    }
    m.n_layer = c.model.n_layer;
    m.hidden = c.model.n_embd;
    m.heads = c.model.n_head;
    m.seq = c.model.block_size;
    m.vocab = c.model.vocab_size;
    m.tied_head = c.model.tie_embeddings;
    m.dropout = false;  // dl-train's GPT has no dropout (hf config: *_pdrop = 0)
    check_config_experts(c.model, m.name);
    if (c.model.n_experts > 0) {
      m.experts = c.model.n_experts;
      m.active_experts = c.model.n_experts_active;
      m.expert_ffn = c.model.expert_ffn_hidden;
      m.shared_experts = c.model.n_shared_experts;
      m.dense_layers = c.model.n_dense_layers;
      m.params = transformer_param_count(m);
    }
    return m;
  }
  {
    // mlp: the input width and the number of classes are properties of the data, not the config:
    // open the training data the way dl-train does and read them.
    DataSplits data = open_datasets(c.data, c.model.block_size, static_cast<uint64_t>(c.train.seed));
    if (data.train->is_sequence())
      throw_usage("model.type = \"mlp\" needs feature rows (csv:...), but data.source ", c.data.source,
                  " holds tokens");
    MlpConfig mc;
    mc.n_inputs = static_cast<int>(data.train->n_features());
    mc.n_classes = static_cast<int>(data.train->n_classes());
    mc.hidden.assign(c.model.hidden.begin(), c.model.hidden.end());
    m.params = static_cast<double>(mlp_param_count(mc));
    m.note = str("mlp with ", mc.n_inputs, " inputs and ", mc.n_classes, " classes (read from ", c.data.source,
                 "); activations are not modelled for mlp");
    return m;
  }
}

ModelShape model_from_params(double params, int64_t n_layer, int64_t hidden, int64_t heads, int64_t seq,
                             int64_t vocab) {
  return model_from_params(params, with_dims(ModelShape{}, n_layer, hidden, heads, seq, vocab));
}

ModelShape with_dims(ModelShape m, int64_t n_layer, int64_t hidden, int64_t heads, int64_t seq, int64_t vocab) {
  m.n_layer = n_layer, m.hidden = hidden, m.heads = heads, m.seq = seq, m.vocab = vocab;
  return m;
}

ModelShape model_from_params(double params, const ModelShape& hints) {
  if (!(params > 0) || !std::isfinite(params)) throw_option_error("{params}: need a positive parameter count, got ", params);
  const int64_t n_layer = hints.n_layer, hidden = hints.hidden, heads = hints.heads, seq = hints.seq, vocab = hints.vocab;
  if (params > kMaxModelParameters)
    throw_option_error("{params} ", params, ": more than the ", kMaxModelParameters, " parameters the planner plans");
  if (n_layer < 0 || hidden < 0 || heads < 0 || seq < 0 || vocab < 0 || hints.kv_heads < 0 || hints.ffn_hidden < 0)
    throw_usage("architecture hints must be positive (or left out)");
  // Bounded before any count: ffn() and the parameter formulas multiply these.
  const std::pair<const char*, int64_t> dims[] = {
      {"{layers}", n_layer},          {"{hidden}", hidden},         {"{heads}", heads},
      {"{seq}", seq},                 {"{vocab}", vocab},           {"{kv_heads}", hints.kv_heads},
      {"{ffn_hidden}", hints.ffn_hidden}, {"{experts}", hints.experts}, {"{active_experts}", hints.active_experts},
      {"{expert_ffn}", hints.expert_ffn}, {"{shared_experts}", hints.shared_experts}};
  for (const auto& [flag, value] : dims)
    if (value > kMaxModelDimension)
      throw_option_error(flag, " ", value, ": at most ", kMaxModelDimension, " (no model dimension is larger)");
  if (heads > 0 && hidden > 0 && hidden % heads != 0)
    throw_option_error("{heads} ", heads, " does not divide {hidden} ", hidden);
  if (hints.kv_heads > 0 && heads == 0) throw_option_error("{kv_heads} needs {heads}: K/V heads group the query heads");
  if (hints.kv_heads > 0 && heads % hints.kv_heads != 0)
    throw_option_error("{kv_heads} ", hints.kv_heads, " does not divide {heads} ", heads,
                       ": each K/V head serves heads / kv-heads query heads");
  ModelShape m = hints;
  m.type = std::nullopt;
  m.params = params;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4g", params);
  std::string num = buf;  // "7.5e+09" -> "7.5e9"
  if (auto e = num.find("e+"); e != std::string::npos) {
    size_t d = e + 2;
    while (d + 1 < num.size() && num[d] == '0') ++d;
    num = num.substr(0, e + 1) + num.substr(d);
  }
  m.name = num + " params";
  if (has_layers(m)) {
    double need = blocks_params(m);
    if (vocab > 0) need += (m.tied_head ? 1.0 : 2.0) * static_cast<double>(vocab) * static_cast<double>(hidden);
    if (seq > 0 && m.learned_positions) need += static_cast<double>(seq) * static_cast<double>(hidden);
    // With the embeddings known the hints give the exact count (+ the final norm's 2D or D).
    const bool exact = vocab > 0 && (seq > 0 || !m.learned_positions);
    if (exact) need += norm_params(m);
    const double off = need / params - 1;
    if (off > kParamsRounding)
      throw_option_error("{params} ", num, " is fewer than the architecture hints alone need (", group_digits(need),
                  " for ", n_layer, " layers of width ", hidden,
                  vocab > 0 ? " and the embeddings" : "", "; more than ", kParamsRounding * 100,
                  "% off): check {params}, {layers} and {hidden}");
    // A rounded count ("124M" for GPT-2 small's 124,439,808) is what users type: within
    // kParamsRounding of what the hints need, the planner uses the hints' count and says so.
    if (off > 1e-7 || (exact && std::fabs(off) > 1e-7 && std::fabs(off) <= kParamsRounding)) {
      m.params = need;
      m.note = str("{params} ", num, " taken as ", group_digits(need), ", the count of ", n_layer,
                   " layers of width ", hidden, exact ? " with the embeddings" : " (a lower bound: no {vocab}/{seq})",
                   " (", std::fabs(off) < 5e-5 ? std::string("<0.01") : format_fixed(std::fabs(off) * 100, 2),
                   "% off; more than ", kParamsRounding * 100,
                   "% off is an error)");
    }
  }
  return m;
}

int64_t ModelShape::ffn() const {
  if (ffn_hidden > 0) return ffn_hidden;
  return mlp == MlpKind::swiglu ? swiglu_hidden(hidden) : 4 * hidden;
}

int64_t swiglu_hidden(int64_t hidden) {
  const int64_t two_thirds = 2 * (4 * hidden) / 3;
  return (two_thirds + 255) / 256 * 256;
}

ModelShape with_family(ModelShape m, Family f) {
  m.family = f;
  const bool gpt = f == Family::gpt;
  m.mlp = gpt ? MlpKind::gelu : MlpKind::swiglu;
  m.norm = gpt ? NormKind::layernorm : NormKind::rmsnorm;
  m.qkv_bias = m.proj_bias = m.mlp_bias = gpt;
  m.learned_positions = gpt;
  m.tied_head = gpt;
  m.dropout = gpt;
  return m;
}

Family parse_family(const std::string& s) {
  if (auto f = parse_choice<Family>(s)) return *f;
  throw_option_error("{arch}: unknown architecture '", s, "' (gpt or llama)");
}

double block_param_count(const ModelShape& m) {
  const BlockParams b = block_params(m, m.is_moe());
  return b.split + b.replicated;
}

double transformer_param_count(const ModelShape& m) {
  const double d = static_cast<double>(m.hidden), v = static_cast<double>(m.vocab);
  return v * d * (m.tied_head ? 1.0 : 2.0) + (m.learned_positions ? static_cast<double>(m.seq) * d : 0.0) +
         blocks_params(m) + norm_params(m);
}

void check_moe(const ModelShape& m) {
  if (!m.is_moe()) {
    if (m.active_experts || m.expert_ffn || m.shared_experts || m.dense_layers || m.capacity_factor != 1.0 || m.moe_max_nodes)
      throw_option_error("{active_experts}, {expert_ffn}, {shared_experts}, {dense_layers}, {capacity_factor} and "
                         "{moe_max_nodes} shape a mixture of experts: give {experts} N too");
    return;
  }
  if (m.experts < 1) throw_option_error("{experts}: need at least 1 routed expert, got ", m.experts);
  if (m.n_layer < 1 || m.hidden < 1)
    throw_option_error("{experts} replaces the blocks' MLPs: give {layers} and {hidden} (or {hf_config})");
  if (m.active_experts < 1 || m.active_experts > m.experts)
    throw_option_error("{active_experts} ", m.active_experts, ": each token goes to between 1 and {experts} = ", m.experts,
                       " routed experts");
  if (m.expert_ffn < 0) throw_option_error("{expert_ffn}: need a positive width, got ", m.expert_ffn);
  if (m.shared_experts < 0) throw_option_error("{shared_experts}: need 0 or more, got ", m.shared_experts);
  if (m.dense_layers < 0 || m.dense_layers >= m.n_layer)
    throw_option_error("{dense_layers} ", m.dense_layers, ": need 0 to ", m.n_layer - 1,
                       " (at least one of the ", m.n_layer, " layers holds experts)");
  if (!(m.capacity_factor >= 1.0) || !std::isfinite(m.capacity_factor))
    throw_option_error("{capacity_factor} ", m.capacity_factor, ": need at least 1 (1: every expert takes its fair share of the tokens)");
  if (m.moe_max_nodes < 0)
    throw_option_error("{moe_max_nodes} ", m.moe_max_nodes, ": need the nodes a token may reach (1 or more; 0 or left out: unlimited)");
}

double expert_param_count(const ModelShape& m) {
  if (!m.is_moe()) return 0;
  const BlockParams e = mlp_params(m, static_cast<double>(m.expert_width()));
  return e.split + e.replicated;
}

double active_param_count(const ModelShape& m) {
  if (!m.is_moe()) return m.params;
  return m.params - static_cast<double>(m.moe_layers()) * static_cast<double>(m.experts - m.active_experts) *
                        expert_param_count(m);
}

std::string describe_moe_params(const ModelShape& m) {
  if (!m.is_moe()) return "";
  // "671B", "12.9B", "1.3B", "450M": three significant digits.
  const auto count = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3g%s", v >= 1e9 ? v / 1e9 : v / 1e6, v >= 1e9 ? "B" : "M");
    return std::string(buf);
  };
  return str(count(m.params), " total, ", count(active_param_count(m)), " active");
}

std::string describe_block(const ModelShape& m) {
  std::string s;
  if (m.heads > 0 && m.kv() != m.heads) s += str(" KV=", m.kv());
  if (m.hidden > 0 && (m.ffn_hidden > 0 || m.mlp == MlpKind::swiglu) && m.ffn() != 4 * m.hidden) s += str(" F=", m.ffn());
  if (m.family == Family::llama)
    s += str(" llama (", m.mlp == MlpKind::swiglu ? "SwiGLU" : "GELU", ", ", m.norm == NormKind::rmsnorm ? "RMSNorm" : "LayerNorm",
             m.learned_positions ? ", learned positions" : ", rotary", m.qkv_bias ? ", q/k/v biases" : "", ")");
  if (!m.tied_head) s += " untied head";
  return s;
}

std::string group_digits(double v) {
  std::string digits = std::to_string(static_cast<long long>(std::llround(v)));
  std::string out;
  int n = 0;
  for (auto it = digits.rbegin(); it != digits.rend(); ++it) {
    if (n && n % 3 == 0 && *it != '-') out.insert(out.begin(), ',');
    out.insert(out.begin(), *it);
    ++n;
  }
  return out;
}


std::string flop_formula_name(FlopFormula f) {
  return f == FlopFormula::palm ? "6N+12LHQT (PaLM)" : "6N+6LDT (llm.c)";
}

FlopFormula parse_flop_formula(const std::string& s) {
  if (auto f = parse_choice<FlopFormula>(s)) return *f;
  throw_usage("unknown FLOP formula '", s, "' (palm or llmc)");
}

double attention_flops_per_token(const ModelShape& m, FlopFormula f) {
  if (!m.is_transformer()) return 0;
  // H heads x Q head dim = D (hidden).
  const double l = static_cast<double>(m.n_layer), d = static_cast<double>(m.hidden), t = static_cast<double>(m.seq);
  return (f == FlopFormula::palm ? 12.0 : 6.0) * l * d * t;
}

double flops_per_token(const ModelShape& m, FlopFormula f) {
  // PaLM (Chowdhery et al. 2022, appendix B): 6N + 12 L H Q T; llm.c: 6N + 6 L D T.
  // A mixture of experts computes with the parameters its tokens pass through (6 N_active).
  return 6.0 * active_param_count(m) + attention_flops_per_token(m, f);
}

std::string recompute_name(Recompute r) { return std::string(choice_name(r)); }

Recompute parse_recompute(const std::string& s) {
  if (auto r = parse_choice<Recompute>(s)) return *r;
  throw_option_error("{recompute}: unknown mode '", s, "' (none, selective or full)");
}

std::string attention_name(Attention a) { return std::string(choice_name(a)); }

Attention parse_attention(const std::string& s) {
  if (auto a = parse_choice<Attention>(s)) return *a;
  throw_option_error("{attention}: unknown attention '", s, "' (flash or materialized)");
}

Attention attention_for_device(Choice<DeviceChoice> device) {
  // dl-train's CPU backend keeps the T x T probabilities (attention_state_shape [B, H, T, T]);
  // its CUDA kernels are flash-style ([B, H, 2T]). "auto" trains on the GPU whenever one is
  // usable, and a plan of GPU memory is about that run.
  return device == DeviceChoice::cpu ? Attention::materialized : Attention::flash;
}

std::string Layout::describe() const {
  return str("dp=", dp, " tp=", tp, " pp=", pp, cp > 1 ? str(" cp=", cp) : std::string(), ep > 1 ? str(" ep=", ep) : std::string(),
             " zero=", zero, " offload=", offload_cpu ? "cpu" : "none",
             " recompute=", recompute_name(recompute), " mb=", micro_batch,
             attention == Attention::flash ? " attention=flash" : "", sequence_parallel && tp > 1 ? " sp" : "");
}

// ---------------------------------------------------------------------------------------------
// Memory

Precision parse_precision(std::string_view name) {
  if (auto p = parse_choice<Precision>(name)) return *p;
  throw_usage("unknown precision '", name, "' (bf16, fp16, fp32, or fp8 on GPUs with FP8 tensor cores)");
}

StateOptimizer parse_optimizer(std::string_view name) {
  if (auto o = parse_choice<StateOptimizer>(name)) return *o;
  throw_usage("unknown optimizer '", name, "' (adamw, sgd-momentum or sgd)");
}

StateBytes state_bytes(std::string_view precision, std::string_view optimizer) {
  return state_bytes(parse_precision(precision), parse_optimizer(optimizer));
}

StateBytes state_bytes(Precision precision, StateOptimizer optimizer) {
  const bool mixed = precision != Precision::fp32;
  StateBytes b;
  // fp8 (Transformer Engine's recipe): bf16 weights and gradients as in bf16 training, plus an
  // FP8 copy of each weight (1 byte) cast once per step for the GEMMs; the fp32 master copy and
  // the Adam moments are unchanged (Micikevicius et al. 2022, "FP8 Formats for Deep Learning").
  b.params = mixed ? (precision == Precision::fp8 ? 3 : 2) : 4;
  b.grads = mixed ? 2 : 4;
  // Mixed precision keeps an fp32 master copy (4 bytes) among the optimizer states (ZeRO paper,
  // section 3.1: K = 12 for Adam = master 4 + momentum 4 + variance 4).
  const double master = mixed ? 4 : 0;
  switch (optimizer) {
    case StateOptimizer::adamw: b.optimizer = master + 8; break;         // exp_avg + exp_avg_sq
    case StateOptimizer::sgd_momentum: b.optimizer = master + 4; break;  // momentum_buffer
    case StateOptimizer::sgd: b.optimizer = master; break;
  }
  return b;
}

StateOptimizer optimizer_state(const OptimConfig& optim) {
  if (optim.name == OptimizerKind::adamw) return StateOptimizer::adamw;
  return optim.momentum != 0 ? StateOptimizer::sgd_momentum : StateOptimizer::sgd;
}

double activation_value_bytes(Precision precision) { return precision == Precision::fp32 ? 4 : 2; }

double activation_value_bytes(std::string_view precision) { return activation_value_bytes(parse_precision(precision)); }

double zero_model_state_bytes(double psi, int64_t nd, int64_t zero, const StateBytes& b) {
  const double n = static_cast<double>(std::max<int64_t>(nd, 1));
  switch (zero) {
    case 0: return (b.params + b.grads + b.optimizer) * psi;
    case 1: return (b.params + b.grads) * psi + b.optimizer * psi / n;
    case 2: return b.params * psi + (b.grads + b.optimizer) * psi / n;
    case 3: return (b.params + b.grads + b.optimizer) * psi / n;
    default: throw_usage("zero stage ", zero, " is not 0..3");
  }
}

StageBlocks stage_blocks(int64_t n_layer, int64_t pp) {
  const int64_t p = std::max<int64_t>(pp, 1);
  if (p == 1 || n_layer <= 0) return {n_layer, n_layer, n_layer};
  if (n_layer % p == 0) return {n_layer / p, n_layer / p, n_layer / p};
  if ((n_layer + 2) % p == 0) {
    const int64_t k = (n_layer + 2) / p;
    return {k - 1, k, k - 1};
  }
  const int64_t k = ceil_div(n_layer, p);
  return {k, k, k};
}

namespace {

// The busiest rank's parameters before ZeRO and, of them, the routed experts' (before ep).
struct RankParams {
  double total = 0, experts = 0;
};

RankParams rank_params(const ModelShape& m, int64_t tp, int64_t pp) {
  const double t = static_cast<double>(std::max<int64_t>(tp, 1));
  const int64_t p = std::max<int64_t>(pp, 1);
  if (!has_layers(m)) return {m.params / (t * static_cast<double>(p)), 0.0};
  const double h = static_cast<double>(m.hidden);
  const StageBlocks blocks = stage_blocks(m.n_layer, p);
  // Everything outside the blocks: embeddings (wte V x D, wpe T x D), final norm (2D or D),
  // and whatever else the count holds when only --params was given (taken as embeddings).
  const double final_norm = norm_params(m);
  const double outside = std::max(0.0, m.params - blocks_params(m) - final_norm);
  const double wpe = m.seq > 0 && m.vocab > 0 && m.learned_positions ? static_cast<double>(m.seq) * h : 0.0;  // replicated
  const double split = outside - wpe;  // wte, an untied lm_head (vocab-parallel) and the rest: split t ways
  // The vocabulary's rows split as evenly as they go (dl-train's vocab_range): the busiest rank
  // holds ceil(V / t) rows of wte and of an untied lm_head.
  const double matrices = m.vocab > 0 ? (m.tied_head ? 1.0 : 2.0) : 0.0;
  const double rows = static_cast<double>(ceil_div(m.vocab, std::max<int64_t>(tp, 1)));
  const double vocab_whole = matrices * static_cast<double>(m.vocab) * h;
  const double vocab_local = matrices * rows * h;
  // (A rounded --params may hold less than the hints' vocabulary: then all of it splits t ways.)
  const double split_local = split >= vocab_whole ? (split - vocab_whole) / t + vocab_local : split / t;
  // The blocks [begin, begin + count): a mixture of experts' first dense_layers are dense.
  const double dense_layer = layer_params_tp(m, t), moe_layer = layer_params_tp(m, t, true);
  const double experts_layer = block_params(m, true).experts / t;
  const auto stage = [&](int64_t begin, int64_t count) {
    const int64_t dense = m.is_moe() ? std::clamp<int64_t>(m.dense_layers - begin, 0, count) : count;
    const double moe = static_cast<double>(count - dense);
    return RankParams{static_cast<double>(dense) * dense_layer + moe * moe_layer, moe * experts_layer};
  };
  RankParams first = stage(0, blocks.first);
  first.total += split_local + wpe + (p == 1 ? final_norm : 0.0);
  if (p == 1) return first;
  const RankParams middle = p > 2 ? stage(blocks.first, blocks.middle) : RankParams{};
  // The last stage holds the final LayerNorm and the LM head: with tied embeddings its own copy
  // of the token embedding (Megatron-LM keeps one on the first and the last stage), else the
  // untied lm_head, which the first stage then does not hold.
  const double head = m.vocab > 0 ? rows * h : 0.0;
  RankParams last = stage(m.n_layer - blocks.last, blocks.last);
  last.total += final_norm + head;
  if (!m.tied_head) first.total -= head;
  RankParams most = first;
  for (const RankParams& r : {middle, last})
    if (r.total > most.total) most = r;
  return most;
}

}  // namespace

double params_per_rank(const ModelShape& m, int64_t tp, int64_t pp) { return rank_params(m, tp, pp).total; }

double expert_params_per_rank(const ModelShape& m, int64_t tp, int64_t pp) { return rank_params(m, tp, pp).experts; }

double activation_bytes_per_layer(const ModelShape& m, int64_t micro_batch, int64_t tp, Recompute r,
                                  double bytes_per_value, Attention attention, bool sequence_parallel) {
  if (!m.is_transformer()) return 0;
  // Korthikanti et al. 2022 (arXiv 2205.05198), section 4: per layer, 16-bit activations,
  // s*b*h*(34 + 5*a*s/h); with tensor parallelism (no sequence parallelism)
  // s*b*h*(10 + 24/t + 5*a*s/(h*t)). Selective recompute (their section 5) recomputes the
  // attention scores: the 5as/(ht) term goes. Full recompute keeps only the layer input: 2sbh.
  // The published constants count 2-byte values (and 1-byte dropout masks); other widths scale
  // the whole by bytes_per_value / 2.
  const double s = static_cast<double>(m.seq), b = static_cast<double>(micro_batch), h = static_cast<double>(m.hidden),
               a = static_cast<double>(m.heads), t = static_cast<double>(std::max<int64_t>(tp, 1));
  // Their per-layer breakdown (16-bit values, t = 1): attention 11sbh + 5as^2b (QKV input 2, Q and
  // K 4, V 2, projection input 2, dropout mask 1; softmax output 2as^2b, its dropout mask as^2b
  // and dropout output 2as^2b), MLP 19sbh (input 2, GELU input 8 and output 8, dropout mask 1),
  // two LayerNorm inputs 4sbh. Without dropout the masks (2sbh + as^2b) and the attention-dropout
  // output (2as^2b) go: 32sbh + 2as^2b, i.e. s*b*h*(8 + 24/t + 2as/(ht)) under tensor parallelism.
  // Sequence parallelism splits the replicated part along the sequence, t ways.
  const double sp = sequence_parallel && tp > 1 ? static_cast<double>(tp) : 1.0;
  const double replicated = (m.dropout ? 10 : 8) / sp, scores = m.dropout ? 5 : 2;
  // The t-way split part, 24 for GPT-2, from the block's widths: Q 2, K and V 2 x KV/heads each
  // (grouped-query attention stores the smaller K/V), the projection input 2, and the MLP's
  // F-wide values: GELU's input and output (2 x 2F/h: 16 at F = 4h), SwiGLU's gate and up
  // outputs (silu's and the product's inputs) and their product (down's input): 3 x 2F/h
  // (Megatron-LM's swiglu keeps the same three). K and V repeated to every query head
  // (m.kv_repeated: dl-train's llama) are as wide as Q. A MoE layer's F-wide values are those of
  // the experts its tokens pass through (stored_mlp_width).
  const double mlp_values = m.mlp == MlpKind::swiglu ? 3.0 : 2.0;
  const double sbh = s * b * h, scale = bytes_per_value / 2.0;
  // Flash attention (Dao et al. 2022; dl-train's kernels/attention.cu) never stores the scores,
  // their dropout mask or output (the mask is regenerated from the RNG state): backward
  // recomputes them from Q, K, V (already in the 11sbh), the output (the projection input) and a
  // per-row log-sum-exp state. We count that state as 2 values of the activation width per row
  // per head, 2*a*s*b/t values per layer — dl-train's CUDA backend allocates
  // attention_state_shape = [B, H, 2T] of the model dtype (PyTorch/FlashAttention keep one fp32
  // per row: the same bytes at 16 bits).
  const double attention_term = attention == Attention::flash
                                    ? 2 * a * s * b / t * bytes_per_value
                                    : sbh * scores * a * s / (h * t) * scale;
  const auto layer = [&](bool moe) {
    const double f_over_h = stored_mlp_width(m, moe) / h;
    const double split = 4 + 4 * stored_kv_fraction(m) + 2 * mlp_values * f_over_h;
    // A MoE layer also keeps every routed copy of a token, the expert's input after the dispatch
    // and its output before the weighted combine (the router's gradient needs it): 2 values of
    // width h per copy, active_experts x capacity_factor copies; and the router's probabilities,
    // experts values per token.
    const double routed = moe ? 2 * 2 * static_cast<double>(m.active_experts) * m.capacity_factor +
                                    2 * static_cast<double>(m.experts) / h
                              : 0.0;
    switch (r) {
      case Recompute::none: return sbh * (replicated + routed + split / t) * scale + attention_term;
      // Selective recompute re-runs the attention core in backward, which rebuilds the
      // log-sum-exp state too: nothing of it is kept, for either attention.
      case Recompute::selective: return sbh * (replicated + routed + split / t) * scale;
      case Recompute::full: return 2 * sbh * scale / sp;
    }
    return 0.0;
  };
  // Layers of a kind the model has; every stage is charged the heavier kind.
  if (!m.is_moe()) return layer(false);
  return m.dense_layers > 0 ? std::max(layer(false), layer(true)) : layer(true);
}

namespace {

// Micro-batches whose activations a pipeline stage holds at its peak. Without pipeline
// parallelism gradient accumulation runs one micro-batch at a time. GPipe runs every forward
// before any backward: all m. 1F1B (PipeDream-Flush, Narayanan et al. 2021): stage i holds
// pp - i, so the first stage min(pp, m).
int64_t in_flight(const Layout& l) {
  if (l.pp <= 1) return 1;
  const int64_t m = std::max<int64_t>(l.microbatches, 1);
  return l.schedule == PipelineSchedule::gpipe ? m : std::min(l.pp, m);
}

}  // namespace

double activation_bytes(const ModelShape& m, const Layout& l) {
  if (!m.is_transformer()) return 0;
  if (l.cp > 1) {
    // Each context-parallel rank holds seq / cp of every sequence: its activations are those of
    // the shorter sequence (ring attention's K/V chunk in flight is counted in comm buffers).
    ModelShape chunk = m;
    chunk.seq = m.seq / l.cp;
    Layout whole = l;
    whole.cp = 1;
    return activation_bytes(chunk, whole);
  }
  const double bpv = activation_value_bytes(l.precision);
  const StageBlocks blocks = stage_blocks(m.n_layer, l.pp);
  const bool sp = l.sequence_parallel && l.tp > 1;
  const double spd = sp ? static_cast<double>(l.tp) : 1.0;
  const double per = activation_bytes_per_layer(m, l.micro_batch, l.tp, l.recompute, bpv, l.attention, sp);
  // Full recompute re-runs one layer's forward at a time during backward: that layer's full
  // activations (with the layout's attention) exist on top of the stored layer inputs.
  const double recompute_peak =
      l.recompute == Recompute::full
          ? activation_bytes_per_layer(m, l.micro_batch, l.tp, Recompute::none, bpv, l.attention, sp)
          : 0.0;
  // Output layer (Korthikanti et al. section 4.3): final LayerNorm input and LM-head input
  // (2sbh each at 16 bits) and the logits the cross-entropy keeps, sbV/t values (vocab-parallel).
  // Korthikanti et al. count fp32 logits (4sbV/t bytes: Megatron upcasts them); dl-train keeps
  // them in the activation dtype and writes their gradient in place, so bpv bytes per value.
  const double s = static_cast<double>(m.seq), b = static_cast<double>(l.micro_batch), h = static_cast<double>(m.hidden);
  const double output = 4 * s * b * h * (bpv / 2.0) / spd +
                        (m.vocab > 0 ? bpv * s * b * static_cast<double>(m.vocab) / static_cast<double>(std::max<int64_t>(l.tp, 1)) : 0.0);
  // Backward working set (not in Korthikanti et al., who count what is kept for backward): the
  // activation gradients in flight while one layer's backward runs — the residual-stream
  // gradient and the layer-input gradient (2 values of width h) and the MLP's 4h-wide GELU input
  // and output gradients (8/t values of width h): s*b*h*(2 + 8/t) values. Counted once per rank.
  // (GPT-2's F = 4h, two F-wide gradients: 8/t.) A SwiGLU block's backward (dl-train's llama,
  // measured in tests/shard/test_plan_measured.cpp) holds, beside the three F-wide gradients
  // (the product's, gate's and up's), the block's output (h), the q, k and v projections
  // (1 + 2 KV/heads of h/t: RoPE rotates them apart from the packed qkv) and the packed q/k/v
  // gradient (1 + 2R, R the stored K/V fraction): s*b*h*(3 + (2 + 2R + 2 KV/heads + 3F/h)/t).
  const double tpd = static_cast<double>(std::max<int64_t>(l.tp, 1));
  const double f_over_h = widest_mlp_width(m) / h;
  const double work =
      s * b * h * bpv *
      (m.mlp == MlpKind::swiglu ? 3 / spd + (2 + 2 * stored_kv_fraction(m) + 2 * m.kv_fraction() + 3 * f_over_h) / tpd
                                : 2 / spd + 2 * f_over_h / tpd);
  const double first = static_cast<double>(blocks.first) * per * static_cast<double>(in_flight(l)) + recompute_peak + work;
  if (l.pp <= 1) return first + output;
  // The second stage holds one micro-batch fewer under 1F1B; with the embedding counted as a
  // layer (stage_blocks) it holds one block more than the first.
  Layout second_stage = l;
  second_stage.pp = l.pp - 1;
  const double second = l.pp > 2 ? static_cast<double>(blocks.middle) * per * static_cast<double>(in_flight(second_stage)) +
                                       recompute_peak + work
                                 : 0.0;
  // The last stage runs each micro-batch's backward right after its forward under 1F1B (one in
  // flight); under GPipe it too holds every micro-batch, output layer (logits) included.
  const double last_in_flight = l.schedule == PipelineSchedule::gpipe ? static_cast<double>(std::max<int64_t>(l.microbatches, 1)) : 1.0;
  const double last = (static_cast<double>(blocks.last) * per + output) * last_in_flight + recompute_peak + work;
  return std::max({first, second, last});
}

namespace {

// A rank's share of its parameters' ZeRO-sharded state: the dense part over the nd = dp x cp
// ranks, the routed experts' over ep first (each rank holds experts / ep of them) and then over
// the nd / ep ranks that hold the same experts (Megatron-LM's expert-data-parallel group, which
// its distributed optimizer and DeepSpeed-MoE's ZeRO shard over). `sharded`: ZeRO shards this
// state at the layout's stage.
struct ParamSplit {
  double dense = 0, experts = 0;  // parameters on the rank before ZeRO (experts already / ep)
  double nd = 1, nd_experts = 1;  // the ranks ZeRO shards each over
  double shard(double bytes_per_param, bool sharded) const {
    return sharded ? bytes_per_param * (dense / nd + experts / nd_experts) : bytes_per_param * (dense + experts);
  }
};

ParamSplit param_split(const ModelShape& m, const Layout& l) {
  ParamSplit p;
  const double all = params_per_rank(m, l.tp, l.pp), experts = expert_params_per_rank(m, l.tp, l.pp);
  const double ep = static_cast<double>(std::max<int64_t>(l.ep, 1));
  p.dense = all - experts;
  p.experts = experts / ep;
  p.nd = static_cast<double>(std::max<int64_t>(l.dp, 1) * std::max<int64_t>(l.cp, 1));
  p.nd_experts = std::max(1.0, p.nd / ep);
  return p;
}

// Tokens one rank routes per micro-batch: each of its seq / cp x micro-batch tokens to
// active_experts experts, capacity_factor x the fair share.
double routed_tokens(const ModelShape& m, const Layout& l) {
  return static_cast<double>(m.seq) / static_cast<double>(std::max<int64_t>(l.cp, 1)) *
         static_cast<double>(l.micro_batch) * static_cast<double>(m.active_experts) * m.capacity_factor;
}

}  // namespace

MemoryBreakdown memory_per_rank(const ModelShape& m, const Layout& l) {
  const StateBytes sb = state_bytes(l.precision, l.optimizer);
  const ParamSplit ps = param_split(m, l);
  const double P = ps.dense + ps.experts;
  const double nd = ps.nd;
  MemoryBreakdown mem;
  mem.params = ps.shard(sb.params, l.zero >= 3);
  mem.grads = ps.shard(sb.grads, l.zero >= 2);
  mem.optimizer = ps.shard(sb.optimizer, l.zero >= 1);
  if (l.offload_cpu) {
    // ZeRO-Offload (Ren et al. 2021): the optimizer states (with the fp32 master copy) and the
    // optimizer step live on the host; the rank's gradient shard is copied there each step.
    mem.host_offload = mem.optimizer + ps.shard(sb.grads, true);
    mem.optimizer = 0;
  }
  mem.activations = activation_bytes(m, l);
  // Communication buffers: two gradient buckets when gradients are reduced (dp > 1); ZeRO-3
  // also holds two gathered layers (the one computing and the one prefetched) at full size;
  // pipeline stages a send and a receive buffer of one micro-batch's boundary activations.
  if (nd > 1) mem.comm_buffers += 2 * kGradBucketBytes;
  if (l.zero >= 3 && nd > 1) {
    // The biggest layer gathered: a MoE layer with only its rank's experts / ep.
    const double t = static_cast<double>(l.tp), ep = static_cast<double>(std::max<int64_t>(l.ep, 1));
    double layer = has_layers(m) ? layer_params_tp(m, t) : std::min(P, kZero3GatherParams);
    if (has_layers(m) && m.is_moe())
      layer = std::max(m.dense_layers > 0 ? layer : 0.0,
                       layer_params_tp(m, t, true) - block_params(m, true).experts / t * (1 - 1 / ep));
    mem.comm_buffers += 2 * layer * sb.params;
  }
  const double seq_chunk = static_cast<double>(m.seq) / static_cast<double>(std::max<int64_t>(l.cp, 1));
  if (l.pp > 1 && m.is_transformer())
    mem.comm_buffers += 2 * seq_chunk * static_cast<double>(l.micro_batch) * static_cast<double>(m.hidden) *
                        activation_value_bytes(l.precision);
  // The all-to-all's send and receive buffers of the routed tokens.
  if (l.ep > 1 && m.is_moe() && m.is_transformer())
    mem.comm_buffers += 2 * routed_tokens(m, l) * static_cast<double>(m.hidden) * activation_value_bytes(l.precision);
  // Ring attention double-buffers the K/V chunk it receives.
  if (l.cp > 1 && m.is_transformer())
    mem.comm_buffers += 2 * 2 * seq_chunk * static_cast<double>(l.micro_batch) * static_cast<double>(m.hidden) *
                        m.kv_fraction() / static_cast<double>(std::max<int64_t>(l.tp, 1)) * activation_value_bytes(l.precision);
  mem.overhead = kOverheadBytes;
  return mem;
}

// ---------------------------------------------------------------------------------------------
// Communication and bubble

CommVolume comm_per_rank(const ModelShape& m, const Layout& l) {
  const StateBytes sb = state_bytes(l.precision, l.optimizer);
  CommVolume c;
  const double micro = static_cast<double>(std::max<int64_t>(l.microbatches, 1));
  const int64_t nd = l.dp * std::max<int64_t>(l.cp, 1);  // gradients reduce over dp x cp
  if (nd > 1) {
    // Ring collectives (nccl-tests conventions): an all-reduce sends 2(n-1)/n of the buffer per
    // rank, a reduce-scatter or an all-gather (n-1)/n. ZeRO paper section 7: DP and ZeRO-1/2
    // move 2 psi per step, ZeRO-3 3 psi (parameters gathered in forward and again in backward).
    // With gradient accumulation (micro > 1), DP and ZeRO-1 accumulate full gradients locally and
    // reduce once; ZeRO-2 keeps only a gradient shard, so it reduce-scatters every micro-batch;
    // ZeRO-3 gathers the parameters and reduce-scatters gradients for every micro-batch.
    // The dense parameters reduce over the nd ranks, the routed experts' (experts / ep of them on
    // the rank) over the nd / ep ranks that hold the same experts.
    const ParamSplit ps = param_split(m, l);
    const auto add = [&](double P, double n) {
      if (n <= 1 || P <= 0) return;
      const double ring = (n - 1) / n;
      switch (l.zero) {
        case 0: c.dp += 2 * P * sb.grads * ring; break;
        case 1: c.dp_params += P * sb.params * ring, c.dp += P * sb.grads * ring + P * sb.params * ring; break;
        case 2: c.dp_params += P * sb.params * ring, c.dp += micro * P * sb.grads * ring + P * sb.params * ring; break;
        default:
          c.dp_params += micro * 2 * P * sb.params * ring, c.dp += micro * P * sb.grads * ring + micro * 2 * P * sb.params * ring;
          break;
      }
    };
    add(ps.dense, ps.nd);
    add(ps.experts, ps.nd_experts);
  }
  if (m.is_transformer()) {
    const double cpd = static_cast<double>(std::max<int64_t>(l.cp, 1));
    const double sbh_bytes = static_cast<double>(m.seq) / cpd * static_cast<double>(l.micro_batch) *
                             static_cast<double>(m.hidden) * activation_value_bytes(l.precision);
    const double layers = static_cast<double>(stage_blocks(m.n_layer, l.pp).most());
    if (l.tp > 1) {
      // Megatron-LM (Shoeybi et al. 2019, figure 4): per layer 2 all-reduces of s*b*h in forward
      // (after attention and after the MLP) and 2 in backward; full recompute re-runs the
      // forward and its 2. Ring all-reduce: 2(t-1)/t of the buffer per rank.
      const double t = static_cast<double>(l.tp);
      const double per_layer = l.recompute == Recompute::full ? 6.0 : 4.0;
      c.tp = per_layer * layers * micro * sbh_bytes * 2 * (t - 1) / t;
    }
    if (l.pp > 1) {
      // Each stage boundary carries one micro-batch's activations forward and their gradient
      // backward (s*b*h each way). The busiest rank is a middle stage, which sends both; with two
      // stages each rank sends one direction only.
      c.pp = (l.pp > 2 ? 2.0 : 1.0) * micro * sbh_bytes;
    }
    if (l.cp > 1) {
      // Ring attention (Megatron-LM's context parallelism): per layer each rank passes its K and
      // V chunk (2 x s/cp x b x h x KV/heads / t) on cp - 1 times in forward, and in backward the
      // K/V again and their gradients (twice that); full recompute repeats the forward's.
      const double kv = 2 * sbh_bytes * m.kv_fraction() / static_cast<double>(std::max<int64_t>(l.tp, 1));
      const double passes = l.recompute == Recompute::full ? 4.0 : 3.0;
      c.cp = passes * layers * micro * kv * (cpd - 1);
    }
    if (l.ep > 1 && m.is_moe()) {
      // Per MoE layer of the busiest stage two all-to-alls in forward (dispatch the routed tokens
      // to their experts' ranks, combine the outputs back) and two in backward (their
      // gradients); full recompute re-runs the forward's two. An fp8 dispatch sends a byte a
      // value, the others the activation bytes: passes weigh each all-to-all by its value bytes.
      const double moe_layers = static_cast<double>(std::min(stage_blocks(m.n_layer, l.pp).most(), m.moe_layers()));
      const double value = activation_value_bytes(l.precision);
      const double forward = dispatch_value_bytes(l.precision) / value + 1.0;
      const double passes = (l.recompute == Recompute::full ? 2.0 : 1.0) * forward + 2.0;
      const double fabric = all_to_all_fabric_bytes(m, l);
      // Node-limited routing: each token crosses the fabric once per node it reaches; every
      // routed copy then moves inside its node over NVLink.
      c.ep_fabric = passes * moe_layers * micro * fabric;
      c.ep = passes * moe_layers * micro * all_to_all_bytes(m, l) + c.ep_fabric;
    }
  }
  return c;
}

double all_to_all_bytes(const ModelShape& m, const Layout& l) {
  if (l.ep <= 1 || !m.is_moe() || !m.is_transformer()) return 0;
  const double ep = static_cast<double>(l.ep);
  return routed_tokens(m, l) * static_cast<double>(m.hidden) * activation_value_bytes(l.precision) * (ep - 1) / ep;
}

double all_to_all_fabric_bytes(const ModelShape& m, const Layout& l) {
  if (l.ep <= 1 || !m.is_moe() || !m.is_transformer() || m.moe_max_nodes <= 0) return 0;
  const int64_t span = std::max<int64_t>(l.tp, 1) * std::max<int64_t>(l.cp, 1) * l.ep;
  const int64_t per_node = std::max<int64_t>(l.gpus_per_node, 1);
  if (span <= per_node) return 0;
  const double nodes = static_cast<double>(ceil_div(span, per_node));
  const double copies = static_cast<double>(std::min(m.active_experts, m.moe_max_nodes)) * m.capacity_factor;
  const double tokens = static_cast<double>(m.seq) / static_cast<double>(std::max<int64_t>(l.cp, 1)) *
                        static_cast<double>(l.micro_batch);
  return tokens * copies * static_cast<double>(m.hidden) * activation_value_bytes(l.precision) * (nodes - 1) / nodes;
}

double dispatch_value_bytes(Precision precision) {
  return precision == Precision::fp8 ? 1.0 : activation_value_bytes(precision);
}

std::string describe_all_to_all(const ModelShape& m, const Layout& l) {
  return str("all-to-alls: dispatch ", dispatch_value_bytes(l.precision), " byte", dispatch_value_bytes(l.precision) == 1 ? "" : "s",
             " a value (", l.precision, l.precision == Precision::fp8 ? ": DeepSeek-V3's fp8 dispatch" : "",
             "), combine and backward ", activation_value_bytes(l.precision), "; ",
             m.moe_max_nodes > 0
                 ? str("node-limited routing ({moe_max_nodes} ", m.moe_max_nodes, "): min(top-", m.active_experts, ", ",
                       m.moe_max_nodes, ") copies of a token cross the fabric when ep spans nodes, every copy moves "
                       "inside its node over NVLink")
                 : std::string("every routed copy crosses the fabric when ep spans nodes ({moe_max_nodes} N limits it)"),
             "; overlap ({moe_overlap}) ", std::string(choice_name(l.moe_overlap)),
             l.moe_overlap == MoeOverlap::full ? ": hidden behind compute, only what outlasts the step's compute exposed"
                                               : ": exposed in full");
}

MoeOverlap parse_moe_overlap(const std::string& s) {
  if (auto o = parse_choice<MoeOverlap>(s)) return *o;
  throw_option_error("{moe_overlap}: unknown overlap '", s, "' (none or full)");
}

double bubble_fraction(int64_t pp, int64_t microbatches) {
  if (pp <= 1) return 0;
  const double p = static_cast<double>(pp), m = static_cast<double>(std::max<int64_t>(microbatches, 1));
  return (p - 1) / (m + p - 1);
}

// ---------------------------------------------------------------------------------------------
// Layouts

std::string check_layout(const ModelShape& m, const Layout& l, int64_t global_batch) {
  if (l.gpus < 1) return str("gpus = ", l.gpus, ": need at least one GPU");
  if (l.dp < 1 || l.tp < 1 || l.pp < 1) return str("dp, tp and pp must be >= 1 (dp=", l.dp, " tp=", l.tp, " pp=", l.pp, ")");
  if (l.cp < 1) return str("cp = ", l.cp, ": need at least 1");
  if (l.cp > 1 && l.dp * l.tp * l.pp * l.cp != l.gpus)
    return str("dp x tp x pp x cp = ", l.dp, " x ", l.tp, " x ", l.pp, " x ", l.cp, " = ", l.dp * l.tp * l.pp * l.cp,
               " is not the ", l.gpus, " GPUs");
  if (l.cp > 1 && !m.is_transformer()) return "context parallelism splits sequences: it needs a transformer with --seq";
  if (l.cp > 1 && m.seq % (2 * l.cp) != 0)
    return str("cp = ", l.cp, ": the sequence of ", m.seq, " does not split into 2 x cp = ", 2 * l.cp,
               " chunks (each rank takes two, for causal load balance)");
  if (l.cp == 1 && l.dp * l.tp * l.pp != l.gpus)
    return str("dp x tp x pp = ", l.dp, " x ", l.tp, " x ", l.pp, " = ", l.dp * l.tp * l.pp, " is not the ", l.gpus,
               " GPUs");
  if (l.gpus_per_node < 1) return str("gpus per node = ", l.gpus_per_node, ": need at least 1");
  if (l.tp > l.gpus_per_node)
    return str("tp = ", l.tp, " is more than the ", l.gpus_per_node,
               " GPUs per node (tensor parallelism needs NVLink-class bandwidth: keep it inside a node)");
  if (m.heads > 0 && m.heads % l.tp != 0) return str("tp = ", l.tp, " does not divide the ", m.heads, " attention heads");
  // Each rank holds whole K/V groups (Megatron-LM's num_query_groups % tp == 0).
  if (m.heads > 0 && m.kv() % l.tp != 0)
    return str("tp = ", l.tp, " does not divide the ", m.kv(), " K/V heads (grouped-query attention: each rank holds whole groups)");
  if (l.uneven_stages && m.n_layer > 0 && l.pp > m.n_layer)
    return str("pp = ", l.pp, " is more stages than the ", m.n_layer, " layers");
  if (!l.uneven_stages && m.n_layer > 0 && m.n_layer % l.pp != 0 && (m.n_layer + 2) % l.pp != 0)
    return str("pp = ", l.pp, " does not divide the ", m.n_layer, " layers (nor the ", m.n_layer + 2,
               " with the embedding and the LM head counted as layers)");
  if (m.type == ModelType::mlp && (l.tp > 1 || l.pp > 1))
    return "tensor and pipeline parallelism apply to the gpt model only (mlp: use dp and zero)";
  if (l.ep < 1) return str("ep = ", l.ep, ": need at least 1");
  if (l.ep > 1 && !m.is_moe()) return str("ep = ", l.ep, ": expert parallelism shards a mixture of experts' experts (a dense model has none)");
  if (l.ep > 1 && m.experts % l.ep != 0) return str("ep = ", l.ep, " does not divide the ", m.experts, " experts");
  if (l.ep > 1 && l.dp % l.ep != 0)
    return str("ep = ", l.ep, " does not divide dp = ", l.dp, " (experts are sharded over data-parallel ranks)");
  if (l.zero < 0 || l.zero > 3) return str("zero = ", l.zero, " is not a ZeRO stage (0..3)");
  if (l.offload_cpu && l.zero < 1) return "offload moves the ZeRO-sharded optimizer state: it needs zero >= 1";
  if (l.micro_batch < 1) return str("micro-batch = ", l.micro_batch, ": need at least 1");
  if (global_batch > 0 && global_batch % (l.dp * l.micro_batch) != 0)
    return str("the global batch of ", global_batch, " sequences is not a multiple of dp x micro-batch = ", l.dp, " x ",
               l.micro_batch, " = ", l.dp * l.micro_batch);
  return "";
}

namespace {

std::string why_it_does_not_fit(const MemoryBreakdown& mem, const Layout& l, double gpu_mem) {
  struct Part {
    const char* what;
    double bytes;
    std::string advice;
  };
  std::vector<Part> parts = {
      {"optimizer state", mem.optimizer,
       l.zero == 0 ? "try zero >= 1 or offload"
                   : (!l.offload_cpu ? "try --offload cpu or more GPUs" : "try more GPUs")},
      {"gradients", mem.grads, l.zero < 2 ? "try zero >= 2" : "try more GPUs, tp or pp"},
      {"parameters", mem.params, l.zero < 3 ? "try zero 3, tp or pp" : "try more GPUs, tp or pp"},
      {"activations", mem.activations,
       l.recompute == Recompute::none
           ? "try --recompute selective or full, a smaller micro-batch, tp or pp"
           : (l.recompute == Recompute::selective ? "try --recompute full, a smaller micro-batch, tp or pp"
                                                  : "try a smaller micro-batch, tp or pp")},
      {"communication buffers", mem.comm_buffers, "try fewer pipeline stages or zero <= 2"},
      {"overhead allowance", mem.overhead, "a GPU with more memory"},
  };
  const Part* big = &parts[0];
  for (const auto& p : parts)
    if (p.bytes > big->bytes) big = &p;
  return str("needs ", format_bytes(mem.total()), " of ", format_bytes(gpu_mem), ": ", big->what, " ",
             format_bytes(big->bytes), " — ", big->advice);
}

}  // namespace

Estimate estimate(const ModelShape& m, const Layout& layout, const Hardware& hw, int64_t global_batch) {
  Estimate e;
  e.layout = layout;
  Layout& l = e.layout;
  if (global_batch <= 0) global_batch = l.dp * l.micro_batch * std::max<int64_t>(l.microbatches, 1);
  e.why_not = check_layout(m, l, global_batch);
  if (!e.why_not.empty()) {
    e.valid = false;
    e.fits = false;
    e.step_seconds = std::numeric_limits<double>::infinity();
    return e;
  }
  l.microbatches = global_batch / (l.dp * l.micro_batch);
  e.memory = memory_per_rank(m, l);
  e.comm = comm_per_rank(m, l);
  e.bubble = bubble_fraction(l.pp, l.microbatches);
  e.headroom = hw.gpu_mem_bytes - e.memory.total();
  e.fits = e.headroom >= 0;
  if (!e.fits) e.why_not = why_it_does_not_fit(e.memory, l, hw.gpu_mem_bytes);

  // Compute: model FLOPs (flops_per_token x tokens) plus what recompute re-runs: full recompute
  // repeats the forward pass (one third of forward + backward); selective recompute repeats the
  // attention-score forward (one third of the attention term).
  const double tokens = static_cast<double>(global_batch) * static_cast<double>(std::max<int64_t>(m.seq, 1));
  e.model_flops = flops_per_token(m) * tokens;
  double extra = 0;
  if (l.recompute == Recompute::full) extra = flops_per_token(m) / 3.0;
  else if (l.recompute == Recompute::selective) extra = attention_flops_per_token(m) / 3.0;
  e.hardware_flops = e.model_flops + extra * tokens;
  const double rate = static_cast<double>(l.gpus) * hw.peak_flops * hw.achievable_fraction;
  e.compute_seconds = rate > 0 ? e.hardware_flops / rate / (1.0 - e.bubble) : std::numeric_limits<double>::infinity();

  // Communication. Megatron's rank order puts tp innermost, then dp, then pp: a tp group is tp
  // consecutive ranks (inside a node), a dp group spans tp x dp ranks, a pipeline all of them.
  const auto bw = [&](int64_t span) { return span <= l.gpus_per_node ? hw.intra_node_bw : hw.inter_node_bw; };
  // Context parallelism sits between tp and dp (Megatron's order tp-cp-dp-pp).
  const double t_tp = e.comm.tp / bw(l.tp), t_pp = e.comm.pp / bw(l.gpus), t_cp = e.comm.cp / bw(l.tp * l.cp);
  // Expert parallelism sits between cp and dp (Megatron's tp-cp-ep-dp): NVLink while tp x cp x ep
  // ranks fit in a node, else the fabric. Its all-to-alls are on the critical path (the experts
  // wait for their tokens, the next layer for the combine): exposed in full unless the schedule
  // overlaps them (below). Under node-limited routing the fabric carries ep_fabric and NVLink the rest.
  const double t_ep = e.comm.ep_fabric > 0
                          ? e.comm.ep_fabric / hw.inter_node_bw + (e.comm.ep - e.comm.ep_fabric) / hw.intra_node_bw
                          : e.comm.ep / bw(l.tp * l.cp * std::max<int64_t>(l.ep, 1));
  const double t_grads = (e.comm.dp - e.comm.dp_params) / bw(l.tp * l.cp * l.dp);
  const double t_params = e.comm.dp_params / bw(l.tp * l.cp * l.dp);
  // Overlap (what is exposed): tensor-parallel all-reduces sit on the critical path and pipeline
  // transfers are counted in full. DP/ZeRO traffic overlaps compute the way current frameworks
  // schedule it (PyTorch DDP/FSDP, Megatron's --overlap-grad-reduce/--overlap-param-gather):
  // gradients reduce bucket by bucket during backward (2/3 of compute) — once, in the last
  // micro-batch's backward, for DP and ZeRO-1; in every micro-batch's backward for ZeRO-2;
  // ZeRO-1/2 gather the updated parameters during the next step's first forward (1/3 of a
  // micro-batch); ZeRO-3 prefetches parameters and reduce-scatters gradients throughout forward
  // and backward. Only what does not fit in its window is exposed.
  const double t_c = rate > 0 ? e.hardware_flops / rate : 0.0;
  const double t_mb = t_c / static_cast<double>(l.microbatches);
  double exposed_dp = 0;
  switch (l.zero) {
    case 0: exposed_dp = std::max(0.0, t_grads - 2.0 / 3.0 * t_mb); break;
    case 1: exposed_dp = std::max(0.0, t_grads - 2.0 / 3.0 * t_mb) + std::max(0.0, t_params - t_mb / 3.0); break;
    case 2: exposed_dp = std::max(0.0, t_grads - 2.0 / 3.0 * t_c) + std::max(0.0, t_params - t_mb / 3.0); break;
    default: exposed_dp = std::max(0.0, t_grads + t_params - t_c); break;
  }
  // Ring attention overlaps each K/V transfer with the attention on the chunk in hand: what
  // outlasts the attention's share of compute is exposed.
  const double attention_share = flops_per_token(m) > 0 ? attention_flops_per_token(m) / flops_per_token(m) : 0.0;
  const double exposed_cp = std::max(0.0, t_cp - attention_share * t_c);
  // Overlapped all-to-alls (MoeOverlap::full) hide behind another micro-batch's compute: what
  // outlasts the step's compute is exposed.
  const double exposed_ep = l.moe_overlap == MoeOverlap::full ? std::max(0.0, t_ep - t_c) : t_ep;
  e.comm_total_seconds = t_tp + t_pp + t_cp + t_ep + t_grads + t_params;
  e.comm_seconds = t_tp + t_pp + exposed_ep + exposed_cp + exposed_dp;
  e.ep_seconds = t_ep;
  e.ep_exposed_seconds = exposed_ep;
  e.dp_seconds = t_grads + t_params;
  e.dp_exposed_seconds = exposed_dp;
  if (l.offload_cpu) {
    // Gradient shard to the host and updated parameter shard back over PCIe, each step, and the
    // optimizer step on the host, bound by host memory bandwidth (kCpuAdamBytesPerParam). Both
    // are exposed: DeepSpeed's offload steps synchronously (ZeRO-Offload's one-step delayed
    // update is opt-in and changes the optimization).
    const StateBytes sb = state_bytes(l.precision, l.optimizer);
    const double shard = param_split(m, l).shard(1.0, true);
    e.cpu_optimizer_seconds = hw.host_mem_bw > 0 ? shard * kCpuAdamBytesPerParam / hw.host_mem_bw : 0.0;
    e.offload_seconds = shard * (sb.grads + sb.params) / hw.host_bw + e.cpu_optimizer_seconds;
  }
  e.step_seconds = e.compute_seconds + e.comm_seconds + e.offload_seconds;
  return e;
}

namespace {

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> d;
  for (int64_t i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}

}  // namespace

std::vector<Estimate> enumerate_layouts(const ModelShape& m, const Layout& base, const Hardware& hw,
                                        int64_t global_batch, const LayoutSearch& search) {
  const int64_t gpus = base.gpus;
  if (gpus < 1) throw_option_error("{gpus}: need at least one GPU, got ", gpus);
  // Without an architecture tp and pp traffic is unknown (it would look free): only asked for.
  const std::vector<int64_t> split = m.is_transformer() ? divisors(gpus) : std::vector<int64_t>{1};
  std::vector<int64_t> tps = search.tp ? std::vector<int64_t>{*search.tp} : split;
  std::vector<int64_t> pps = search.pp ? std::vector<int64_t>{*search.pp} : split;
  // Context parallelism for long sequences only: powers of two that split the sequence in 2 cp.
  std::vector<int64_t> cps = {1};
  if (search.cp) cps = {*search.cp};
  else if (m.is_transformer() && m.seq >= kContextParallelMinSeq)
    for (int64_t c = 2; c <= gpus; c *= 2)
      if (gpus % c == 0 && m.seq % (2 * c) == 0) cps.push_back(c);
  // Expert parallelism for a mixture of experts: every degree that divides the experts and the
  // GPUs (check_layout drops those that do not divide dp).
  std::vector<int64_t> eps = {1};
  if (search.ep) eps = {*search.ep};
  else if (m.is_moe())
    for (int64_t e : divisors(m.experts))
      if (e > 1 && gpus % e == 0) eps.push_back(e);
  std::vector<int64_t> zeros = search.zero ? std::vector<int64_t>{*search.zero} : std::vector<int64_t>{0, 1, 2, 3};
  std::vector<bool> offloads = search.offload ? std::vector<bool>{*search.offload} : std::vector<bool>{false, true};
  std::vector<Recompute> recomputes;
  if (search.recompute) recomputes = {*search.recompute};
  else if (m.is_transformer()) recomputes = {Recompute::none, Recompute::selective, Recompute::full};
  else recomputes = {base.recompute};

  std::vector<Estimate> out, impossible;
  std::set<std::string> impossible_seen;
  for (int64_t tp : tps)
    for (int64_t pp : pps)
    for (int64_t cp : cps)
    for (int64_t ep : eps) {
      const int64_t split_ranks = tp * pp * std::max<int64_t>(cp, 1);
      int64_t dp = 0;
      if (search.dp) dp = *search.dp;
      else if (tp > 0 && pp > 0 && cp > 0 && gpus % split_ranks == 0) dp = gpus / split_ranks;
      auto layout = [&](int64_t zero, bool off, Recompute rc) {
        Layout l = base;
        l.tp = tp;
        l.pp = pp;
        l.cp = cp;
        l.ep = ep;
        l.dp = dp;
        l.zero = zero;
        l.offload_cpu = off;
        l.recompute = rc;
        l.sequence_parallel = tp > 1 && base.sequence_parallel;
        return l;
      };
      if (dp == 0) {
        // Every ZeRO, offload and recompute choice fails alike: the reason is formatted once, and
        // the first choice stands for them (formatting it for each took most of the search).
        std::string why = cp > 1 ? str("tp x pp x cp = ", split_ranks, " does not divide the ", gpus, " GPUs")
                                 : str("tp x pp = ", tp * pp, " does not divide the ", gpus, " GPUs");
        if (impossible_seen.insert(why).second) {
          Estimate e;
          e.layout = layout(zeros.front(), offloads.front(), recomputes.front());
          e.valid = false;
          e.why_not = std::move(why);
          e.step_seconds = std::numeric_limits<double>::infinity();
          impossible.push_back(std::move(e));
        }
        continue;
      }
      for (int64_t zero : zeros)
        for (bool off : offloads)
          for (Recompute rc : recomputes) {
            Estimate e = estimate(m, layout(zero, off, rc), hw, global_batch);
            if (!e.valid) {
              if (impossible_seen.insert(e.why_not).second) impossible.push_back(std::move(e));
              continue;
            }
            out.push_back(std::move(e));
          }
    }
  // Impossible combinations the search generated itself are dropped; when nothing is possible,
  // the fixed choices are to blame and every distinct reason is returned.
  if (out.empty()) out = std::move(impossible);
  auto group = [](const Estimate& e) { return !e.valid ? 2 : (e.fits ? 0 : 1); };
  std::stable_sort(out.begin(), out.end(), [&](const Estimate& a, const Estimate& b) {
    int ga = group(a), gb = group(b);
    if (ga != gb) return ga < gb;
    if (ga == 0) {
      // Faster first; within 0.1% (what the model cannot tell apart) less communication, then
      // less memory.
      const double tol = 1e-3 * std::max(a.step_seconds, b.step_seconds);
      if (std::fabs(a.step_seconds - b.step_seconds) > tol) return a.step_seconds < b.step_seconds;
      if (std::fabs(a.comm_total_seconds - b.comm_total_seconds) > 1e-3 * std::max(a.comm_total_seconds, b.comm_total_seconds))
        return a.comm_total_seconds < b.comm_total_seconds;
      return a.memory.total() < b.memory.total();
    }
    if (ga == 1) return a.memory.total() < b.memory.total();
    return false;
  });
  return out;
}

}  // namespace dl::plan
