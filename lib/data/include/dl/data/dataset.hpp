// Datasets and the deterministic data order.
//
// A Dataset is a finite, indexable set of examples for one split (train or validation).
// Sequence datasets (GPT) yield windows of block_size + 1 token ids: inputs are the first
// block_size, targets the last block_size (a negative target is ignored by the loss). Feature
// datasets (MLP) yield a feature row and a class id.
//
// The order in which examples are visited is a pure function of (seed, epoch, position): see
// Sampler. Nothing about it depends on the number of threads, ranks or previous runs, so a
// resumed or re-sharded run reads exactly the same examples.
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dl/config/config.hpp"
#include "dl/core/batch.hpp"

namespace dl {

// A task-specific score over the per-row correctness flags of a forward pass, e.g. exact-match
// accuracy of whole answers for synthetic:addition.
struct TaskScore {
  std::string name;  // metric name, e.g. "exact_match"
  int64_t hits = 0;
  int64_t total = 0;
};

// A prompt and its expected completion, for showing what a model learned (dl-train sample and
// the evaluation samples of the demo).
struct PromptExample {
  std::string prompt;    // text fed to the model, e.g. "123+456="
  std::string expected;  // the completion a perfect model generates, e.g. "975;"
};

enum class TokenizerKind { bytes, ids, gpt2, hf };
inline constexpr std::string_view kTokenizerNames[] = {"bytes", "ids", "gpt2", "hf"};
constexpr std::span<const std::string_view> choice_names(TokenizerKind) { return kTokenizerNames; }

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<int32_t> encode(const std::string& text) const = 0;
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  virtual TokenizerKind kind() const = 0;
  std::string name() const { return std::string(choice_name(kind())); }  // "bytes" | "ids" | "gpt2" | "hf"
  // Number of ids the tokenizer can decode (0: any id, e.g. the ids tokenizer).
  virtual int64_t vocab_size() const { return 0; }
  // The id put between documents of a multi-file source (GPT-2's <|endoftext|>); none for bytes.
  virtual std::optional<int32_t> document_separator() const { return std::nullopt; }
  // The ids a Hugging Face config.json names as bos_token_id / eos_token_id; none when the
  // tokenizer does not define them.
  virtual std::optional<int32_t> bos_token_id() const { return std::nullopt; }
  virtual std::optional<int32_t> eos_token_id() const { return std::nullopt; }
  // The files the tokenizer was loaded from (copied into a run and its checkpoints so that it can
  // be reloaded).
  virtual std::vector<std::string> files() const { return {}; }
  // The first position >= from (or text.size()) where `text` may be cut so that encoding the two
  // parts gives the ids of the whole: how text is split across threads.
  virtual size_t split_point(std::string_view text, size_t from) const { return std::min(from, text.size()); }

  // Encodes on one thread, keeping what helps the next call (GPT-2's merge cache).
  class Encoder {
   public:
    virtual ~Encoder() = default;
    virtual void encode_append(std::string_view text, std::vector<int32_t>& out) = 0;
    // Text that continues a document already begun (a chunk after a split point): a tokenizer
    // that marks where its text starts (a prefix space, SentencePiece's "▁") leaves it out.
    virtual void encode_append_continued(std::string_view text, std::vector<int32_t>& out) { encode_append(text, out); }
  };
  virtual std::unique_ptr<Encoder> make_encoder() const;
};
// Byte-level (ids 0..255), used for text:, csv: is not tokenized, synthetic:addition.
std::unique_ptr<Tokenizer> make_byte_tokenizer();
// For token shards whose vocabulary dlkit does not ship: text is whitespace-separated ids.
std::unique_ptr<Tokenizer> make_id_tokenizer();
// data.tokenizer: "bytes" (the byte tokenizer), "gpt2:DIR" (GPT-2's BPE from DIR's vocab.json +
// merges.txt or tokenizer.json; gpt2_tokenizer.hpp) or "hf:DIR" (DIR/tokenizer.json;
// hf_tokenizer.hpp). Throws dl::Error(usage) naming what is wrong.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& spec);
// The tokenizer a folder holds: GPT-2's vocab.json + merges.txt when it has them, else its
// tokenizer.json (a Hugging Face folder, an init_from folder). Throws dl::Error(usage) for a
// folder with neither.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& folder);
// The data.tokenizer spec of load_tokenizer(folder): "gpt2:FOLDER" or "hf:FOLDER".
std::string tokenizer_spec_of_folder(const std::string& folder);

class Dataset {
 public:
  virtual ~Dataset() = default;
  // One line for logs: source, split, size.
  virtual std::string describe() const = 0;
  // Number of examples in this split (> 0).
  virtual int64_t size() const = 0;
  // Stacks the given examples into one host batch:
  //   sequence: inputs i32[n, block_size], targets i32[n, block_size]
  //   features: inputs f32[n, n_features], targets i32[n]
  // An example id outside [0, size()) is a runtime error.
  virtual Batch make_batch(const std::vector<int64_t>& example_ids) const = 0;

  virtual bool is_sequence() const = 0;
  // sequence datasets: smallest vocabulary that holds every id the data can contain, and what
  // needs that many ids ("token id 70000 in tokens:GLOB file 'PATH'", "the vocabulary of data.tokenizer = ...")
  virtual int64_t min_vocab_size() const { return 0; }
  virtual std::string vocab_origin() const { return {}; }
  // feature datasets
  virtual int64_t n_features() const { return 0; }
  virtual int64_t n_classes() const { return 0; }

  // Task score from a forward pass over `batch` whose per-row correctness is `correct`
  // (i32, one flag per target row). Empty when the data has no task metric beyond accuracy.
  virtual std::optional<TaskScore> score(const Batch& batch, const Tensor& correct) const { return std::nullopt; }
  // Up to n prompts with known answers (synthetic tasks); empty for plain text.
  virtual std::vector<PromptExample> prompts(int64_t n) const { return {}; }
  // How a prompt plus a generated completion reads for a person, e.g. "123+456=579 (ok)".
  virtual std::string render(const std::string& prompt, const std::string& completion) const {
    return prompt + completion;
  }
  // Generation stops after this text (synthetic:addition ends answers with ";"); empty: never.
  virtual std::string stop_text() const { return {}; }
};

struct DataSplits {
  std::unique_ptr<Dataset> train;
  std::unique_ptr<Dataset> val;        // null when there is no validation data: val_fraction = 0
                                       // and no val_source (synthetic:addition always has one)
  std::unique_ptr<Tokenizer> tokenizer;  // null for feature data
};

// Opens config.data for a model with the given sequence length (model.block_size; ignored for
// feature data). Throws dl::Error(usage) naming the file and what is wrong (missing file, empty
// glob, bad shard header, too little data for one window, unparsable CSV cell with its line).
DataSplits open_datasets(const DataConfig& data, int64_t block_size, uint64_t seed);
// Throws dl::Error(usage) when a model of vocab_size ids cannot embed every id of `data` (a
// sequence dataset), naming what holds the largest id (a token shard's file, the tokenizer).
void check_model_vocab(const Dataset& data, int64_t vocab_size);

// The visiting order of one split: position p of the endless stream maps to example
// permutation_e(p mod n) with e = p / n, where permutation_e is a keyed bijection of [0, n)
// (a Feistel network with cycle-walking: O(1) memory, any position computable directly).
class Sampler {
 public:
  Sampler(int64_t n, uint64_t seed, std::string_view stream = "data/train");
  int64_t size() const { return n_; }
  int64_t example_at(int64_t position) const;
  // Example ids for positions [first, first + count).
  std::vector<int64_t> examples(int64_t first, int64_t count) const;

 private:
  int64_t n_;
  uint64_t key_;
  int half_bits_;
};

}  // namespace dl
