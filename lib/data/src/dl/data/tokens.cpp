// tokens:GLOB — pre-tokenized shards, memory-mapped.
//
// Three formats (REFERENCE.md, docs/FORMATS.md): llm.c shards start with a 256 x int32 header
// (magic, version, token count) followed by the tokens, uint16 for magic 20240520 / version 1
// (GPT-2's) and uint32 for magic 20240801 / version 7 (Llama 3's, llm.c's dev/data/data_common.py);
// nanoGPT's train.bin / val.bin are bare uint16 tokens. A file is an llm.c shard, whose header
// must then be valid, when its first int32 is a magic, differs from one in exactly one of its four
// bytes (a damaged magic: any one bit flipped, any one byte overwritten), or when the rest of its
// header is an llm.c header for this file (a layout's version and a token count that fills the
// file exactly). Any other file is headerless. Files matched by the glob are taken in sorted
// order, and may mix the formats. Example k of the concatenated stream of windows is a window of
// block_size + 1 tokens at stride block_size inside one shard (windows never cross shards); the
// last round(windows * val_fraction) windows form the validation split when the source is split.
#include <algorithm>
#include <cstring>

#include "dl/data/sources.hpp"

namespace dl::data {

namespace {

struct Shard {
  std::unique_ptr<MappedFile> file;
  TokenShardView tokens;
  int64_t windows = 0;
};

uint32_t max_token(const TokenShardView& v) {
  uint32_t m = 0;
  if (v.token_bytes == 2) {
    const auto* t = reinterpret_cast<const uint16_t*>(v.tokens);
    for (int64_t i = 0; i < v.n_tokens; ++i) m = std::max<uint32_t>(m, t[i]);
  } else {
    const auto* t = reinterpret_cast<const uint32_t*>(v.tokens);
    for (int64_t i = 0; i < v.n_tokens; ++i) m = std::max(m, t[i]);
  }
  return m;
}

struct ShardSet {
  std::string what;  // "tokens:GLOB"
  std::vector<Shard> shards;
  std::vector<int64_t> first_window;  // first global window of each shard, plus the total at the end
  int64_t total_tokens = 0;
  int64_t max_id = 0;
  std::string max_id_file;  // the first file holding max_id

  int64_t windows() const { return first_window.back(); }
  TokenShardView window(int64_t w, int64_t T) const {
    auto it = std::upper_bound(first_window.begin(), first_window.end(), w);
    size_t s = static_cast<size_t>(it - first_window.begin()) - 1;
    return shards[s].tokens.from((w - first_window[s]) * T);
  }
};

// Validates and maps one shard.
Shard open_shard(const std::string& path, const std::string& what, int64_t T) {
  Shard s;
  s.file = std::make_unique<MappedFile>(path, what);
  s.tokens = parse_token_shard(s.file->data(), s.file->size(), path, what);
  s.windows = s.tokens.n_tokens >= T + 1 ? (s.tokens.n_tokens - 1) / T : 0;
  return s;
}

std::shared_ptr<const ShardSet> open_shards(const std::string& pattern, int64_t T) {
  auto set = std::make_shared<ShardSet>();
  set->what = "tokens:" + pattern;
  set->first_window.push_back(0);
  for (const std::string& path : expand_glob(pattern, set->what)) {
    Shard s = open_shard(path, set->what, T);
    const int64_t m = max_token(s.tokens);
    if (m > set->max_id || set->max_id_file.empty()) {
      set->max_id = std::max(set->max_id, m);
      set->max_id_file = path;
    }
    set->total_tokens += s.tokens.n_tokens;
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
    vocab_origin_ = str("token id ", set_->max_id, " in ", set_->what, " file '", set_->max_id_file, "'");
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

namespace {
bool one_byte_off(int32_t value, int32_t magic) {
  const uint32_t diff = static_cast<uint32_t>(value) ^ static_cast<uint32_t>(magic);
  int bytes_off = 0;
  for (int b = 0; b < 4; ++b) bytes_off += (diff >> (8 * b)) & 0xff ? 1 : 0;
  return bytes_off == 1;
}
}  // namespace

TokenShardView parse_token_shard(const unsigned char* p, size_t size, const std::string& path, const std::string& what) {
  int32_t first = 0;
  if (size >= sizeof(int32_t)) std::memcpy(&first, p, sizeof first);
  auto corrupt = [&](auto&&... why) { throw_usage(what, ": corrupt token shard '", path, "': ", why...); };
  const ShardLayout* layout = nullptr;
  for (const ShardLayout& l : kShardLayouts)
    if (size >= sizeof(int32_t) && first == l.magic) layout = &l;
  if (size >= sizeof(int32_t) && !layout) {
    for (const ShardLayout& l : kShardLayouts)
      if (one_byte_off(first, l.magic))
        corrupt("it starts with ", first, ", one byte off the llm.c magic ", l.magic,
                ": a damaged header (a headerless token file differs from the magic in two or more of its first 4 bytes)");
    int32_t rest[2] = {0, -1};
    if (size >= kShardHeaderBytes) std::memcpy(rest, p + sizeof(int32_t), sizeof rest);
    for (const ShardLayout& l : kShardLayouts)
      if (rest[0] == l.version && rest[1] >= 0 &&
          size - kShardHeaderBytes == static_cast<size_t>(l.token_bytes) * static_cast<size_t>(rest[1]))
        corrupt("its header says version ", l.version, ", ", rest[1], " tokens, as an llm.c header for a file of ", size,
                " bytes does, but its magic is ", first, " instead of ", l.magic, ": a damaged header");
  }
  TokenShardView view;
  if (layout) {
    if (size < kShardHeaderBytes)
      corrupt("it starts with the llm.c magic ", layout->magic, " but is only ", size, " bytes, shorter than the ",
              kShardHeaderBytes, "-byte header");
    int32_t header[3];
    std::memcpy(header, p, sizeof header);
    if (header[1] != layout->version)
      corrupt("header version is ", header[1], ", expected ", layout->version, " with the magic ", layout->magic, " (",
              layout->token_type, " tokens)");
    if (header[2] < 0) corrupt("header says ", header[2], " tokens");
    const size_t body = size - kShardHeaderBytes, width = static_cast<size_t>(layout->token_bytes);
    if (body != width * static_cast<size_t>(header[2])) {
      const size_t stray = body % width;
      if (stray == 1)
        corrupt("header says ", header[2], " tokens but the file holds ", body / width, " tokens and a stray byte");
      if (stray > 1)
        corrupt("header says ", header[2], " tokens but the file holds ", body / width, " tokens and ", stray, " stray bytes");
      corrupt("header says ", header[2], " tokens but the file holds ", body / width);
    }
    view.tokens = p + kShardHeaderBytes;
    view.n_tokens = header[2];
    view.token_bytes = layout->token_bytes;
  } else {
    if (size % 2)
      corrupt("a headerless uint16 token file must have an even size, but it has ", size,
              " bytes (an llm.c shard would start with the magic ", kShardLayouts[0].magic, ")");
    view.tokens = p;
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
