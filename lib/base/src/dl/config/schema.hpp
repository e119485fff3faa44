// The one declaration list of every config key: visit_config() calls
//   v(section, key, field, spec)
// for each field of a Config, in the order the sections and keys appear in a dumped config.
// The field's C++ type gives the TOML type (int64_t: integer, double: float, bool, std::string,
// std::vector<int64_t>: array of integers, Choice<E>: a string naming one of E's values, listed in
// choice.hpp); the Spec gives help text and constraints.
// Loading, --set overrides, validation, config_to_toml() and config_key_docs() all walk this
// list, so a new key is one line here plus its field (with default) in config.hpp.
//
// Internal to dl/config and its tests: the rest of the library uses config.hpp.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string_view>
#include <vector>

#include "dl/config/config.hpp"

namespace dl::config_schema {

// Help text and constraints of one key, built by chaining: help("...").min(1).
struct Spec {
  std::string_view help;
  // numbers (and every element of an int array): lo <= x <= hi, or lo < x / x < hi when open
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false;
  bool hi_open = false;
  bool source = false;     // strings: a data source "synthetic:NAME" | "text:PATH" | "tokens:GLOB" | "csv:PATH"
  bool tokenizer = false;  // strings: "bytes" | "gpt2:DIR"
  bool may_be_empty = false;  // strings: "" is allowed (an optional source); arrays: [] is allowed
  bool auto_int = false;   // ints: the TOML may say "auto", stored as -1 (and -1 itself is accepted)
  bool folder = false;     // strings: a folder that must exist; relative paths resolve like data paths

  Spec& min(double v) { lo = v, lo_open = false; return *this; }    // x >= v
  Spec& above(double v) { lo = v, lo_open = true; return *this; }   // x > v
  Spec& max(double v) { hi = v, hi_open = false; return *this; }    // x <= v
  Spec& below(double v) { hi = v, hi_open = true; return *this; }   // x < v
  Spec& data_source() { source = true; return *this; }
  Spec& tokenizer_spec() { tokenizer = true; return *this; }
  Spec& optional() { may_be_empty = true; return *this; }
  Spec& or_auto() { auto_int = true; return *this; }
  Spec& existing_folder() { folder = true; return *this; }

  bool has_range() const { return lo > -std::numeric_limits<double>::infinity() || hi < std::numeric_limits<double>::infinity(); }
};

inline Spec help(std::string_view text) {
  Spec s;
  s.help = text;
  return s;
}

// Model sizes are held as int by the models: keep them in range.
inline constexpr double kIntMax = 2147483647.0;
// Experts per layer: up to 2^20 (He 2024's PEER routes among a million); more would only let a
// config describe a model past kMaxModelParameters.
inline constexpr double kMaxExperts = 1048576.0;

// The list. Works on const and non-const Configs (C is Config or const Config).
template <class C, class V>
void visit_config(C& c, V&& v) {
  // [model]
  v("model", "type", c.model.type, help("model family: a GPT-2 style decoder, a multi-layer perceptron classifier, or a Llama-family decoder (RMSNorm, RoPE, SwiGLU, grouped-query attention, no biases but model.qkv_bias)"));
  v("model", "n_layer", c.model.n_layer, help("gpt, llama: number of transformer blocks").min(1).max(kIntMax));
  v("model", "n_head", c.model.n_head, help("gpt, llama: attention heads per block; must divide model.n_embd").min(1).max(kIntMax));
  v("model", "n_embd", c.model.n_embd, help("gpt, llama: embedding (residual stream) width").min(1).max(kIntMax));
  v("model", "block_size", c.model.block_size, help("gpt, llama: training sequence length and size of the position table").min(1).max(kIntMax));
  v("model", "vocab_size", c.model.vocab_size, help("gpt, llama: vocabulary size (token ids 0 .. vocab_size-1)").min(2).max(kIntMax));
  v("model", "init_std", c.model.init_std, help("gpt, llama: initial weights ~ N(0, init_std); mlp layers use Kaiming normal").min(0));
  v("model", "tie_embeddings", c.model.tie_embeddings, help("gpt, llama: the LM head is the token embedding (wte.weight; llama: model.embed_tokens.weight); false: a separate output projection lm_head.weight [vocab_size, n_embd]; with model.init_from: config.json's tie_word_embeddings (false here unties a tied folder's head, starting it as a copy of wte.weight)"));
  v("model", "init_from", c.model.init_from, help("gpt, llama: start from the weights in this folder (a Hugging Face GPT-2, LlamaForCausalLM, MistralForCausalLM or Qwen2ForCausalLM folder: config.json with model.safetensors or its sharded index; or a dl-train checkpoint step_* folder); its config.json sets model.type and the model's shape; empty: random weights").existing_folder().optional());
  v("model", "n_kv_head", c.model.n_kv_head, help("llama: key/value heads (grouped-query attention; 1: multi-query); must divide model.n_head; 0: model.n_head").min(0).max(kIntMax));
  v("model", "ffn_hidden", c.model.ffn_hidden, help("llama: width of the SwiGLU MLP (intermediate_size); 0: 4 x model.n_embd").min(0).max(kIntMax));
  v("model", "rms_norm_eps", c.model.rms_norm_eps, help("llama: RMSNorm's epsilon").above(0).max(1));
  v("model", "rope_theta", c.model.rope_theta, help("llama: the rotary embedding's base").above(0));
  v("model", "rope_scaling", c.model.rope_scaling, help("llama: rotary frequency scaling (config.json's rope_scaling.rope_type): none; linear divides every frequency by model.rope_factor; llama3 (Llama 3.1) divides the low ones, keeps the high ones and blends between"));
  v("model", "rope_factor", c.model.rope_factor, help("llama: rope_scaling's factor (linear, llama3)").min(1));
  v("model", "rope_low_freq_factor", c.model.rope_low_freq_factor, help("llama: rope_scaling = \"llama3\": low_freq_factor").above(0).max(1024));
  v("model", "rope_high_freq_factor", c.model.rope_high_freq_factor, help("llama: rope_scaling = \"llama3\": high_freq_factor; above model.rope_low_freq_factor").above(0).max(1024));
  v("model", "rope_original_max_position", c.model.rope_original_max_position, help("llama: rope_scaling = \"llama3\": original_max_position_embeddings").min(1).max(kIntMax));
  v("model", "qkv_bias", c.model.qkv_bias, help("llama: biases on the q, k and v projections (Qwen2; o_proj and the MLP have none); checkpoints are then Qwen2ForCausalLM folders; with model.init_from: true for a qwen2 folder"));
  v("model", "n_experts", c.model.n_experts, help("llama, planning only (dl-shard plan, dl-cost estimate; dl-train refuses it): routed experts per MoE layer of a mixture of experts; 0: a dense model").min(0).max(kMaxExperts));
  v("model", "n_experts_active", c.model.n_experts_active, help("llama, planning only: experts each token is routed to (top-k), 1 .. model.n_experts").min(0).max(kMaxExperts));
  v("model", "expert_ffn_hidden", c.model.expert_ffn_hidden, help("llama, planning only: each expert's SwiGLU width; 0: model.ffn_hidden").min(0).max(kIntMax));
  v("model", "n_shared_experts", c.model.n_shared_experts, help("llama, planning only: experts every token passes through (DeepSeek style), of model.expert_ffn_hidden's width").min(0).max(kMaxExperts));
  v("model", "n_dense_layers", c.model.n_dense_layers, help("llama, planning only: the first layers keep a dense MLP of model.ffn_hidden's width (DeepSeek-V3: 3)").min(0).max(kIntMax));
  v("model", "hidden", c.model.hidden, help("mlp: widths of the hidden layers").min(1).max(kIntMax));
  v("model", "activation", c.model.activation, help("mlp: activation after each hidden layer"));
  // [data]
  v("data", "source", c.data.source, help("training data; relative paths are from the config file's folder").data_source());
  v("data", "val_source", c.data.val_source, help("separate validation data, same forms as data.source; empty: hold out data.val_fraction of the training data").data_source().optional());
  v("data", "tokenizer", c.data.tokenizer, help("how text: data, sample prompts and eval text become ids: \"bytes\", \"gpt2:DIR\" (GPT-2's BPE from DIR's vocab.json + merges.txt or tokenizer.json) or \"hf:DIR\" (DIR's Hugging Face tokenizer.json: ByteLevel, Llama 3 / Qwen2 Split, SentencePiece-style BPE); default: model.init_from's folder when it holds those files, else bytes").tokenizer_spec());
  v("data", "val_fraction", c.data.val_fraction, help("fraction of the data held out for validation when data.val_source is empty").min(0).max(0.5));
  v("data", "digits", c.data.digits, help("synthetic:addition: digits per operand").min(1).max(18));
  v("data", "label_column", c.data.label_column, help("csv: column holding the class label; negative counts from the end"));
  v("data", "normalize", c.data.normalize, help("csv: standardise features with the training split's mean and std"));
  // [optim]
  v("optim", "name", c.optim.name, help("optimizer"));
  v("optim", "lr", c.optim.lr, help("peak learning rate").above(0));
  v("optim", "weight_decay", c.optim.weight_decay, help("weight decay (decoupled for adamw); not applied to biases and LayerNorm").min(0));
  v("optim", "beta1", c.optim.beta1, help("adamw: first-moment decay").min(0).below(1));
  v("optim", "beta2", c.optim.beta2, help("adamw: second-moment decay").min(0).below(1));
  v("optim", "eps", c.optim.eps, help("adamw: denominator epsilon").above(0));
  v("optim", "momentum", c.optim.momentum, help("sgd: momentum (0 disables)").min(0).below(1));
  v("optim", "dampening", c.optim.dampening, help("sgd: momentum dampening (torch.optim.SGD's: buffer = momentum * buffer + (1 - dampening) * gradient)").min(0).max(1));
  v("optim", "nesterov", c.optim.nesterov, help("sgd: Nesterov momentum (needs momentum > 0 and dampening 0)"));
  v("optim", "grad_clip", c.optim.grad_clip, help("clip the global gradient norm to this value; 0 disables").min(0));
  // [schedule]
  v("schedule", "decay", c.schedule.decay, help("learning-rate decay after warm-up"));
  v("schedule", "warmup_steps", c.schedule.warmup_steps, help("steps of linear warm-up from 0").min(0));
  v("schedule", "decay_steps", c.schedule.decay_steps, help("steps over which lr decays to min_lr_ratio * lr; 0: train.steps").min(0));
  v("schedule", "min_lr_ratio", c.schedule.min_lr_ratio, help("final learning rate as a fraction of optim.lr").min(0).max(1));
  // [train]
  v("train", "steps", c.train.steps, help("optimizer steps to train (at most 1e9)").min(0).max(static_cast<double>(kMaxTrainSteps)));
  v("train", "batch_size", c.train.batch_size, help("sequences (gpt) or examples (mlp) per micro-batch per data-parallel rank; with the model it must fit in memory (the planner's estimate, checked before a run starts)").min(1));
  v("train", "grad_accum", c.train.grad_accum, help("micro-batches accumulated per optimizer step; the step's micro-batches are built before it runs, so grad_accum x batch_size rows must fit in memory (checked before a run starts)").min(1));
  v("train", "seed", c.train.seed, help("seed of the initial weights and the data order"));
  v("train", "device", c.train.device, help("where to train; auto: cuda when a GPU is present"));
  v("train", "precision", c.train.precision, help("compute precision (master weights stay fp32)"));
  v("train", "loss_scale", c.train.loss_scale, help("fp16: initial dynamic loss scale (halved on overflow, the step skipped)").above(0));
  v("train", "loss_scale_window", c.train.loss_scale_window, help("fp16: steps without overflow before the loss scale doubles").min(1));
  v("train", "threads", c.train.threads, help("CPU threads; 0: all cores (or DL_NUM_THREADS); at most 4 x the cores, and at least 256 are always allowed").min(0));
  v("train", "eval_every", c.train.eval_every, help("steps between validation passes; 0: only at the end").min(0));
  v("train", "eval_batches", c.train.eval_batches, help("global batches per validation pass (train.batch_size x grad_accum x parallel.microbatches x parallel.dp examples each: the same examples under every layout)").min(1));
  v("train", "checkpoint_every", c.train.checkpoint_every, help("steps between checkpoints; 0: only at the end").min(0));
  v("train", "keep_checkpoints", c.train.keep_checkpoints, help("newest checkpoints kept").min(1));
  // [parallel]
  v("parallel", "dp", c.parallel.dp, help("data-parallel ranks; \"auto\" (the default): world size / (tp * pp), so N processes with tp and pp left at 1 train data parallel over all N").min(1).or_auto());
  v("parallel", "tp", c.parallel.tp, help("tensor-parallel ranks").min(1));
  v("parallel", "pp", c.parallel.pp, help("pipeline stages").min(1));
  v("parallel", "zero", c.parallel.zero, help("ZeRO stage: 0 off, 1 optimizer states, 2 + gradients, 3 + parameters").min(0).max(3));
  v("parallel", "offload", c.parallel.offload, help("keep ZeRO-sharded optimizer states on the CPU"));
  v("parallel", "microbatches", c.parallel.microbatches, help("micro-batches per step per data-parallel rank for the pipeline (multiplies train.grad_accum)").min(1));
  v("parallel", "schedule", c.parallel.schedule, help("pipeline schedule"));
  v("parallel", "activation_checkpointing", c.parallel.activation_checkpointing, help("recompute block activations in backward to save memory"));
  // [dist]
  v("dist", "timeout_s", c.dist.timeout_s, help("seconds any collective, send/recv or rendezvous may wait before it fails naming the peers").above(0));
  v("dist", "bucket_mb", c.dist.bucket_mb, help("gradient all-reduce bucket size in MB").above(0));
  // [log]
  v("log", "every", c.log.every, help("steps between log lines and metrics records").min(1));
  v("log", "tensorboard", c.log.tensorboard, help("write a TensorBoard events file in the run directory"));
  v("log", "progress", c.log.progress, help("progress display: auto (a bar on a terminal), bar, lines or none"));
  v("log", "samples", c.log.samples, help("gpt: generated samples shown at each evaluation").min(0));
  v("log", "env_lock", c.log.env_lock, help("write RUN/env.lock, this machine's driver, CUDA libraries, compilers and packages in dl-envlock's format (probed in the background: about a second of CPU); false for many short runs"));
}

}  // namespace dl::config_schema
