// The Llama family (Touvron et al. 2023; Llama 2/3, Mistral, Qwen2, SmolLM, TinyLlama without
// their extras) with explicit forward and backward in GptModel's style: pre-RMSNorm blocks of
// causal self-attention with rotary position embeddings and grouped K/V heads (GQA; MQA with one
// K/V head), a SwiGLU MLP of its own width, no biases anywhere, a final RMSNorm, and an LM head
// tied to the token embedding or (the family's usual) a separate lm_head.weight. Parameters
// carry Hugging Face LlamaForCausalLM's names and nn.Linear's [out, in] layout.
//
// Every layout GptModel runs, the same way (see gpt.hpp): tensor parallel with whole K/V groups
// per rank (q_proj/k_proj/v_proj and gate_proj/up_proj split by output rows, o_proj/down_proj by
// input columns, the embedding, head and loss by vocabulary), pipeline stages, activation
// checkpointing and ZeRO-3's ParamGroupHooks; every local tensor is a slice of the whole one.
#pragma once
#include <optional>
#include <vector>

#include "dl/nn/decoder.hpp"

namespace dl {

struct LlamaConfig {
  int n_layer = 2;
  int n_head = 4;
  int n_kv_head = 2;     // num_key_value_heads: divides n_head
  int n_embd = 64;
  int ffn_hidden = 172;  // intermediate_size
  int block_size = 128;  // the longest sequence (max_position_embeddings)
  int vocab_size = 256;
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  // config.json's rope_scaling: linear divides every frequency by rope_factor; llama3 (Llama
  // 3.1) divides the low frequencies, keeps the high ones and blends those between.
  RopeScaling rope_scaling = RopeScaling::none;
  double rope_factor = 1.0;
  double rope_low_freq_factor = 1.0;
  double rope_high_freq_factor = 4.0;
  int rope_original_max_position = 8192;
  double init_std = 0.02;
  bool tie_embeddings = false;
  // Biases on q_proj, k_proj and v_proj (Qwen2ForCausalLM's; o_proj and the MLP have none).
  bool qkv_bias = false;

  int head_size() const { return n_embd / n_head; }
};

// Parameter count for a config, as LlamaModel declares it (shared with the planner).
int64_t llama_param_count(const LlamaConfig& c);

// The rotary frequencies [head_size / 2] with the config's rope scaling, as transformers
// computes them (its _compute_default_rope_parameters / _compute_linear_... / _compute_llama3_...).
std::vector<float> llama_inv_freq(const LlamaConfig& c);

// The forward state of one Llama block.
struct LlamaActs {
  Tensor xn1, rstd1, qkv, atty, att, residual2, xn2, rstd2, gate, up, hidden;
};

class LlamaModel final : public DecoderModel<LlamaActs> {
 public:
  LlamaModel(const LlamaConfig& config, Backend& backend, DType dtype = DType::f32, GptParallel parallel = {});
  // What one rank of a layout declares, without allocating (as GptModel::declarations).
  static ParamSet declarations(const LlamaConfig& config, const GptParallel& parallel,
                               std::vector<std::pair<size_t, size_t>>* groups = nullptr);
  ModelType type() const override { return ModelType::llama; }
  const LlamaConfig& config() const { return cfg_; }

 private:
  using Acts = LlamaActs;
  struct Layer {  // parameter indices of one block
    size_t in_norm, q, k, v, o, post_norm, gate, up, down;
    std::optional<size_t> bq, bk, bv;  // with qkv_bias
  };
  // A projection's bias and its gradient, or undefined tensors without one.
  Tensor bias(const std::optional<size_t>& b) { return b ? P(*b) : Tensor(); }
  Tensor bias_grad(const std::optional<size_t>& b) { return b ? G(*b) : Tensor(); }
  struct DeclareOnly {};
  LlamaModel(const LlamaConfig& config, Backend& backend, DType dtype, GptParallel parallel, DeclareOnly);
  void declare_params();
  Acts make_acts(int64_t B, int64_t T) override;
  std::vector<const Tensor*> act_tensors(const Acts& a) const override;
  void make_model_scratch(int64_t B, int64_t T) override;
  std::vector<const Tensor*> model_scratch() const override;
  void block_forward(int l, const Tensor& in, Acts& a, Tensor& out) override;
  void block_backward(int l, const Tensor& in, Acts& a) override;
  void embed_forward(Slot& s) override;
  void embed_backward(Slot& s) override;
  void final_norm_forward(Slot& s) override;
  void final_norm_backward(Slot& s, const Tensor& dnormed) override;

  LlamaConfig cfg_;
  // Widths on this rank: query heads x head size, K/V heads x head size, the MLP.
  int64_t Cq_ = 0, Ckv_ = 0, Fl_ = 0;
  int Hl_ = 0, Hkvl_ = 0;  // query and K/V heads on this rank
  size_t norm_ = 0;
  std::vector<Layer> layers_;  // indexed by l - l0
  Tensor inv_freq_;            // f32 [head_size / 2] on the backend's device
  Tensor d3c_, q_, k_, v_, dgate_, dup_, dhidden_;
};

}  // namespace dl
