// Small Hugging Face GPT-2 and Llama folders written by the PyTorch references (tests/scripts/
// hf_gpt2.py, hf_llama.py), for the model.init_from tests: config.json, the weights (HF names and
// layouts, written by hand as safetensors), train.bin and val.bin token shards of a text.
#pragma once
#include <filesystem>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace dl::test {

// A text of a few KB (English sentences), the ids' source.
const char* hf_test_text();

// Writes the folder `dir` as `spec` says (tests/scripts/hf_gpt2.py lists the keys; "text" is
// filled in) and returns the reference's mean loss over val.bin's windows. REQUIREs success.
double write_hf_gpt2(const std::filesystem::path& dir, nlohmann::json spec);
// Several folders with one PyTorch start (seconds each otherwise): (dir, spec) pairs; the losses.
std::vector<double> write_hf_gpt2s(const std::vector<std::pair<std::filesystem::path, nlohmann::json>>& folders);

// Llama-family folders, the same way (tests/scripts/hf_llama.py lists the keys).
std::vector<double> write_hf_llamas(const std::vector<std::pair<std::filesystem::path, nlohmann::json>>& folders);
// The PyTorch reference's losses of each (folder, data_dir): the folder's config.json and F32
// model.safetensors (a dl-train llama checkpoint) over the first `windows` windows of
// data_dir/val.bin. One PyTorch start.
std::vector<double> hf_llama_folder_losses(
    const std::vector<std::pair<std::filesystem::path, std::filesystem::path>>& folders, int windows);

}  // namespace dl::test
