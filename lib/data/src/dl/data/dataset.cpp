// open_datasets: dispatches data.source / data.val_source to the concrete sources.
#include <algorithm>
#include <optional>

#include "dl/data/sources.hpp"

namespace dl {

using namespace dl::data;

namespace {
DataSplits open_sequence(const SourceSpec& s, const DataConfig& data, int64_t block_size, uint64_t seed, Role role) {
  if (s.kind == SourceKind::synthetic) return open_addition(data, block_size, seed, role);
  if (s.kind == SourceKind::text) return open_text(s.arg, data, block_size, role);
  return open_tokens(s.arg, data, block_size, role);
}
}  // namespace

DataSplits open_datasets(const DataConfig& data, int64_t block_size, uint64_t seed) {
  if (!(data.val_fraction >= 0.0 && data.val_fraction < 1.0))
    throw_usage("data.val_fraction = ", data.val_fraction, " must be in [0, 1)");
  SourceSpec train = parse_source(data.source, "data.source");
  std::optional<SourceSpec> val;
  if (!data.val_source.empty()) val = parse_source(data.val_source, "data.val_source");

  if (train.kind == SourceKind::csv || (val && val->kind == SourceKind::csv)) {
    if (train.kind != SourceKind::csv || (val && val->kind != SourceKind::csv))
      throw_usage("data.source = \"", data.source, "\" and data.val_source = \"", data.val_source,
                  "\" mix feature (csv) and token data; use csv for both or for neither");
    return open_csv(train.arg, val ? val->arg : std::string(), data, seed);
  }

  if (block_size < 1) throw_usage("model.block_size = ", block_size, " must be at least 1");
  if (data.tokenizer != "bytes" && (train.kind == SourceKind::synthetic || (val && val->kind == SourceKind::synthetic)))
    throw_usage("data.tokenizer = \"", data.tokenizer, "\" applies to text: and tokens: data, not to synthetic:",
                train.arg, "; drop it");
  DataSplits out = open_sequence(train, data, block_size, seed, val ? Role::train : Role::split);
  if (val) {
    DataSplits v = open_sequence(*val, data, block_size, seed, Role::val);
    if (v.tokenizer->kind() != out.tokenizer->kind())
      throw_usage("data.source = \"", data.source, "\" uses the ", out.tokenizer->name(),
                  " tokenizer but data.val_source = \"", data.val_source, "\" uses ", v.tokenizer->name(),
                  "; both splits must share one vocabulary");
    out.val = std::move(v.val);
  }
  // One vocabulary for both splits: the model must embed every id either split can hold.
  int64_t vocab = out.train->min_vocab_size();
  std::string origin = out.train->vocab_origin();
  auto widen = [&](int64_t v, std::string why) {
    if (v <= vocab) return;
    vocab = v;
    origin = std::move(why);
  };
  widen(out.tokenizer->vocab_size(), str("the vocabulary of data.tokenizer = \"", data.tokenizer, "\""));
  if (out.val) widen(out.val->min_vocab_size(), out.val->vocab_origin());
  static_cast<SequenceDataset&>(*out.train).set_min_vocab(vocab, origin);
  if (out.val) static_cast<SequenceDataset&>(*out.val).set_min_vocab(vocab, origin);
  return out;
}

void check_model_vocab(const Dataset& data, int64_t vocab_size) {
  if (vocab_size >= data.min_vocab_size()) return;
  throw_usage("model.vocab_size = ", vocab_size, " is smaller than the data's vocabulary (", data.min_vocab_size(),
              " ids: ", data.vocab_origin(), "); set model.vocab_size >= ", data.min_vocab_size(),
              " or use data made with the model's tokenizer");
}

}  // namespace dl
