// Tokenizing text files with every core: in-process (text: data with a GPT-2 tokenizer) or into
// llm.c token shards (dl-train tokenize).
//
// The stream of a list of files is ids(file 1), separator, ids(file 2), ..., ids(file N), the
// separator being the tokenizer's document separator (GPT-2's <|endoftext|>) when it has one.
// Files are cut into chunks of about chunk_bytes at the tokenizer's split points, chunks are
// encoded on `threads` threads a batch at a time and consumed in order, so the ids are the same
// for any thread count and memory is bounded by a batch of chunks (files are memory-mapped).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "dl/data/dataset.hpp"

namespace dl {

// Files named by each source, in order: a path, or a glob whose matches are taken sorted.
// Throws dl::Error(usage) naming a source that matches nothing.
std::vector<std::string> expand_text_sources(const std::vector<std::string>& sources, std::string_view what);

struct TokenStreamOptions {
  int threads = 0;                  // 0: every core
  size_t chunk_bytes = size_t{1} << 20;
  // Byte offset of the whole stream (files back to back) where a second part begins, moved on to
  // the next split point; npos: one part. on_ids then says which part ids belong to.
  uint64_t second_part_at = UINT64_MAX;
};

struct TokenStreamStats {
  uint64_t bytes = 0;           // text read
  double encode_seconds = 0;    // wall time of the threads' encoding, without reading and writing
};

// Calls on_ids(ids, part) for consecutive runs of the stream, in order.
TokenStreamStats tokenize_stream(const Tokenizer& tok, const std::vector<std::string>& files, const TokenStreamOptions& o,
                         const std::function<void(const std::vector<int32_t>& ids, int part)>& on_ids);

// The whole stream in memory.
std::vector<int32_t> tokenize_files(const Tokenizer& tok, const std::vector<std::string>& files, int threads = 0);

struct TokenizeOptions {
  std::vector<std::string> sources;  // files or globs
  std::string out_dir;
  int64_t shard_tokens = 100'000'000;  // tokens per shard (llm.c's fineweb shards hold 1e8)
  double val_fraction = 0.0;           // this share of the bytes, at the end, goes to val_*.bin
  int threads = 0;
  size_t chunk_bytes = size_t{1} << 20;  // text per task of a thread
};

struct TokenizeSummary {
  int64_t files = 0;
  uint64_t bytes = 0;
  int64_t train_tokens = 0, val_tokens = 0;
  std::vector<std::string> shards;  // written, in order: train_000000.bin ..., val_000000.bin ...
  std::vector<int64_t> shard_tokens;
  int token_bytes = 2;        // 2: uint16 tokens (magic 20240520), 4: uint32 (magic 20240801)
  double seconds = 0;         // all of it: reading, encoding, writing the shards (with fsync)
  double encode_seconds = 0;  // the threads' encoding alone
};

// Writes OUT_DIR/train_NNNNNN.bin (and val_NNNNNN.bin) as llm.c shards, each atomically: a 256 x
// int32 header (20240520, 1, token count) and uint16 tokens when the tokenizer's vocabulary fits
// 16 bits (at most 65,536 ids), else (20240801, 7, token count) and uint32 tokens (Llama 3's,
// Qwen2's vocabularies; data/sources.hpp's kShardLayouts). Throws dl::Error(usage) for a missing
// source or an out_dir that already holds shards.
TokenizeSummary tokenize_to_shards(const Tokenizer& tok, const TokenizeOptions& o);

// stdout of dl-train tokenize: one "PATH<TAB>TOKENS" line per shard written.
std::string format_tokenize_shards(const TokenizeSummary& s);
// stderr: files, bytes, tokens per split, seconds and MB/s.
std::string describe_tokenize_summary(const TokenizeSummary& s);

}  // namespace dl
