// Internals of dl/data shared by its .cpp files (and the data tests): the concrete sources that
// open_datasets() dispatches to, and a read-only memory-mapped file.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "dl/config/choice.hpp"
#include "dl/data/dataset.hpp"

namespace dl::data {

// A whole file mapped read-only (MAP_PRIVATE). Empty files are allowed (data() is null).
// Throws dl::Error(usage) naming `what` (e.g. "text:/abs/file.txt") when the file cannot be opened.
class MappedFile {
 public:
  MappedFile(const std::string& path, std::string_view what);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const unsigned char* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Hints that the mapping will now be read at random places (training windows).
  void advise_random() const;

 private:
  std::string path_;
  const unsigned char* data_ = nullptr;
  size_t size_ = 0;
};

// The files a path or glob names, sorted (folders left out). Throws dl::Error(usage) naming `what`
// when nothing matches ("no such file" for a plain path).
std::vector<std::string> expand_glob(const std::string& pattern, const std::string& what);

// Number of examples held out for validation from `n`: round(n * fraction), at least 1 when
// fraction > 0. Does not check that something is left for training.
int64_t val_count(int64_t n, double fraction);

// The split part of a source: "synthetic:addition" -> kind "synthetic", arg "addition".
struct SourceSpec {
  SourceKind kind;
  std::string arg;
  std::string text;  // the whole source string, for messages
};
SourceSpec parse_source(const std::string& source, std::string_view key);

// What an opener makes of its source: both splits (validation held out by data.val_fraction;
// .val is null when that is 0, except for synthetic data whose validation set is a separate
// stream), or the whole source as the training split (data.val_source is set), or the whole
// source as the validation split (it is data.val_source).
enum class Role { split, train, val };

DataSplits open_addition(const DataConfig& data, int64_t block_size, uint64_t seed, Role role);
DataSplits open_text(const std::string& pattern, const DataConfig& data, int64_t block_size, Role role);
// The two llm.c shard layouts (llm.c's dev/data/data_common.py): a 256 x int32 header (magic,
// version, token count), then the tokens as uint16 (GPT-2's, magic 20240520, version 1) or as
// uint32 (Llama 3's, magic 20240801, version 7: for vocabularies past 65,536 ids).
struct ShardLayout {
  int32_t magic, version;
  int token_bytes;
  const char* token_type;
};
inline constexpr ShardLayout kShardLayouts[] = {{20240520, 1, 2, "uint16"}, {20240801, 7, 4, "uint32"}};
inline constexpr size_t kShardHeaderBytes = 256 * sizeof(int32_t);

// A run of tokens in a shard, each token_bytes wide (2 or 4), aligned to its width.
struct TokenShardView {
  const unsigned char* tokens = nullptr;
  int64_t n_tokens = 0;
  int token_bytes = 2;
  uint32_t operator[](int64_t i) const {
    if (token_bytes == 2) return reinterpret_cast<const uint16_t*>(tokens)[i];
    return reinterpret_cast<const uint32_t*>(tokens)[i];
  }
  // The view from token i on.
  TokenShardView from(int64_t i) const { return {tokens + i * token_bytes, n_tokens - i, token_bytes}; }
};
// The tokens of one shard's bytes (an llm.c header of either layout, or headerless uint16, as
// tokens.cpp describes), checked against the header; `data` must be 4-byte aligned (a mapping is).
// Throws dl::Error(usage) naming `what` and `path` when the header lies about the file.
TokenShardView parse_token_shard(const unsigned char* data, size_t size, const std::string& path,
                                 const std::string& what);
DataSplits open_tokens(const std::string& pattern, const DataConfig& data, int64_t block_size, Role role);
// csv: both files are parsed together so that label ids and feature statistics agree;
// `val_path` empty means "hold out data.val_fraction of `train_path`".
DataSplits open_csv(const std::string& train_path, const std::string& val_path, const DataConfig& data,
                    uint64_t seed);

// Base of the token-window datasets: min_vocab_size() is settable so that both splits report
// one vocabulary (the larger of the two sources), with what needs it.
class SequenceDataset : public Dataset {
 public:
  bool is_sequence() const override { return true; }
  int64_t min_vocab_size() const override { return vocab_; }
  std::string vocab_origin() const override { return vocab_origin_; }
  void set_min_vocab(int64_t v, std::string origin) {
    vocab_ = v;
    vocab_origin_ = std::move(origin);
  }

 protected:
  int64_t vocab_ = 256;
  std::string vocab_origin_ = "the byte tokenizer";
};

// synthetic:addition helpers: the text of a problem and the length of one problem in tokens.
std::string addition_problem(int64_t a, int64_t b, int digits);
int64_t addition_problem_len(int digits);

// Checks example ids against [0, n) before stacking a batch (runtime error otherwise).
void check_example_ids(const std::vector<int64_t>& ids, int64_t n, std::string_view what);

// Stacks windows of T + 1 tokens into inputs (first T) and targets (last T). window(id) returns a
// pointer (or a TokenShardView) to example id's first token, of any integer element type.
template <class WindowFn>
Batch window_batch(const std::vector<int64_t>& ids, int64_t T, WindowFn&& window) {
  const int64_t n = static_cast<int64_t>(ids.size());
  Batch b{Tensor::empty({n, T}, DType::i32), Tensor::empty({n, T}, DType::i32)};
  for (int64_t r = 0; r < n; ++r) {
    const auto w = window(ids[static_cast<size_t>(r)]);
    int32_t* in = b.inputs.data<int32_t>() + r * T;
    int32_t* tg = b.targets.data<int32_t>() + r * T;
    for (int64_t t = 0; t < T; ++t) {
      in[t] = static_cast<int32_t>(w[t]);
      tg[t] = static_cast<int32_t>(w[t + 1]);
    }
  }
  return b;
}

}  // namespace dl::data
