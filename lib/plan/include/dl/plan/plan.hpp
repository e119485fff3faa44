// The analytic model shared by dl-shard, dl-cost, dl-bench and dl-train: parameter counts,
// training FLOPs per token, memory per rank under each parallel layout, communication volume
// per step, and pipeline bubble. Formulas, assumptions and worked examples: docs/PLANNING.md
// and ../shared/REFERENCE.md.
#pragma once
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dl/config/config.hpp"

namespace dl::plan {

// A block's MLP: GPT-2's two matrices around a GELU (D -> F -> D), or Llama's SwiGLU,
// down(silu(gate x) * up x) with three matrices (gate and up D -> F, down F -> D).
enum class MlpKind { gelu, swiglu };
// LayerNorm (weight and bias: 2D parameters) or RMSNorm (weight only: D).
enum class NormKind { layernorm, rmsnorm };
// The families whose defaults --arch sets (see with_family).
enum class Family { gpt, llama };
inline constexpr std::string_view kFamilyNames[] = {"gpt", "llama"};
constexpr std::span<const std::string_view> choice_names(Family) { return kFamilyNames; }

// A transformer (or any model reduced to a parameter count) as the planner sees it.
struct ModelShape {
  std::string name;       // "gpt2-124m", a config path, or "7.5e9 params"
  double params = 0;      // psi: trainable parameters
  // Architecture (0 when unknown: memory and FLOPs then use only `params`).
  int64_t n_layer = 0, hidden = 0, heads = 0, seq = 0, vocab = 0;
  std::optional<ModelType> type = ModelType::gpt;  // nullopt: a bare parameter count (--params)
  std::string note;          // where the count came from, when that needs saying ({params}: an option)
  // Korthikanti et al.'s activation constants count dropout masks and dropout outputs; a model
  // trained without dropout (dl-train's GPT) stores less: see activation_bytes_per_layer.
  bool dropout = true;
  // The LM head is the token embedding (GPT-2); false: a separate V x D lm_head, counted in
  // `params` and held by the last pipeline stage instead of a copy of the embedding.
  bool tied_head = true;
  // Attention and MLP widths (0: the defaults kv_heads() and ffn() give) and the block's kinds;
  // the defaults are GPT-2's, with_family(m, Family::llama) sets Llama's.
  int64_t kv_heads = 0;    // K/V heads (grouped-query attention; 1: multi-query); 0: = heads
  // Attention keeps K and V repeated to every query head (dl-train's LlamaModel packs q, k and v
  // into one [B, T, 3D] tensor for its attention op, as transformers' repeat_kv does); false:
  // at the K/V heads' width (Megatron-LM, FlashAttention's native GQA).
  bool kv_repeated = false;
  int64_t ffn_hidden = 0;  // the MLP's inner width F; 0: 4D for gelu, swiglu_hidden(D) for swiglu
  Family family = Family::gpt;
  MlpKind mlp = MlpKind::gelu;
  NormKind norm = NormKind::layernorm;
  bool qkv_bias = true;    // biases on the q, k and v projections (GPT-2, Qwen2)
  bool proj_bias = true;   // on the attention output projection
  bool mlp_bias = true;    // on the MLP's matrices
  bool learned_positions = true;  // a T x D position table (GPT-2); false: rotary (no parameters)
  // Mixture of experts (Mixtral, Qwen-MoE, DeepSeek-V2/V3, OLMoE): the MLP of each of the last
  // n_layer - dense_layers blocks is `experts` routed experts (each an MLP of width expert_ffn,
  // 0: ffn()), of which a router (D x experts, no bias) sends each token to the top
  // `active_experts`, plus `shared_experts` experts of width shared_expert_ffn (0: expert_ffn)
  // every token passes through. experts 0: a dense model. The first dense_layers blocks keep a
  // dense MLP of width ffn() (DeepSeek-V3: 3 of width 18432).
  int64_t experts = 0, active_experts = 0, expert_ffn = 0, shared_experts = 0, shared_expert_ffn = 0, dense_layers = 0;
  // Tokens an expert takes per micro-batch as a multiple of its fair share (tokens x
  // active_experts / experts): the routed tokens' activations and all-to-all volume scale with it.
  double capacity_factor = 1.0;
  // Node-limited routing (DeepSeek-V3's M = 4, arXiv 2412.19437 section 2.1.2): the router sends
  // each token to experts on at most this many nodes, so when the experts span nodes at most
  // min(active_experts, moe_max_nodes) copies of it cross the fabric (one per node, forwarded to
  // the node's experts over NVLink). 0: unlimited (every routed copy crosses as its expert's rank).
  int64_t moe_max_nodes = 0;
  bool is_moe() const { return experts > 0; }
  int64_t moe_layers() const { return is_moe() ? std::max<int64_t>(0, n_layer - dense_layers) : 0; }
  int64_t expert_width() const { return expert_ffn > 0 ? expert_ffn : ffn(); }
  int64_t shared_width() const { return shared_expert_ffn > 0 ? shared_expert_ffn : expert_width(); }
  bool is_transformer() const { return n_layer > 0 && hidden > 0 && heads > 0 && seq > 0; }
  int64_t kv() const { return kv_heads > 0 ? kv_heads : heads; }
  int64_t ffn() const;
  // K/V projection width as a fraction of D: KV x head_dim / D = KV / heads (1 without GQA).
  double kv_fraction() const { return heads > 0 ? static_cast<double>(kv()) / static_cast<double>(heads) : 1.0; }
};

// Meta's SwiGLU width for a Llama of width D without an explicit size (facebookresearch/llama
// model.py: 2/3 of 4D, rounded up to a multiple of 256): 4096 -> 11008, 2048 -> 5632.
int64_t swiglu_hidden(int64_t hidden);
// The family's block: gpt -> GELU MLP, LayerNorm, biases, learned positions, tied head, dropout
// as Korthikanti et al. count it; llama -> SwiGLU, RMSNorm, no biases, rotary, untied head, no
// dropout (transformers' LlamaConfig: attention_dropout 0).
ModelShape with_family(ModelShape m, Family f);
// "gpt" | "llama"; a usage error naming {arch} otherwise.
Family parse_family(const std::string& s);

// Parameters of a transformer shape (n_layer, hidden, heads and vocab known; seq too with
// learned positions): V D + [T D] + L (attention + MLP + 2 norms) + final norm + [untied V D]
// (REFERENCE.md "Model arithmetic" and "Llama-family arithmetic"). GPT-2 124M: 124,439,808;
// Llama 3 8B: 8,030,261,248. A mixture of experts: dense_layers dense blocks and moe_layers() MoE
// blocks (block_param_count).
double transformer_param_count(const ModelShape& m);
// One block's parameters (attention with its K/V width, the MLP's 2 or 3 matrices, norms, biases;
// for a mixture of experts a MoE block's: the router, every routed and shared expert).
double block_param_count(const ModelShape& m);
// What differs from GPT-2's block, for notes: " KV=8 F=14336 llama (SwiGLU, RMSNorm, rotary)
// untied head"; "" for GPT-2's.
std::string describe_block(const ModelShape& m);

// From a dl-train config: the same parameter count dl-train reports, to the parameter.
// gpt: gpt_param_count of the [model] section. llama: llama_param_count, and the llama block
// (with_family llama; kv_heads and ffn_hidden as llama_config_from resolves them, tied_head from
// model.tie_embeddings), so activations follow the llama formulas; with model.n_experts a llama
// mixture of experts (planning only: dl-train refuses it), counted by transformer_param_count and
// its keys checked together (usage errors naming `name` and the keys). mlp: the input width and the class count come from
// the data, so the training data is opened (dl::open_datasets) to read them; its errors (missing
// file, bad CSV) are usage errors naming the file.
ModelShape model_from_config(const Config& config, const std::string& name = "");
// How far a rounded --params may be from what the architecture hints need: within it the
// hints' count is used (and ModelShape::note says so), beyond it the hints or the count are wrong.
inline constexpr double kParamsRounding = 0.05;
// The largest value one model dimension (a width, a count of layers, heads or experts, the vocabulary,
// the sequence length) may take: 2^30. Products of a few dimensions then stay inside int64; a larger
// value is an input error, refused by the readers below before anything is counted.
inline constexpr int64_t kMaxModelDimension = int64_t{1} << 30;
// The largest model planned is kMaxModelParameters (dl/config/config.hpp), as for a dl-train config.
// From --params with optional architecture hints (0 = unknown). Throws a usage error when the
// hints alone need more than `params` x (1 + kParamsRounding) (L x (12 D^2 + 13 D) + embeddings).
// Within that, and with complete hints (--vocab and --seq) also above, the count is the hints'
// exact one: "124M" with GPT-2 small's hints plans its 124,439,808 parameters.
ModelShape model_from_params(double params, int64_t n_layer = 0, int64_t hidden = 0, int64_t heads = 0,
                             int64_t seq = 0, int64_t vocab = 0);
// The same with the hints' architecture: `hints` carries n_layer, hidden, heads, seq, vocab (0:
// unknown) and the block (kv_heads, ffn_hidden, family kinds, biases, tied_head); the check and
// the exact count use its blocks' parameters (grouped K/V, SwiGLU's three matrices, an untied head).
ModelShape model_from_params(double params, const ModelShape& hints);
// m with n_layer, hidden, heads, seq and vocab set.
ModelShape with_dims(ModelShape m, int64_t n_layer, int64_t hidden, int64_t heads, int64_t seq, int64_t vocab);

// What --arch, --kv-heads, --ffn-hidden, --untied-head and --hf-config say about a model, beside
// --params and --layers --hidden --heads --seq --vocab.
struct ArchHints {
  std::string family;       // --arch: "gpt" | "llama" ("": gpt)
  int64_t kv_heads = 0;     // --kv-heads
  int64_t ffn_hidden = 0;   // --ffn-hidden
  bool untied_head = false; // --untied-head
  std::string hf_config;    // --hf-config: a Hugging Face config.json
  // Mixture of experts (ModelShape's fields of the same names): --experts, --active-experts,
  // --expert-ffn, --shared-experts, --dense-layers, --capacity-factor.
  std::optional<int64_t> experts;  // given: a mixture of experts (0 is then an error, not a dense model)
  int64_t active_experts = 0, expert_ffn = 0, shared_experts = 0, dense_layers = 0;
  std::optional<double> capacity_factor;
  int64_t moe_max_nodes = 0;  // --moe-max-nodes (ModelShape::moe_max_nodes; 0: unlimited)
  bool moe_given() const {
    return experts || active_experts || expert_ffn || shared_experts || dense_layers || capacity_factor || moe_max_nodes;
  }
  bool any() const { return !family.empty() || kv_heads || ffn_hidden || untied_head || !hf_config.empty() || moe_given(); }
};
// Checks the mixture-of-experts fields of a shape with an architecture (usage errors naming
// {experts}, {active_experts}, {expert_ffn}, {shared_experts}, {dense_layers}, {capacity_factor},
// {moe_max_nodes}).
void check_moe(const ModelShape& m);
// The model's parameters one token passes through: all but the routed experts the router does
// not pick (n_layer - dense_layers) x (experts - active_experts) x one expert's parameters;
// m.params for a dense model. FLOPs per token count these (6 N_active + attention).
double active_param_count(const ModelShape& m);
// One routed expert's parameters (the MLP at expert_width()); 0 for a dense model.
double expert_param_count(const ModelShape& m);
// "671B total, 37B active" for a mixture of experts; "" for a dense model.
std::string describe_moe_params(const ModelShape& m);
// The model the flags describe: --hf-config's (with --seq, default its max_position_embeddings;
// --params must then be absent), else model_from_params(params, hints of the family). Usage
// errors name the flags ({kv_heads}, {ffn_hidden}, {hf_config}, ...).
ModelShape model_from_hints(std::optional<double> params, int64_t n_layer, int64_t hidden, int64_t heads, int64_t seq,
                            int64_t vocab, const ArchHints& arch);
// A Hugging Face config.json of LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM or
// GPT2LMHeadModel, or of the mixtures of experts MixtralForCausalLM, Qwen2MoeForCausalLM,
// Qwen3MoeForCausalLM, DeepseekV2ForCausalLM, DeepseekV3ForCausalLM and OlmoeForCausalLM, as a
// shape (seq 0: max_position_embeddings / n_positions). DeepSeek's multi-head latent attention is
// planned as standard attention of the same heads and width (said in the note). Other
// architectures, expert or routing keys the family's reader does not take, MoE only in some
// layers, sliding-window fields, a head_dim other than hidden / heads and an activation other
// than the family's are usage errors naming the file and the key.
ModelShape model_from_hf_config(const std::string& config_json, int64_t seq = 0);

// A dl-train config as the planner reads it: the Config (train, parallel, optim sections) as
// load_config reads it (with the --set overrides; errors name file:line and the key) and the
// model as model_from_config builds it (named `name`, default the file's name).
struct PlanConfig {
  Config config;
  ModelShape model;
};
PlanConfig load_plan_config(const std::string& path, const std::vector<std::string>& sets, const std::string& name = "");

enum class FlopFormula {
  palm,  // 6N + 12 L H Q T (PaLM, Chowdhery et al. 2022, appendix B)
  llmc,  // 6N + 6 L D T (llm.c: causal attention counted at half)
};
inline constexpr std::string_view kFlopFormulaNames[] = {"palm", "llmc"};
constexpr std::span<const std::string_view> choice_names(FlopFormula) { return kFlopFormulaNames; }
inline constexpr ChoiceAlias<FlopFormula> kFlopFormulaAliases[] = {{"llm.c", FlopFormula::llmc}};
constexpr std::span<const ChoiceAlias<FlopFormula>> choice_aliases(FlopFormula) { return kFlopFormulaAliases; }
std::string flop_formula_name(FlopFormula f);
// 124439808 -> "124,439,808".
std::string group_digits(double v);  // "6N+12LHQT (PaLM)" / "6N+6LDT (llm.c)"
FlopFormula parse_flop_formula(const std::string& s);  // "palm" | "llmc"; usage error otherwise
// Training FLOPs per token (forward + backward). Without an architecture: 6N. N is
// active_param_count(m): a mixture of experts' tokens compute with their top-k experts only.
double flops_per_token(const ModelShape& m, FlopFormula f = FlopFormula::palm);
// The attention-score part of flops_per_token (12LDT or 6LDT; 0 without an architecture).
double attention_flops_per_token(const ModelShape& m, FlopFormula f = FlopFormula::palm);

enum class Recompute { none, selective, full };
inline constexpr std::string_view kRecomputeNames[] = {"none", "selective", "full"};
constexpr std::span<const std::string_view> choice_names(Recompute) { return kRecomputeNames; }
std::string recompute_name(Recompute r);       // "none" | "selective" | "full"
Recompute parse_recompute(const std::string& s);  // usage error listing the choices

// How attention keeps what its backward needs (see activation_bytes_per_layer).
enum class Attention {
  materialized,  // the T x T softmax probabilities per head (Korthikanti et al.; dl-train's CPU backend)
  flash,         // FlashAttention-style: only a log-sum-exp state per row per head (dl-train's
                 // CUDA kernels, PyTorch SDPA/FlashAttention); the scores are recomputed in backward
};
inline constexpr std::string_view kAttentionNames[] = {"materialized", "flash"};
constexpr std::span<const std::string_view> choice_names(Attention) { return kAttentionNames; }
std::string attention_name(Attention a);          // "materialized" | "flash"
Attention parse_attention(const std::string& s);  // usage error naming --attention and the choices
// The attention dl-train runs for a config's train.device: "cpu" -> materialized; "cuda" and
// "auto" (the GPU whenever one is usable, which is what a per-GPU plan is about) -> flash.
Attention attention_for_device(Choice<DeviceChoice> device);

// Whether a mixture of experts' all-to-alls overlap computation. none: on the critical path, the
// experts wait for their tokens and the next layer for the combine (a plain 1F1B schedule). full:
// hidden behind the computation of another micro-batch (DeepSeek-V3's DualPipe, Megatron-Core's
// --overlap-moe-expert-parallel-comm with its 1F1B A2A overlap): only what outlasts the step's
// compute is exposed.
enum class MoeOverlap { none, full };
inline constexpr std::string_view kMoeOverlapNames[] = {"none", "full"};
constexpr std::span<const std::string_view> choice_names(MoeOverlap) { return kMoeOverlapNames; }
MoeOverlap parse_moe_overlap(const std::string& s);  // usage error naming {moe_overlap} and the choices

struct Layout {
  int64_t gpus = 1;            // world size
  int64_t gpus_per_node = 8;
  int64_t dp = 1, tp = 1, pp = 1;
  // Context parallelism (Megatron-LM's --context-parallel-size, ring attention): each of cp ranks
  // holds seq / cp of every sequence; K and V travel the ring. dp x tp x pp x cp = gpus; ZeRO
  // shards and gradients reduce over dp x cp.
  int64_t cp = 1;
  // Expert parallelism (Megatron-LM's --expert-model-parallel-size, DeepSpeed-MoE's ep_size): a
  // mixture of experts' routed experts are sharded over ep ranks of the data-parallel group
  // (ep divides dp and the experts); each rank holds experts / ep of them, and two all-to-alls
  // per MoE layer move the routed tokens to their experts and back. Dense parts are as without ep.
  int64_t ep = 1;
  MoeOverlap moe_overlap = MoeOverlap::none;  // the all-to-alls' overlap with compute
  // Pipeline stages of unequal depth: pp need not divide the layers (nor the layers + 2); each
  // stage holds at most ceil(L / pp) blocks (Megatron-LM's --decoder-first/last-pipeline-num-layers,
  // DeepSeek-V3's 61 layers on 16 stages). Off: the even splits stage_blocks names.
  bool uneven_stages = false;
  int64_t zero = 0;            // 0..3
  bool offload_cpu = false;    // optimizer state (and its step) on the host; needs zero >= 1
  int64_t micro_batch = 1;     // sequences per micro-batch per rank
  int64_t microbatches = 1;    // micro-batches per step per data-parallel replica (pipeline
                               // micro-batches, or gradient accumulation without pp)
  Choice<Precision> precision = Precision::bf16;  // bf16 | fp16: mixed precision; fp32: all fp32
  Choice<StateOptimizer> optimizer = StateOptimizer::adamw;  // see state_bytes
  Choice<PipelineSchedule> schedule = PipelineSchedule::one_f_one_b;
  Recompute recompute = Recompute::none;
  // The library's default is the published formula; dl-shard picks flash for GPU runs
  // (PlanInputs::attention).
  Attention attention = Attention::materialized;
  // Sequence parallelism with tp > 1 (Korthikanti et al. 2022 section 4.2.2; Megatron-LM's
  // --sequence-parallel): the activations tensor parallelism leaves whole (LayerNorm and dropout
  // inputs, the residual) are split t ways along the sequence too; each all-reduce becomes a
  // reduce-scatter and an all-gather of the same volume. dl-train does not run it (false for its
  // configs); recommend uses it wherever it uses tp for a bare model (PlanInputs).
  bool sequence_parallel = false;
  // "dp=8 tp=1 pp=1 zero=3 offload=cpu recompute=none mb=1", plus " attention=flash" when flash
  // and " sp" with sequence parallelism.
  std::string describe() const;
};

// Bytes per parameter of each model-state kind for a precision (ZeRO paper: 2 + 2 + K=12 for
// mixed-precision Adam; 4 + 4 + 8 for fp32 Adam: weights, grads, exp_avg + exp_avg_sq).
// SGD: momentum buffer 4 bytes (none without momentum), plus the fp32 master copy (4) in mixed
// precision.
struct StateBytes {
  double params = 2, grads = 2, optimizer = 12;
  double total() const { return params + grads + optimizer; }
};
StateBytes state_bytes(Precision precision, StateOptimizer optimizer = StateOptimizer::adamw);
// From the names --precision and --optimizer take ("adam" is adamw): unknown ones are usage errors.
StateBytes state_bytes(std::string_view precision, std::string_view optimizer = "adamw");
// --precision's value: bf16, fp16, fp32 or fp8, else a usage error "unknown precision 'fp4' (...)".
Precision parse_precision(std::string_view name);
// --optimizer's value: adamw (or adam), sgd-momentum or sgd, else a usage error.
StateOptimizer parse_optimizer(std::string_view name);
// The state_bytes() optimizer of a config's [optim]: adamw, sgd-momentum or sgd.
StateOptimizer optimizer_state(const OptimConfig& optim);
// Bytes of one activation value: 2 for bf16/fp16, 4 for fp32; 2 for fp8 (Transformer Engine
// saves most activations in bf16; the FP8 casts of GEMM inputs are not counted as savings).
double activation_value_bytes(Precision precision);
double activation_value_bytes(std::string_view precision);

// Memory per rank. All in bytes.
struct MemoryBreakdown {
  double params = 0, grads = 0, optimizer = 0;  // model states on the GPU
  double activations = 0;       // for one micro-batch in flight (x in-flight micro-batches for pp)
  double comm_buffers = 0;      // gradient buckets, gathered ZeRO-3 layers, pipeline send/recv
  double overhead = 0;          // stated allowance: CUDA context, allocator fragmentation, workspace
  double host_offload = 0;      // per rank, moved to host memory by offload (not in total())
  double total() const { return params + grads + optimizer + activations + comm_buffers + overhead; }
  double model_states() const { return params + grads + optimizer; }
};

// Fixed allowance for framework overhead per GPU (context, cuBLAS workspace, fragmentation).
inline constexpr double kOverheadBytes = 2.0e9;

// Parameters held by the busiest rank before ZeRO sharding: psi / (tp x pp) for a bare count;
// for a transformer the heaviest pipeline stage (embeddings on the first, the LM head on the
// last when pp > 1: a copy of the tied embedding or the untied lm_head) with Megatron-style tensor-parallel splits (matrices, their
// column-parallel biases and the vocabulary split t ways; LayerNorms, row-parallel biases and
// position embeddings replicated).
double params_per_rank(const ModelShape& m, int64_t tp, int64_t pp);
// Of params_per_rank, the routed experts' parameters (split t ways, before the ep sharding): the
// part memory_per_rank divides by ep and shards with ZeRO over the dp x cp / ep ranks that hold
// the same experts (Megatron-LM's expert-data-parallel group). 0 for a dense model.
double expert_params_per_rank(const ModelShape& m, int64_t tp, int64_t pp);

// Transformer blocks on the first, a middle and the last pipeline stage. pp | L: L/pp each.
// Otherwise, when pp | L + 2, the embedding and the LM head count as one layer each, as BLOOM
// (Megatron-DeepSpeed: 70 blocks + 2 on 12 stages, 6 each) and Megatron-LM's
// --account-for-embedding/loss-in-pipeline-split count them: (L + 2)/pp - 1 blocks on the first
// and the last stage, (L + 2)/pp on the others. Neither (Layout::uneven_stages): ceil(L / pp) on
// every stage, the busiest stage's count.
struct StageBlocks {
  int64_t first = 0, middle = 0, last = 0;
  int64_t most() const { return std::max(first, std::max(middle, last)); }
};
StageBlocks stage_blocks(int64_t n_layer, int64_t pp);

// Model states (params, grads, optimizer; host_offload for offload) plus activations, comm
// buffers and kOverheadBytes. Uses l.microbatches for the in-flight count of a pipeline.
MemoryBreakdown memory_per_rank(const ModelShape& m, const Layout& l);

// ZeRO model-state bytes per rank for psi parameters over nd data-parallel ranks (the table in
// REFERENCE.md): stage 0 (2+2+K) psi, 1: 4 psi + K psi/nd, 2: 2 psi + (2+K) psi/nd, 3: 16 psi/nd.
double zero_model_state_bytes(double psi, int64_t nd, int64_t zero, const StateBytes& b = {});

// Activation bytes per transformer layer for one micro-batch (Korthikanti et al. 2022):
// s*b*h*(34 + 5*a*s/h) with 16-bit activations and no recompute; with tensor parallel t:
// s*b*h*(10 + 24/t + 5*a*s/(h*t)); selective recompute drops the 5as/(ht) attention term;
// full recompute keeps the layer input, 2*s*b*h. `bytes_per_value` scales the 16-bit formula
// (2 -> as published, 4 -> fp32 activations). 0 without an architecture. Without dropout
// (m.dropout false) the two 1-byte masks and the attention-dropout output are not stored:
// s*b*h*(8 + 24/t + 2*a*s/(h*t)), selective s*b*h*(8 + 24/t).
// The 24 is GPT-2's t-way split part, Q, K, V, the projection input (8) and GELU's input and
// output at F = 4h (16); in general 4 + 4 KV/heads + 2 x (2 for GELU, 3 for SwiGLU) x F/h
// (4 + 4 + ... when m.kv_repeated: K and V at the query heads' width).
// Flash attention (recompute none) replaces the scores term by the log-sum-exp state: 2 values
// per row per head, 2*a*s*b/t values of bytes_per_value each (dl-train's CUDA backend allocates
// attention_state_shape = [B, H, 2T] of the model dtype); selective recompute is the same for
// both (the recomputed forward rebuilds the state); full recompute keeps the layer input.
// Sequence parallelism (sequence_parallel, with tp > 1) divides the whole-width terms by t too:
// s*b*h*(10 + 24)/t + the scores term (Korthikanti et al. section 4.2.2).
double activation_bytes_per_layer(const ModelShape& m, int64_t micro_batch, int64_t tp, Recompute r,
                                  double bytes_per_value = 2.0, Attention attention = Attention::materialized,
                                  bool sequence_parallel = false);

// Activations of the busiest pipeline stage for the layout (under l.recompute and l.attention):
// layers per stage x per-layer bytes x micro-batches in flight (1 without pp; 1F1B:
// min(pp, microbatches); GPipe: microbatches), plus one layer's full activations under full
// recompute, plus a backward working set of s*b*h*(2 + 8/t) values (activation gradients in
// flight; SwiGLU: 3 + (2 + 2R + 2 KV/heads + 3F/h)/t, R = 1 when m.kv_repeated else KV/heads:
// the block's output, the q/k/v projections and their gradient beside SwiGLU's), plus the output layer (final LayerNorm and LM-head inputs 4sbh and the logits, sbV/t values of the activation dtype)
// on the last stage.
double activation_bytes(const ModelShape& m, const Layout& l);

// Communication per step per rank, in bytes sent (the ring algorithms' volume).
struct CommVolume {
  double dp = 0;        // DP / ZeRO gradient (and parameter) traffic: 2 psi, ZeRO-3 3 psi (scaled)
  double dp_params = 0; // of which parameter all-gathers (ZeRO 1..3); the rest reduces gradients
  double tp = 0;        // tensor-parallel all-reduces: per layer 2 forward + 2 backward of s*b*h
  double pp = 0;        // point-to-point activations and gradients between stages
  double cp = 0;        // context parallelism: K/V chunks around the ring (forward), K/V and their gradients (backward)
  double ep = 0;        // expert parallelism: per MoE layer 2 all-to-alls forward (dispatch, combine), 2 backward
  // Of ep, the bytes that cross the fabric under node-limited routing (ModelShape::moe_max_nodes
  // with ep spanning nodes); the rest is forwarded over NVLink. 0: all of ep goes at the ep
  // group's bandwidth (the fabric once it spans nodes).
  double ep_fabric = 0;
  double total() const { return dp + tp + pp + cp + ep; }
};
CommVolume comm_per_rank(const ModelShape& m, const Layout& l);
// Bytes one rank sends in one all-to-all of a MoE layer for one micro-batch: the tokens it
// routes (seq / cp x micro-batch x active_experts x capacity_factor) x hidden x activation bytes
// x (ep - 1) / ep (the share bound for other ranks' experts). 0 without ep.
double all_to_all_bytes(const ModelShape& m, const Layout& l);
// Of one all-to-all, the bytes one rank sends across nodes under node-limited routing: with
// m.moe_max_nodes > 0 and the ep group (tp x cp x ep ranks) spanning n > 1 nodes, each token's
// min(active_experts, moe_max_nodes) x capacity_factor copies x hidden x activation bytes x
// (n - 1) / n. 0 otherwise (then all of all_to_all_bytes goes at the group's bandwidth).
double all_to_all_fabric_bytes(const ModelShape& m, const Layout& l);
// Bytes per value of a forward dispatch: 1 when training in fp8 (DeepSeek-V3 quantizes the
// tokens before the dispatch), else the activation bytes; the combine and both backward
// all-to-alls keep the activation bytes (bf16).
double dispatch_value_bytes(Precision precision);
// How the layout's all-to-alls are priced, for notes and --explain ({moe_max_nodes} and
// {moe_overlap} name the options): the dispatch's bytes, the node limit, the overlap.
std::string describe_all_to_all(const ModelShape& m, const Layout& l);

// Pipeline bubble fraction (GPipe and 1F1B): (p - 1) / (m + p - 1).
double bubble_fraction(int64_t pp, int64_t microbatches);

// Hardware the step-time estimate assumes: datasheet values, or measured (dl-bench --format json).
struct Hardware {
  std::string gpu_model;          // "H100-SXM", ...
  double gpu_mem_bytes = 80e9;
  double peak_flops = 989e12;     // dense, at the training precision
  double achievable_fraction = 0.45;  // MFU assumed for compute time (dl-shard: plan::calibrated_mfu)
  double intra_node_bw = 450e9;   // bytes/s per GPU (NVLink busbw)
  double inter_node_bw = 50e9;    // bytes/s per GPU (InfiniBand/Ethernet)
  double host_bw = 25e9;          // bytes/s per GPU to host memory (offload)
  // Host DRAM bandwidth per GPU for a CPU optimizer step (offload): a two-socket node's ~200 GB/s
  // achievable (DDR4/DDR5, 8+ channels a socket) shared by its 8 GPUs' optimizer shards.
  double host_mem_bw = 25e9;
  std::string source = "datasheet";  // where peak_flops and bandwidths come from
};

struct Estimate {
  Layout layout;                 // microbatches as derived from the global batch
  MemoryBreakdown memory;
  CommVolume comm;
  double bubble = 0;
  bool valid = true;             // false: the layout is impossible (why_not says which constraint)
  bool fits = false;
  double headroom = 0;           // gpu_mem - total (negative when it does not fit)
  double step_seconds = 0;       // compute (stretched by the bubble) + exposed comm + offload traffic
  double compute_seconds = 0;    // including the bubble
  double comm_seconds = 0;       // exposed: what overlap with compute does not hide
  double comm_total_seconds = 0; // all communication time, overlapped or not
  // Data parallelism's share: its gradient and parameter traffic (reduce-scatter/all-reduce,
  // all-gather) and what of it the backward/forward window does not hide. With a fixed global
  // batch more GPUs mean fewer micro-batches per replica, the same traffic per step and a smaller
  // window: the exposed part grows (DP efficiency = compute / (compute + dp_exposed_seconds)).
  double dp_seconds = 0;
  double dp_exposed_seconds = 0;
  // The MoE all-to-alls (expert parallelism): their time and what of it is exposed (all of it
  // with MoeOverlap::none; with full, what outlasts the step's compute).
  double ep_seconds = 0;
  double ep_exposed_seconds = 0;
  double offload_seconds = 0;    // PCIe traffic + the CPU optimizer step (offload)
  double cpu_optimizer_seconds = 0;  // of which the host's optimizer step
  double model_flops = 0;        // per step, flops_per_token x tokens (MFU's numerator)
  double hardware_flops = 0;     // per step including recompute
  std::string why_not;           // when it does not fit or the layout is impossible
  std::string passed_over;       // recommend: why a fitting layout is not the recommended one
};

// Context parallelism is searched for sequences at least this long (Megatron-LM's guidance:
// long-context training, 8K and up), in powers of two with seq divisible by 2 cp (causal
// load balancing: each rank takes two chunks).
inline constexpr int64_t kContextParallelMinSeq = 8192;

// Bytes of host memory a CPU optimizer step reads and writes per parameter of its shard
// (DeepSpeed's CPU-Adam is bound by host memory bandwidth): the fp32 master weight, exp_avg and
// exp_avg_sq read and written (24), the 16-bit gradient read and the 16-bit weight written (4).
inline constexpr double kCpuAdamBytesPerParam = 28;

// Why a layout is impossible for the model and global batch ("" when it is possible):
// dp x tp x pp != gpus, tp does not divide heads, tp > gpus_per_node, pp divides neither the
// layers nor the layers + 2 (stage_blocks; with uneven_stages: pp more than the layers),
// zero outside 0..3, offload without ZeRO, a global batch not a multiple of dp x micro-batch,
// tp or pp for an mlp.
std::string check_layout(const ModelShape& m, const Layout& l, int64_t global_batch);

// One layout for a model with a given global batch (sequences per step; 0: dp x micro_batch x
// l.microbatches). Never throws for an impossible layout: valid = false and why_not say why.
Estimate estimate(const ModelShape& m, const Layout& l, const Hardware& hw, int64_t global_batch);

// Which layout dimensions enumerate_layouts may vary; a set field is fixed to that value (and a
// value that makes every layout impossible is explained rather than dropped).
struct LayoutSearch {
  std::optional<int64_t> dp, tp, pp, cp, ep, zero;
  std::optional<bool> offload;
  std::optional<Recompute> recompute;
};

// Every valid layout for `gpus` GPUs (dp x tp x pp = gpus with tp | heads, tp <= gpus_per_node,
// pp | n_layer; tp and pp only for a transformer unless fixed, as their traffic needs its shape; zero 0..3; offload on/off with zero >= 1; recompute none/selective/full for a
// transformer; sequence parallelism with tp > 1 when base.sequence_parallel; for a mixture of
// experts ep over the divisors of the experts that divide the GPUs and dp), minus the
// dimensions `search` fixes, estimated and sorted: fitting layouts by
// step time, then the rest by how much memory they need. Impossible combinations are dropped;
// when no combination is possible (the fixed choices rule them all out), the result is instead
// one invalid Estimate per distinct reason. `base` supplies gpus, gpus_per_node, micro_batch,
// precision, optimizer and schedule.
std::vector<Estimate> enumerate_layouts(const ModelShape& m, const Layout& base, const Hardware& hw,
                                        int64_t global_batch, const LayoutSearch& search = {});

}  // namespace dl::plan
