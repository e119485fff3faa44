// text:PATH — a byte-level corpus read through one read-only mapping shared by both splits.
//
// The first bytes of the file are the training split and the last round(size * val_fraction)
// bytes the validation split (none when val_fraction is 0). Within a split, example k is the
// window of block_size + 1 bytes starting at byte k * block_size, so consecutive examples'
// targets tile the split without overlap.
#include "dl/data/sources.hpp"

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

}  // namespace

DataSplits open_text(const std::string& path, const DataConfig& data, int64_t block_size, Role role) {
  const std::string what = "text:" + path;
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
