// text:PATH — a byte-level corpus read through one read-only mapping shared by both splits; with
// data.tokenizer = "gpt2:DIR", the ids of one or more files (a glob) tokenized in-process.
//
// The first bytes of the file are the training split and the last round(size * val_fraction)
// bytes the validation split (none when val_fraction is 0). Within a split, example k is the
// window of block_size + 1 bytes starting at byte k * block_size, so consecutive examples'
// targets tile the split without overlap.
#include "dl/data/sources.hpp"
#include "dl/data/tokenize.hpp"

namespace dl::data {

namespace {

class TextDataset final : public SequenceDataset {
 public:
  TextDataset(std::shared_ptr<const MappedFile> file, size_t begin, size_t end, int64_t block_size, bool val)
      : file_(std::move(file)), begin_(begin), end_(end), T_(block_size), val_(val) {
    vocab_ = 256;
    n_ = static_cast<int64_t>(end_ - begin_ - 1) / T_;  // callers guarantee end - begin >= T + 1
  }
  std::string describe() const override {
    return str("text:", file_->path(), " ", val_ ? "val" : "train", ": bytes [", begin_, ", ", end_, "), ", n_,
               " windows of ", T_ + 1, " bytes");
  }
  int64_t size() const override { return n_; }
  Batch make_batch(const std::vector<int64_t>& ids) const override {
    check_example_ids(ids, n_, "text:" + file_->path());
    return window_batch(ids, T_, [&](int64_t id) { return file_->data() + begin_ + static_cast<size_t>(id * T_); });
  }

 private:
  std::shared_ptr<const MappedFile> file_;
  size_t begin_, end_;
  int64_t T_;
  bool val_;
  int64_t n_ = 0;
};

// The ids of text files tokenized in-process (data.tokenizer = "gpt2:DIR"): the files' stream,
// documents separated by the tokenizer's separator (tokenize.hpp). Windows as for bytes.
class TokenizedTextDataset final : public SequenceDataset {
 public:
  TokenizedTextDataset(std::string what, std::shared_ptr<const std::vector<int32_t>> ids, size_t begin, size_t end,
                       int64_t block_size, bool val, int64_t vocab, const std::string& tokenizer)
      : what_(std::move(what)), ids_(std::move(ids)), begin_(begin), end_(end), T_(block_size), val_(val) {
    vocab_ = vocab;
    vocab_origin_ = str("the vocabulary of data.tokenizer = \"", tokenizer, "\"");
    n_ = static_cast<int64_t>(end_ - begin_ - 1) / T_;  // callers guarantee end - begin >= T + 1
  }
  std::string describe() const override {
    return str(what_, " ", val_ ? "val" : "train", ": tokens [", begin_, ", ", end_, "), ", n_, " windows of ", T_ + 1,
               " tokens");
  }
  int64_t size() const override { return n_; }
  Batch make_batch(const std::vector<int64_t>& ids) const override {
    check_example_ids(ids, n_, what_);
    return window_batch(ids, T_, [&](int64_t id) { return ids_->data() + begin_ + static_cast<size_t>(id * T_); });
  }

 private:
  std::string what_;
  std::shared_ptr<const std::vector<int32_t>> ids_;
  size_t begin_, end_;
  int64_t T_;
  bool val_;
  int64_t n_ = 0;
};

DataSplits open_tokenized_text(const std::string& pattern, const DataConfig& data, int64_t block_size, Role role) {
  const std::string what = "text:" + pattern;
  DataSplits out;
  out.tokenizer = make_tokenizer(data.tokenizer);
  auto ids = std::make_shared<const std::vector<int32_t>>(
      tokenize_files(*out.tokenizer, expand_text_sources({pattern}, what)));
  const int64_t size = static_cast<int64_t>(ids->size());
  const int64_t n_val = role == Role::split ? val_count(size, data.val_fraction) : 0;
  const int64_t n_train = size - n_val;
  auto check = [&](int64_t tokens, const char* split) {
    if (tokens < block_size + 1)
      throw_usage(what, ": the ", split, " split holds ", tokens, " tokens (", size, " in all, data.tokenizer = ",
                  data.tokenizer, ", data.val_fraction = ", data.val_fraction, "), fewer than model.block_size + 1 = ",
                  block_size + 1, " needed for one example");
  };
  const int64_t vocab = out.tokenizer->vocab_size();
  if (role == Role::split) {
    check(n_train, "training");
    out.train = std::make_unique<TokenizedTextDataset>(what, ids, 0, static_cast<size_t>(n_train), block_size, false, vocab, data.tokenizer);
    if (n_val > 0) {
      check(n_val, "validation");
      out.val = std::make_unique<TokenizedTextDataset>(what, ids, static_cast<size_t>(n_train), static_cast<size_t>(size),
                                                       block_size, true, vocab, data.tokenizer);
    }
  } else {
    check(size, role == Role::val ? "validation" : "training");
    auto d = std::make_unique<TokenizedTextDataset>(what, ids, 0, static_cast<size_t>(size), block_size, role == Role::val, vocab, data.tokenizer);
    (role == Role::val ? out.val : out.train) = std::move(d);
  }
  return out;
}

}  // namespace

DataSplits open_text(const std::string& pattern, const DataConfig& data, int64_t block_size, Role role) {
  if (data.tokenizer != "bytes") return open_tokenized_text(pattern, data, block_size, role);
  const std::string what = "text:" + pattern;
  const std::vector<std::string> files = expand_glob(pattern, what);
  if (files.size() > 1)
    throw_usage(what, ": matches ", files.size(), " files, but the byte tokenizer has no separator between documents; ",
                "use one file or set data.tokenizer = \"gpt2:DIR\"");
  const std::string& path = files[0];
  auto file = std::make_shared<const MappedFile>(path, what);
  const int64_t size = static_cast<int64_t>(file->size());
  const int64_t n_val = role == Role::split ? val_count(size, data.val_fraction) : 0;
  const int64_t n_train = size - n_val;
  auto check = [&](int64_t bytes, const char* split, bool is_share) {
    if (bytes >= block_size + 1) return;
    if (is_share)
      throw_usage(what, ": the ", split, " split holds ", bytes, " bytes (", size, "-byte file, data.val_fraction = ",
                  data.val_fraction, "), fewer than model.block_size + 1 = ", block_size + 1,
                  " needed for one example; use a larger file, a smaller model.block_size or another "
                  "data.val_fraction");
    throw_usage(what, ": the file holds ", size, " bytes, fewer than model.block_size + 1 = ", block_size + 1,
                " needed for one example");
  };
  DataSplits out;
  out.tokenizer = make_byte_tokenizer();
  if (role == Role::split) {
    check(n_train, "training", n_val > 0);
    out.train = std::make_unique<TextDataset>(file, 0, static_cast<size_t>(n_train), block_size, false);
    if (n_val > 0) {
      check(n_val, "validation", true);
      out.val = std::make_unique<TextDataset>(file, static_cast<size_t>(n_train), static_cast<size_t>(size),
                                              block_size, true);
    }
  } else {
    check(size, "", false);
    auto d = std::make_unique<TextDataset>(file, 0, static_cast<size_t>(size), block_size, role == Role::val);
    (role == Role::val ? out.val : out.train) = std::move(d);
  }
  file->advise_random();
  return out;
}

}  // namespace dl::data
