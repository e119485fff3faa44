// model.init_from: the weights a new run starts from, instead of the counter-based generator's.
//   - a Hugging Face GPT-2 folder: config.json with model.safetensors, or
//     model.safetensors.index.json and the shards it names; tensor names with or without the
//     "transformer." prefix (GPT2LMHeadModel's and GPT2Model's), F32, F16 or BF16 on disk; the
//     attention-mask buffers old exports carry (h.N.attn.bias, h.N.attn.masked_bias) are skipped;
//   - a Hugging Face LlamaForCausalLM / MistralForCausalLM / Qwen2ForCausalLM folder
//     (model.type = "llama"; Qwen2's q/k/v biases with model.qkv_bias), the same files and
//     dtypes; the rotary_emb.inv_freq buffers of older exports are skipped;
//   - a dl-train checkpoint (step_* folder) of any layout, its pieces assembled by CheckpointReader.
// GptModel's and LlamaModel's parameters carry the Hugging Face names and layouts (Conv1D's
// [in, out], nn.Linear's [out, in]), so the declarations are the naming map: a tensor is taken as
// stored, never renamed or transposed.
// The optimizer state stays fresh and the step counter at 0.
#pragma once
#include <filesystem>
#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "dl/config/config.hpp"
#include "dl/nn/model.hpp"
#include "dl/parallel/zero.hpp"

namespace dl {

class InitFrom {
 public:
  // Opens `folder` and checks it against the model `model` describes (its shape already taken
  // from the folder's config.json by the config loader): every parameter present once with its
  // whole-model shape and a float dtype, nothing else, every file complete. Reads no tensor data
  // (but an lm_head.weight, compared with wte.weight). Usage errors name the file and the tensor,
  // its shape and the expected one.
  InitFrom(const std::filesystem::path& folder, const ModelConfig& model);
  ~InitFrom();
  InitFrom(const InitFrom&) = delete;
  InitFrom& operator=(const InitFrom&) = delete;

  // Writes this rank's pieces of every parameter (any layout: whole, tensor-parallel slices,
  // ZeRO shards, pipeline stages, the tied copy), converting to the model's dtype (f32 master
  // weights under mixed precision).
  void load(Model& model, parallel::ZeroEngine& engine) const;

  // What RUN/init_from.json records: the folder, its format, files, tensors and dtypes, and the
  // seconds spent opening it (headers and checks).
  nlohmann::json describe() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dl
