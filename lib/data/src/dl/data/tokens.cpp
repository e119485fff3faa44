// tokens:GLOB — pre-tokenized uint16 shards, memory-mapped.
//
// Two formats (REFERENCE.md): llm.c shards start with a 256 x int32 header (magic 20240520,
// version 1, token count) followed by the uint16 tokens; nanoGPT's train.bin / val.bin are bare
// uint16 tokens. A file is an llm.c shard, whose header must then be valid, when its first int32
// is the magic, differs from it in exactly one of its four bytes (a damaged magic: any one bit
// flipped, any one byte overwritten), or when the rest of its header is an llm.c header for this
// file (version 1 and a token count that fills the file exactly). Any other file is headerless
// (docs/FORMATS.md). Files matched by the glob are taken in sorted order. Example k of the
// concatenated stream of windows is a window of block_size + 1 tokens at stride block_size inside
// one shard (windows never cross shards); the last round(windows * val_fraction) windows form
// the validation split when the source is split.
#include <algorithm>
#include <cstring>

#include "dl/data/sources.hpp"

namespace dl::data {

namespace {

constexpr int32_t kShardMagic = 20240520;
constexpr int32_t kShardVersion = 1;
constexpr size_t kHeaderBytes = 256 * sizeof(int32_t);

struct Shard {
  std::unique_ptr<MappedFile> file;
  const uint16_t* tokens = nullptr;
  int64_t n_tokens = 0;
  int64_t windows = 0;
};

struct ShardSet {
  std::string what;  // "tokens:GLOB"
  std::vector<Shard> shards;
  std::vector<int64_t> first_window;  // first global window of each shard, plus the total at the end
  int64_t total_tokens = 0;
  int32_t max_id = 0;

  int64_t windows() const { return first_window.back(); }
  const uint16_t* window(int64_t w, int64_t T) const {
    auto it = std::upper_bound(first_window.begin(), first_window.end(), w);
    size_t s = static_cast<size_t>(it - first_window.begin()) - 1;
    return shards[s].tokens + (w - first_window[s]) * T;
  }
};

// Validates and maps one shard.
Shard open_shard(const std::string& path, const std::string& what, int64_t T) {
  Shard s;
  s.file = std::make_unique<MappedFile>(path, what);
  TokenShardView view = parse_token_shard(s.file->data(), s.file->size(), path, what);
  s.tokens = view.tokens;
  s.n_tokens = view.n_tokens;
  s.windows = s.n_tokens >= T + 1 ? (s.n_tokens - 1) / T : 0;
  return s;
}

std::shared_ptr<const ShardSet> open_shards(const std::string& pattern, int64_t T) {
  auto set = std::make_shared<ShardSet>();
  set->what = "tokens:" + pattern;
  set->first_window.push_back(0);
  for (const std::string& path : expand_glob(pattern, set->what)) {
    Shard s = open_shard(path, set->what, T);
    uint16_t m = 0;
    for (int64_t i = 0; i < s.n_tokens; ++i) m = std::max(m, s.tokens[i]);
    set->max_id = std::max<int32_t>(set->max_id, m);
    set->total_tokens += s.n_tokens;
    set->first_window.push_back(set->first_window.back() + s.windows);
    s.file->advise_random();
    set->shards.push_back(std::move(s));
  }
  if (set->windows() == 0)
    throw_usage(set->what, ": the ", set->shards.size(), " file(s) hold ", set->total_tokens,
                " tokens, but none holds model.block_size + 1 = ", T + 1,
                " tokens for one example (examples do not cross files)");
  return set;
}

class TokenDataset final : public SequenceDataset {
 public:
  TokenDataset(std::shared_ptr<const ShardSet> set, int64_t first, int64_t count, int64_t block_size, bool val)
      : set_(std::move(set)), first_(first), n_(count), T_(block_size), val_(val) {
    vocab_ = set_->max_id + 1;
  }
  std::string describe() const override {
    return str(set_->what, " ", val_ ? "val" : "train", ": ", n_, " windows of ", T_ + 1, " tokens from ",
               set_->shards.size(), " file(s), ", set_->total_tokens, " tokens in all");
  }
  int64_t size() const override { return n_; }
  Batch make_batch(const std::vector<int64_t>& ids) const override {
    check_example_ids(ids, n_, set_->what);
    return window_batch(ids, T_, [&](int64_t id) { return set_->window(first_ + id, T_); });
  }

 private:
  std::shared_ptr<const ShardSet> set_;
  int64_t first_, n_, T_;
  bool val_;
};

}  // namespace

TokenShardView parse_token_shard(const unsigned char* p, size_t size, const std::string& path, const std::string& what) {
  int32_t first = 0;
  if (size >= sizeof(int32_t)) std::memcpy(&first, p, sizeof first);
  auto corrupt = [&](auto&&... why) { throw_usage(what, ": corrupt token shard '", path, "': ", why...); };
  if (size >= sizeof(int32_t) && first != kShardMagic) {
    const uint32_t diff = static_cast<uint32_t>(first) ^ static_cast<uint32_t>(kShardMagic);
    int bytes_off = 0;
    for (int b = 0; b < 4; ++b) bytes_off += (diff >> (8 * b)) & 0xff ? 1 : 0;
    if (bytes_off == 1)
      corrupt("it starts with ", first, ", one byte off the llm.c magic ", kShardMagic,
              ": a damaged header (a headerless token file differs from the magic in two or more of its first 4 bytes)");
    int32_t rest[2] = {0, -1};
    if (size >= kHeaderBytes) std::memcpy(rest, p + sizeof(int32_t), sizeof rest);
    if (rest[0] == kShardVersion && rest[1] >= 0 && size - kHeaderBytes == 2 * static_cast<size_t>(rest[1]))
      corrupt("its header says version 1, ", rest[1], " tokens, as an llm.c header for a file of ", size,
              " bytes does, but its magic is ", first, " instead of ", kShardMagic, ": a damaged header");
  }
  TokenShardView view;
  if (first == kShardMagic) {
    if (size < kHeaderBytes)
      corrupt("it starts with the llm.c magic ", kShardMagic, " but is only ", size, " bytes, shorter than the ",
              kHeaderBytes, "-byte header");
    int32_t header[3];
    std::memcpy(header, p, sizeof header);
    if (header[1] != kShardVersion) corrupt("header version is ", header[1], ", expected ", kShardVersion);
    if (header[2] < 0) corrupt("header says ", header[2], " tokens");
    const size_t body = size - kHeaderBytes;
    if (body != 2 * static_cast<size_t>(header[2])) {
      if (body % 2)
        corrupt("header says ", header[2], " tokens but the file holds ", body / 2, " tokens and a stray byte");
      corrupt("header says ", header[2], " tokens but the file holds ", body / 2);
    }
    view.tokens = reinterpret_cast<const uint16_t*>(p + kHeaderBytes);
    view.n_tokens = header[2];
  } else {
    if (size % 2)
      corrupt("a headerless uint16 token file must have an even size, but it has ", size,
              " bytes (an llm.c shard would start with the magic ", kShardMagic, ")");
    view.tokens = reinterpret_cast<const uint16_t*>(p);
    view.n_tokens = static_cast<int64_t>(size / 2);
  }
  return view;
}

DataSplits open_tokens(const std::string& pattern, const DataConfig& data, int64_t block_size, Role role) {
  auto set = open_shards(pattern, block_size);
  const int64_t total = set->windows();
  DataSplits out;
  // Shards hold ids; with a named tokenizer (data.tokenizer), prompts and samples are its text.
  out.tokenizer = data.tokenizer == "bytes" ? make_id_tokenizer() : make_tokenizer(data.tokenizer);
  if (role == Role::split) {
    const int64_t n_val = val_count(total, data.val_fraction);
    if (total - n_val < 1)
      throw_usage(set->what, ": only ", total, " example(s) of model.block_size + 1 = ", block_size + 1,
                  " tokens, too few to hold out data.val_fraction = ", data.val_fraction,
                  " for validation and keep some for training");
    out.train = std::make_unique<TokenDataset>(set, 0, total - n_val, block_size, false);
    if (n_val > 0) out.val = std::make_unique<TokenDataset>(set, total - n_val, n_val, block_size, true);
  } else {
    auto d = std::make_unique<TokenDataset>(set, 0, total, block_size, role == Role::val);
    (role == Role::val ? out.val : out.train) = std::move(d);
  }
  return out;
}

}  // namespace dl::data
