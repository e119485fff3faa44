// GPT-2's byte-level BPE: loading vocab.json + merges.txt (or tokenizer.json), the pre-tokenizer
// scanner, merging and decoding. See gpt2_tokenizer.hpp for the rules.
#include "dl/data/gpt2_tokenizer.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "dl/core/error.hpp"
#include "dl/data/bpe_merge.hpp"
#include "dl/data/text_pieces.hpp"
#include "dl/io/input_file.hpp"

namespace dl {

namespace {

namespace fs = std::filesystem;

using data::char_class;
using data::Cls;
using data::kLetter;
using data::kNumber;
using data::kOther;
using data::kSpace;
using data::SmallClassTable;
using data::small_classes;

size_t piece_end(const unsigned char* p, size_t i, size_t n, const SmallClassTable& t) {
  return data::gpt2_piece_end(p, i, n, t);
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// Decodes a vocabulary string (GPT-2's printable spelling) to the bytes it stands for. A code
// point outside the byte map (an added token spelled in plain UTF-8) keeps its UTF-8 bytes.
std::string token_bytes_of(const std::string& spelled) {
  static const auto inverse = [] {
    std::vector<int> inv(0x200, -1);
    for (int b = 0; b < 256; ++b) inv[gpt2_byte_to_unicode(static_cast<unsigned char>(b))] = b;
    return inv;
  }();
  std::string out;
  const auto* p = reinterpret_cast<const unsigned char*>(spelled.data());
  const size_t n = spelled.size();
  for (size_t i = 0; i < n;) {
    uint32_t cp = p[i];
    size_t len = 1;
    if (cp >= 0xC0 && cp < 0xE0 && i + 1 < n) {
      cp = ((cp & 0x1Fu) << 6) | (p[i + 1] & 0x3Fu);
      len = 2;
    } else if (cp >= 0xE0) {
      len = cp >= 0xF0 ? 4 : 3;
    }
    if (cp < inverse.size() && len <= 2 && inverse[cp] >= 0) out.push_back(static_cast<char>(inverse[cp]));
    else out.append(spelled, i, std::min(len, n - i));
    i += len;
  }
  return out;
}

nlohmann::json parse_json_text(const std::string& text, const fs::path& path) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw_usage(path.string(), ": not valid JSON (", e.what(), ")");
  }
}

// The folder's tokenizer files as the in-memory constructor takes them: vocab.json and merges.txt
// where either exists, else tokenizer.json (regular files only: io/input_file).
Gpt2Tokenizer::Files read_tokenizer_files(const std::string& dir) {
  const fs::path d(dir);
  if (!fs::is_directory(d)) throw_usage("tokenizer folder '", dir, "' does not exist (gpt2:DIR names a folder)");
  Gpt2Tokenizer::Files files;
  for (const char* name : {"vocab.json", "merges.txt"})
    if (fs::exists(d / name)) files[name] = read_input_file(d / name, "cannot read the tokenizer file");
  if (files.empty() && fs::exists(d / "tokenizer.json"))
    files["tokenizer.json"] = read_input_file(d / "tokenizer.json", "cannot read the tokenizer file");
  return files;
}

}  // namespace

uint32_t gpt2_byte_to_unicode(unsigned char b) {
  // Printable Latin-1 bytes stand for themselves; the other 68 take U+0100.. in byte order.
  auto printable = [](int c) { return (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF); };
  if (printable(b)) return b;
  uint32_t k = 0;
  for (int c = 0; c < b; ++c) k += printable(c) ? 0 : 1;
  return 0x100 + k;
}

struct Gpt2Tokenizer::PairTable : data::BpePairTable {
  using BpePairTable::BpePairTable;
};

Gpt2Tokenizer::~Gpt2Tokenizer() = default;

Gpt2Tokenizer::Gpt2Tokenizer(const std::string& dir) : Gpt2Tokenizer(read_tokenizer_files(dir), dir) {}

Gpt2Tokenizer::Gpt2Tokenizer(const Files& files, const std::string& dir) : dir_(dir) {
  const fs::path d(dir);
  const fs::path vocab_path = d / "vocab.json", merges_path = d / "merges.txt", tok_path = d / "tokenizer.json";
  const auto vocab_text = files.find("vocab.json"), merges_text = files.find("merges.txt"),
             tok_text = files.find("tokenizer.json");
  const bool have_pair = vocab_text != files.end() || merges_text != files.end();
  nlohmann::json vocab;
  std::vector<std::pair<std::string, std::string>> merges;  // spelled
  std::vector<std::string> merge_where;                      // "merges.txt:LINE" for messages
  std::string vocab_file;
  if (have_pair) {
    if (vocab_text == files.end()) throw_usage(vocab_path.string(), ": missing (", merges_path.string(), " needs it)");
    if (merges_text == files.end()) throw_usage(merges_path.string(), ": missing (", vocab_path.string(), " needs it)");
    vocab_file = vocab_path.string();
    vocab = parse_json_text(vocab_text->second, vocab_path);
    const std::string& text = merges_text->second;
    size_t line_no = 0;
    for (size_t pos = 0; pos < text.size();) {
      size_t eol = text.find('\n', pos);
      if (eol == std::string::npos) eol = text.size();
      std::string_view line(text.data() + pos, eol - pos);
      pos = eol + 1;
      ++line_no;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line_no == 1 && line.starts_with("#version")) continue;
      const size_t sp = line.find(' ');
      if (sp == 0 || sp == std::string_view::npos || sp + 1 == line.size() || line.find(' ', sp + 1) != std::string_view::npos)
        throw_usage(merges_path.string(), ":", line_no, ": malformed merge '", line,
                    "': expected two tokens separated by one space, e.g. 'Ġ t'");
      merges.emplace_back(std::string(line.substr(0, sp)), std::string(line.substr(sp + 1)));
      merge_where.push_back(merges_path.string() + ":" + std::to_string(line_no));
    }
    files_ = {vocab_path.string(), merges_path.string()};
  } else if (tok_text != files.end()) {
    vocab_file = tok_path.string();
    const nlohmann::json j = parse_json_text(tok_text->second, tok_path);
    if (!j.contains("model") || !j["model"].is_object() || j["model"].value("type", "") != "BPE")
      throw_usage(tok_path.string(), ": model.type is not \"BPE\" (a GPT-2 tokenizer.json has a BPE model)");
    const auto& m = j["model"];
    if (!m.contains("vocab") || !m["vocab"].is_object()) throw_usage(tok_path.string(), ": model.vocab is missing");
    if (!m.contains("merges") || !m["merges"].is_array()) throw_usage(tok_path.string(), ": model.merges is missing");
    vocab = m["vocab"];
    size_t k = 0;
    for (const auto& e : m["merges"]) {
      const std::string where = tok_path.string() + ": model.merges[" + std::to_string(k++) + "]";
      if (e.is_string()) {
        const std::string s = e.get<std::string>();
        const size_t sp = s.find(' ');
        if (sp == 0 || sp == std::string::npos || sp + 1 == s.size() || s.find(' ', sp + 1) != std::string::npos)
          throw_usage(where, ": malformed merge '", s, "': expected two tokens separated by one space");
        merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
        merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
      } else {
        throw_usage(where, ": malformed merge ", e.dump(), ": expected \"A B\" or [\"A\", \"B\"]");
      }
      merge_where.push_back(where);
    }
    if (j.contains("added_tokens") && j["added_tokens"].is_array())
      for (const auto& t : j["added_tokens"])
        if (t.contains("content") && t["content"].is_string() && t.contains("id") && !vocab.contains(t["content"].get<std::string>()))
          vocab[t["content"].get<std::string>()] = t["id"];
    files_ = {tok_path.string()};
  } else {
    throw_usage("tokenizer folder '", dir, "' holds neither vocab.json + merges.txt nor tokenizer.json");
  }

  // The vocabulary: ids 0..N-1, each once.
  if (!vocab.is_object() || vocab.empty())
    throw_usage(vocab_file, ": the vocabulary is not a JSON object of token -> id");
  const size_t n = vocab.size();
  std::vector<std::string> bytes_of(n);
  std::vector<bool> seen(n, false);
  std::unordered_map<std::string, int32_t> id_of_spelled;
  id_of_spelled.reserve(n);
  for (const auto& [spelled, v] : vocab.items()) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= static_cast<int64_t>(n))
      throw_usage(vocab_file, ": token '", spelled, "' has id ", v.dump(), "; the ", n,
                  " tokens must have the ids 0..", n - 1);
    const auto id = static_cast<int32_t>(v.get<int64_t>());
    if (seen[static_cast<size_t>(id)])
      throw_usage(vocab_file, ": id ", id, " is given to two tokens (one is '", spelled, "')");
    seen[static_cast<size_t>(id)] = true;
    bytes_of[static_cast<size_t>(id)] = token_bytes_of(spelled);
    id_of_spelled.emplace(spelled, id);
  }
  token_offset_.reserve(n + 1);
  token_offset_.push_back(0);
  for (const std::string& b : bytes_of) {
    token_bytes_ += b;
    token_offset_.push_back(static_cast<uint32_t>(token_bytes_.size()));
  }
  for (int b = 0; b < 256; ++b) {
    std::string spelled;
    append_utf8(spelled, gpt2_byte_to_unicode(static_cast<unsigned char>(b)));
    auto it = id_of_spelled.find(spelled);
    if (it == id_of_spelled.end())
      throw_usage(vocab_file, ": no token for the byte 0x", "0123456789abcdef"[b >> 4], "0123456789abcdef"[b & 15],
                  " (spelled '", spelled, "'); a byte-level BPE vocabulary holds all 256 bytes");
    byte_token_[b] = it->second;
  }
  if (auto it = id_of_spelled.find("<|endoftext|>"); it != id_of_spelled.end()) end_of_text_ = it->second;
  else throw_usage(vocab_file, ": no <|endoftext|> token (GPT-2 puts it between documents)");

  pairs_ = std::make_unique<PairTable>(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto& [a, b] = merges[r];
    auto ia = id_of_spelled.find(a), ib = id_of_spelled.find(b), im = id_of_spelled.find(a + b);
    for (auto [it, s] : {std::pair{ia, &a}, std::pair{ib, &b}})
      if (it == id_of_spelled.end())
        throw_usage(merge_where[r], ": merge '", a, " ", b, "' names the token '", *s, "', which ", vocab_file,
                    " does not hold");
    if (im == id_of_spelled.end())
      throw_usage(merge_where[r], ": merge '", a, " ", b, "' makes '", a + b, "', which ", vocab_file,
                  " does not hold");
    if (!pairs_->insert(ia->second, ib->second, static_cast<uint32_t>(r), im->second))
      throw_usage(merge_where[r], ": merge '", a, " ", b, "' is listed twice");
  }
}

void Gpt2Tokenizer::encode_append(std::string_view text, std::vector<int32_t>& out, Cache& cache) const {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  const SmallClassTable& t = small_classes();
  for (size_t i = 0; i < n;) {
    const size_t e = piece_end(p, i, n, t);
    const size_t len = e - i;
    if (len == 1) {
      out.push_back(byte_token_[p[i]]);
      i = e;
      continue;
    }
    const std::string_view piece(text.data() + i, len);
    i = e;
    if (auto it = cache.map_.find(piece); it != cache.map_.end()) {
      const int32_t* ids = cache.pool_.data() + it->second.first;
      out.insert(out.end(), ids, ids + it->second.count);
      continue;
    }
    // Merge: repeatedly the lowest-ranked adjacent pair, the leftmost of equal ranks.
    auto& parts = cache.parts_;
    parts.resize(len);
    for (size_t k = 0; k < len; ++k) parts[k] = byte_token_[static_cast<unsigned char>(piece[k])];
    data::merge_lowest_rank_first(parts, cache.ranks_, *pairs_);
    if (cache.map_.size() >= Cache::kMaxEntries) {
      cache.map_.clear();
      cache.pool_.clear();
    }
    cache.map_.emplace(std::string(piece), Cache::Span{static_cast<uint32_t>(cache.pool_.size()),
                                                      static_cast<uint32_t>(parts.size())});
    cache.pool_.insert(cache.pool_.end(), parts.begin(), parts.end());
    out.insert(out.end(), parts.begin(), parts.end());
  }
}

std::vector<int32_t> Gpt2Tokenizer::encode(const std::string& text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3);
  auto cache = make_cache();
  encode_append(text, ids, *cache);
  return ids;
}

std::string Gpt2Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) {
    if (id >= 0 && id < vocab_size()) {
      const auto k = static_cast<size_t>(id);
      out.append(token_bytes_, token_offset_[k], token_offset_[k + 1] - token_offset_[k]);
    } else {
      out += "\xEF\xBF\xBD";
    }
  }
  return out;
}

size_t Gpt2Tokenizer::split_point(std::string_view text, size_t from) const {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  const SmallClassTable& t = small_classes();
  // Start at an ASCII byte: no UTF-8 sequence holds one, so characters read from there on are the
  // ones a scan from the start reads, even through invalid bytes.
  size_t i = std::min(from, n);
  while (i < n && p[i] >= 0x80) ++i;
  if (i == 0) return 0;
  Cls prev_cls = kOther;
  bool prev_known = p[i - 1] < 0x80;  // the character before i, when it is ASCII
  if (prev_known) prev_cls = t.cls[p[i - 1]];
  while (i < n) {
    size_t len = 0;
    const Cls c = char_class(p + i, n - i, t, len);
    // A: ' ' after printable ASCII: the piece before ends there, and the scan from here is the same.
    if (p[i] == ' ' && prev_known && p[i - 1] > 0x20 && p[i - 1] < 0x7F) return i;
    // B: a letter or number run ends at a non-space character of another class (a contraction
    // that holds the letter ends with it: 's 't 'm 'd, or 're 've 'll whose last two are letters).
    if (prev_known && (prev_cls == kLetter || prev_cls == kNumber) && c != kSpace && c != prev_cls) return i;
    prev_cls = c;
    prev_known = true;
    i += len;
  }
  return n;
}

namespace {
class Gpt2Encoder final : public Tokenizer::Encoder {
 public:
  explicit Gpt2Encoder(const Gpt2Tokenizer& t) : t_(t) {}
  void encode_append(std::string_view text, std::vector<int32_t>& out) override { t_.encode_append(text, out, cache_); }

 private:
  const Gpt2Tokenizer& t_;
  Gpt2Tokenizer::Cache cache_;
};
}  // namespace

std::unique_ptr<Tokenizer::Encoder> Gpt2Tokenizer::make_encoder() const { return std::make_unique<Gpt2Encoder>(*this); }

std::vector<std::string_view> gpt2_pieces(std::string_view text) {
  std::vector<std::string_view> pieces;
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  for (size_t i = 0; i < text.size();) {
    const size_t e = piece_end(p, i, text.size(), small_classes());
    pieces.push_back(text.substr(i, e - i));
    i = e;
  }
  return pieces;
}

std::string utf8_for_display(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  for (size_t i = 0; i < n;) {
    const unsigned char b = p[i];
    if (b < 0x80) {
      out.push_back(static_cast<char>(b));
      ++i;
      continue;
    }
    size_t need = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) need = 2;
    else if (b >= 0xE0 && b <= 0xEF) need = 3, lo = b == 0xE0 ? 0xA0 : 0x80, hi = b == 0xED ? 0x9F : 0xBF;
    else if (b >= 0xF0 && b <= 0xF4) need = 4, lo = b == 0xF0 ? 0x90 : 0x80, hi = b == 0xF4 ? 0x8F : 0xBF;
    // The well-formed prefix: the lead byte, then continuation bytes in range.
    size_t k = 1;
    if (need > 0 && i + 1 < n && p[i + 1] >= lo && p[i + 1] <= hi) {
      k = 2;
      while (k < need && i + k < n && (p[i + k] & 0xC0) == 0x80) ++k;
    }
    if (need > 0 && k == need) out.append(bytes.substr(i, need));
    else out += "\xEF\xBF\xBD";
    i += k;
  }
  return out;
}

}  // namespace dl
