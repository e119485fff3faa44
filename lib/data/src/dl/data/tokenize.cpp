// Tokenizing text files in chunks on every core (tokenize.hpp).
#include "dl/data/tokenize.hpp"

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <thread>

#include "dl/core/error.hpp"
#include "dl/core/option_error.hpp"
#include "dl/data/sources.hpp"
#include "dl/io/atomic_file.hpp"

namespace dl {

namespace fs = std::filesystem;
using data::MappedFile;

std::vector<std::string> expand_text_sources(const std::vector<std::string>& sources, std::string_view what) {
  std::vector<std::string> files;
  for (const std::string& s : sources) {
    auto matched = data::expand_glob(s, str(what, " '", s, "'"));
    files.insert(files.end(), matched.begin(), matched.end());
  }
  if (files.empty()) throw_usage(what, ": no text files given");
  return files;
}

namespace {

struct Chunk {
  std::shared_ptr<const MappedFile> file;
  size_t begin = 0, end = 0;
  int part = 0;
  bool ends_file = false;  // the separator follows (unless this is the last file)
  std::vector<int32_t> ids;
};

int thread_count(int threads) {
  if (threads > 0) return threads;
  const unsigned hw = std::thread::hardware_concurrency();
  return hw > 0 ? static_cast<int>(hw) : 1;
}

}  // namespace

TokenStreamStats tokenize_stream(const Tokenizer& tok, const std::vector<std::string>& files, const TokenStreamOptions& o,
                         const std::function<void(const std::vector<int32_t>& ids, int part)>& on_ids) {
  const int threads = thread_count(o.threads);
  const size_t batch_size = static_cast<size_t>(threads) * 2;
  const size_t chunk_bytes = std::max<size_t>(o.chunk_bytes, 1);
  std::vector<std::unique_ptr<Tokenizer::Encoder>> encoders;
  for (int t = 0; t < threads; ++t) encoders.push_back(tok.make_encoder());
  const std::optional<int32_t> sep = tok.document_separator();

  TokenStreamStats stats;
  std::vector<Chunk> batch;
  auto run_batch = [&] {
    std::atomic<size_t> next{0};
    auto work = [&](int t) {
      for (size_t k; (k = next.fetch_add(1)) < batch.size();) {
        Chunk& c = batch[k];
        const std::string_view text(reinterpret_cast<const char*>(c.file->data()) + c.begin, c.end - c.begin);
        c.ids.reserve(text.size() / 3);
        // A chunk after a split point continues its file's document.
        if (c.begin > 0) encoders[static_cast<size_t>(t)]->encode_append_continued(text, c.ids);
        else encoders[static_cast<size_t>(t)]->encode_append(text, c.ids);
      }
    };
    const auto t0 = std::chrono::steady_clock::now();
    const int used = static_cast<int>(std::min<size_t>(static_cast<size_t>(threads), batch.size()));
    if (used <= 1) {
      work(0);
    } else {
      std::vector<std::thread> pool;
      for (int t = 1; t < used; ++t) pool.emplace_back(work, t);
      work(0);
      for (auto& th : pool) th.join();
    }
    stats.encode_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (Chunk& c : batch) {
      on_ids(c.ids, c.part);
      if (c.ends_file && sep) on_ids({*sep}, c.part);
    }
    batch.clear();
  };

  uint64_t file_start = 0;
  int part = 0;
  for (size_t f = 0; f < files.size(); ++f) {
    auto file = std::make_shared<const MappedFile>(files[f], "tokenize");
    const size_t size = file->size();
    const std::string_view text(reinterpret_cast<const char*>(file->data()), size);
    // Where the second part starts in this file, if it does.
    size_t second = SIZE_MAX;
    if (part == 0 && o.second_part_at != UINT64_MAX && o.second_part_at < file_start + size)
      second = tok.split_point(text, o.second_part_at > file_start ? o.second_part_at - file_start : 0);
    for (size_t pos = 0; pos < size;) {
      size_t end = pos + chunk_bytes >= size ? size : tok.split_point(text, pos + chunk_bytes);
      if (second > pos && second < end) end = second;
      if (pos == second) part = 1;
      batch.push_back({file, pos, end, part, end == size && f + 1 < files.size(), {}});
      if (batch.size() == batch_size) run_batch();
      pos = end;
    }
    if (second == size) part = 1;  // the split fell at the file's end: the next file starts part 1
    if (size == 0 && f + 1 < files.size() && sep) batch.push_back({file, 0, 0, part, true, {}});
    file_start += size;
  }
  if (!batch.empty()) run_batch();
  stats.bytes = file_start;
  return stats;
}

std::vector<int32_t> tokenize_files(const Tokenizer& tok, const std::vector<std::string>& files, int threads) {
  std::vector<int32_t> out;
  TokenStreamOptions o;
  o.threads = threads;
  tokenize_stream(tok, files, o, [&](const std::vector<int32_t>& ids, int) { out.insert(out.end(), ids.begin(), ids.end()); });
  return out;
}

namespace {

// Gathers one split's tokens and writes them as numbered llm.c shards of one layout.
class ShardWriter {
 public:
  ShardWriter(fs::path dir, std::string prefix, int64_t shard_tokens, const data::ShardLayout& layout, int64_t vocab,
              TokenizeSummary& summary)
      : dir_(std::move(dir)), prefix_(std::move(prefix)), cap_(shard_tokens), layout_(layout), vocab_(vocab),
        summary_(summary) {}
  void add(const std::vector<int32_t>& ids) {
    for (int32_t id : ids) {
      // A tokenizer keeps its ids below its vocabulary; one that did not would be cut to 16 bits.
      if (id < 0 || id >= vocab_) throw_runtime("tokenize: id ", id, " is outside the tokenizer's vocabulary of ", vocab_);
      if (layout_.token_bytes == 2) narrow_.push_back(static_cast<uint16_t>(id));
      else wide_.push_back(static_cast<uint32_t>(id));
      if (size() == cap_) flush();
    }
  }
  void flush() {
    if (size() == 0) return;
    char name[64];
    std::snprintf(name, sizeof name, "%s_%06d.bin", prefix_.c_str(), index_++);
    int32_t header[256] = {};
    header[0] = layout_.magic;
    header[1] = layout_.version;
    header[2] = static_cast<int32_t>(size());
    AtomicFileWriter w(dir_ / name);
    w.write(header, sizeof header);
    if (layout_.token_bytes == 2) w.write(narrow_.data(), narrow_.size() * sizeof(uint16_t));
    else w.write(wide_.data(), wide_.size() * sizeof(uint32_t));
    w.commit();
    summary_.shards.push_back((dir_ / name).string());
    summary_.shard_tokens.push_back(size());
    narrow_.clear();
    wide_.clear();
  }

 private:
  int64_t size() const { return static_cast<int64_t>(narrow_.size() + wide_.size()); }
  fs::path dir_;
  std::string prefix_;
  int64_t cap_;
  const data::ShardLayout& layout_;
  int64_t vocab_;
  TokenizeSummary& summary_;
  std::vector<uint16_t> narrow_;
  std::vector<uint32_t> wide_;
  int index_ = 0;
};

}  // namespace

TokenizeSummary tokenize_to_shards(const Tokenizer& tok, const TokenizeOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  // uint16 tokens (GPT-2's layout, what every reader of llm.c shards takes) while the ids fit.
  const int64_t vocab = tok.vocab_size();
  if (vocab <= 0 || vocab > INT32_MAX)
    throw_usage("the ", tok.name(), " tokenizer has a vocabulary of ", vocab, " ids; token shards hold 1..", INT32_MAX);
  const data::ShardLayout& layout = data::kShardLayouts[vocab <= 65536 ? 0 : 1];
  if (o.shard_tokens < 1 || o.shard_tokens > INT32_MAX)
    throw_option_error("{shard_tokens} ", o.shard_tokens, " must be in 1..", INT32_MAX, " (the shard header counts in int32)");
  if (!(o.val_fraction >= 0 && o.val_fraction < 1))
    throw_option_error("{val_fraction} ", o.val_fraction, " must be in [0, 1)");
  const std::vector<std::string> files = expand_text_sources(o.sources, "tokenize");
  const fs::path dir(o.out_dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) throw_usage(o.out_dir, ": cannot create the output folder (", ec.message(), ")");
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if ((n.starts_with("train_") || n.starts_with("val_")) && n.ends_with(".bin"))
      throw_usage(o.out_dir, ": already holds token shards (", n,
                  "); a glob over the folder would mix old and new shards, so use an empty folder");
  }
  uint64_t total = 0;
  for (const std::string& f : files) total += fs::file_size(f);

  TokenizeSummary s;
  s.files = static_cast<int64_t>(files.size());
  s.token_bytes = layout.token_bytes;
  ShardWriter train(dir, "train", o.shard_tokens, layout, vocab, s), val(dir, "val", o.shard_tokens, layout, vocab, s);
  TokenStreamOptions so;
  so.threads = o.threads;
  so.chunk_bytes = o.chunk_bytes;
  if (o.val_fraction > 0)
    so.second_part_at = total - static_cast<uint64_t>(static_cast<double>(total) * o.val_fraction + 0.5);
  const TokenStreamStats st = tokenize_stream(tok, files, so, [&](const std::vector<int32_t>& ids, int part) {
    (part == 0 ? s.train_tokens : s.val_tokens) += static_cast<int64_t>(ids.size());
    (part == 0 ? train : val).add(ids);
  });
  s.bytes = st.bytes;
  s.encode_seconds = st.encode_seconds;
  train.flush();
  val.flush();
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return s;
}

std::string format_tokenize_shards(const TokenizeSummary& s) {
  std::string out;
  for (size_t i = 0; i < s.shards.size(); ++i) out += s.shards[i] + "\t" + std::to_string(s.shard_tokens[i]) + "\n";
  return out;
}

std::string describe_tokenize_summary(const TokenizeSummary& s) {
  const double mb = static_cast<double>(s.bytes) / 1e6;
  return str("tokenized ", s.files, " file(s), ", mb, " MB: ", s.train_tokens, " train + ", s.val_tokens,
             " val tokens in ", s.shards.size(), " shard(s) of ", s.token_bytes == 2 ? "uint16" : "uint32", " tokens, ", s.seconds, " s (", s.seconds > 0 ? mb / s.seconds : 0.0,
             " MB/s; encoding ", s.encode_seconds, " s, ", s.encode_seconds > 0 ? mb / s.encode_seconds : 0.0,
             " MB/s)\n");
}

}  // namespace dl
