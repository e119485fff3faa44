// Hugging Face config.json files as model.init_from reads them (a download or a dl-train
// checkpoint): hf_config_model_type, then read_hf_llama_config for the Llama family or
// read_hf_gpt2_config. Input: the config.json text (written to a file: the readers take a path).
// An accepted shape must be one dl-train builds (positive sizes, whole heads), and a llama shape
// written back by the checkpoint writer (llama_config_json) must read back as the same shape.
// The same text through the planner's reader (dl-shard/dl-cost --hf-config, mixtures of experts
// included): a usage error or a shape with positive sizes and at most as many active experts as
// experts.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "dl/checkpoint/format.hpp"
#include "dl/config/hf_gpt2_config.hpp"
#include "dl/config/hf_llama_config.hpp"
#include "dl/plan/plan.hpp"
#include "fuzz.hpp"

namespace {

namespace fs = std::filesystem;

const fs::path& scratch_file() {
  static const fs::path p = fs::temp_directory_path() / ("fuzz_hf_config-" + std::to_string(getpid()) + ".json");
  return p;
}

bool same_shape(const dl::HfLlamaShape& a, const dl::HfLlamaShape& b) {
  return a.n_layer == b.n_layer && a.n_head == b.n_head && a.n_kv_head == b.n_kv_head && a.n_embd == b.n_embd &&
         a.ffn_hidden == b.ffn_hidden && a.vocab_size == b.vocab_size &&
         a.max_position_embeddings == b.max_position_embeddings && a.rms_norm_eps == b.rms_norm_eps &&
         a.rope_theta == b.rope_theta && a.rope_scaling == b.rope_scaling && a.tie_word_embeddings == b.tie_word_embeddings &&
         (a.rope_scaling == dl::RopeScaling::none || a.rope_factor == b.rope_factor) &&
         (a.rope_scaling != dl::RopeScaling::llama3 ||
          (a.rope_low_freq_factor == b.rope_low_freq_factor && a.rope_high_freq_factor == b.rope_high_freq_factor &&
           a.rope_original_max_position == b.rope_original_max_position));
}

void check_llama(const fs::path& file) {
  const dl::HfLlamaShape s = dl::read_hf_llama_config(file);
  dl::fuzz::require(s.n_layer > 0 && s.n_head > 0 && s.n_kv_head > 0 && s.n_embd > 0 && s.ffn_hidden > 0 &&
                        s.vocab_size > 0 && s.max_position_embeddings > 0,
                    "an accepted llama shape has positive sizes");
  dl::fuzz::require(s.n_embd % s.n_head == 0 && (s.n_embd / s.n_head) % 2 == 0 && s.n_head % s.n_kv_head == 0,
                    "an accepted llama shape has whole, even heads and whole key/value groups");
  dl::fuzz::require(s.rms_norm_eps > 0 && s.rope_theta > 0 && s.sliding_window >= 0, "positive eps, theta and window");
  dl::ModelConfig m;
  m.type = dl::ModelType::llama;
  m.n_layer = s.n_layer;
  m.n_head = s.n_head;
  m.n_kv_head = s.n_kv_head;
  m.n_embd = s.n_embd;
  m.ffn_hidden = s.ffn_hidden;
  m.vocab_size = s.vocab_size;
  m.block_size = s.max_position_embeddings;
  m.rms_norm_eps = s.rms_norm_eps;
  m.rope_theta = s.rope_theta;
  m.rope_scaling = s.rope_scaling;
  m.rope_factor = s.rope_factor;
  m.rope_low_freq_factor = s.rope_low_freq_factor;
  m.rope_high_freq_factor = s.rope_high_freq_factor;
  m.rope_original_max_position = s.rope_original_max_position;
  m.tie_embeddings = s.tie_word_embeddings;
  std::ofstream(file, std::ios::binary | std::ios::trunc) << dl::llama_config_json(m);
  dl::fuzz::require(same_shape(dl::read_hf_llama_config(file), s),
                    "llama_config_json of an accepted shape reads back as the same shape");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fs::path& file = scratch_file();
  std::ofstream(file, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data),
                                                                 static_cast<std::streamsize>(size));
  dl::fuzz::expect_parse_or_usage_error([&] {
    if (dl::is_hf_llama_family(dl::hf_config_model_type(file))) {
      check_llama(file);
    } else {
      const dl::HfGpt2Shape s = dl::read_hf_gpt2_config(file);
      dl::fuzz::require(s.n_layer > 0 && s.n_head > 0 && s.n_embd > 0 && s.n_embd % s.n_head == 0 &&
                            s.n_positions > 0 && s.vocab_size > 0,
                        "an accepted GPT-2 shape has positive sizes and whole heads");
    }
  });
  dl::fuzz::expect_parse_or_usage_error([&] {
    const dl::plan::ModelShape m = dl::plan::model_from_hf_config(file.string());
    dl::fuzz::require(m.n_layer > 0 && m.hidden > 0 && m.heads > 0 && m.vocab > 0 && m.active_experts <= m.experts,
                      "a planned shape has positive sizes and no more active experts than experts");
  });
  return 0;
}
