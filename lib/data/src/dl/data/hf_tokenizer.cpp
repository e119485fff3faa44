// Hugging Face tokenizer.json (BPE model): reading the file into a fixed pipeline, encoding as
// `tokenizers` does, decoding through the file's decoder chain. See hf_tokenizer.hpp.
#include "dl/data/hf_tokenizer.hpp"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_map>

#include "dl/core/error.hpp"
#include "dl/data/gpt2_tokenizer.hpp"
#include "dl/data/bpe_merge.hpp"
#include "dl/data/text_pieces.hpp"
#include "dl/data/unicode_nfc.hpp"
#include "dl/io/input_file.hpp"

namespace dl {

namespace hf_detail {

using json = nlohmann::json;

enum class Scan { none, gpt2, llama3, qwen2 };
enum class Prepend { always, first, never };

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using IdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

struct Rewrite {  // a normalizer step: Prepend (from empty), Replace (from -> to) or NFC
  bool prepend = false;
  std::string from, to;
  bool nfc = false;
};

struct DecodeStep {
  enum Kind { byte_level, replace, byte_fallback, fuse, strip, metaspace } kind;
  std::string a, b;  // replace: a -> b; strip: a is the character; metaspace: a is the replacement
  int64_t start = 0, stop = 0;
  bool metaspace_first = true;  // metaspace: its prepend_scheme is not "never"
};

struct AddedToken {
  std::string content;
  int32_t id;
};

// Leftmost-longest matching of a set of strings (the added tokens), as the aho-corasick search
// of `tokenizers` with MatchKind::LeftmostLongest finds them.
class Matcher {
 public:
  void add(const std::string& s, int32_t id) {
    if (s.empty()) return;
    first_[static_cast<unsigned char>(s[0])] = true;
    tokens_.push_back({s, id});
  }
  void finish() {
    std::stable_sort(tokens_.begin(), tokens_.end(),
                     [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
  }
  bool empty() const { return tokens_.empty(); }
  // The first match at or after `from`: its start, length and id; npos when none.
  size_t find(std::string_view text, size_t from, size_t& len, int32_t& id) const {
    const auto* p = reinterpret_cast<const unsigned char*>(text.data());
    for (size_t i = from; i < text.size(); ++i) {
      if (!first_[p[i]]) continue;
      for (const AddedToken& t : tokens_)
        if (text.compare(i, t.content.size(), t.content) == 0) {
          len = t.content.size();
          id = t.id;
          return i;
        }
    }
    return std::string_view::npos;
  }
  bool any_contains(char c) const {
    return std::any_of(tokens_.begin(), tokens_.end(),
                       [c](const AddedToken& t) { return t.content.find(c) != std::string::npos; });
  }

 private:
  bool first_[256] = {};
  std::vector<AddedToken> tokens_;  // longest first
};

}  // namespace hf_detail

namespace fs = std::filesystem;
using hf_detail::AddedToken;
using hf_detail::json;
using hf_detail::DecodeStep;
using hf_detail::IdMap;
using hf_detail::Matcher;
using hf_detail::Prepend;
using hf_detail::Rewrite;
using hf_detail::Scan;
using hf_detail::StringHash;

namespace {

// The two patterns of Split that dlkit scans by hand (text_pieces.hpp), as tokenizer.json spells
// them, and GPT-2's (ByteLevel's use_regex, or a Split spelling it out).
constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// ByteLevel's spelling back to bytes: every character of `spelled` in the byte map becomes its
// byte; false (out untouched) when one is not, as tokenizers' ByteLevel decoder keeps such a token.
bool byte_level_bytes(std::string_view spelled, std::string& out) {
  static const auto inverse = [] {
    std::vector<int> inv(0x200, -1);
    for (int b = 0; b < 256; ++b) inv[gpt2_byte_to_unicode(static_cast<unsigned char>(b))] = b;
    return inv;
  }();
  const size_t start = out.size();
  const auto* p = reinterpret_cast<const unsigned char*>(spelled.data());
  for (size_t i = 0; i < spelled.size();) {
    uint32_t cp = p[i];
    size_t len = 1;
    if (cp >= 0xC0 && cp < 0xE0 && i + 1 < spelled.size()) {
      cp = ((cp & 0x1Fu) << 6) | (p[i + 1] & 0x3Fu);
      len = 2;
    } else if (cp >= 0x80) {
      out.resize(start);
      return false;
    }
    if (cp >= inverse.size() || inverse[cp] < 0) {
      out.resize(start);
      return false;
    }
    out.push_back(static_cast<char>(inverse[cp]));
    i += len;
  }
  return true;
}

// "<0xNN>" -> NN, else -1 (tokenizers' ByteFallback decoder and byte_fallback spelling).
int fallback_byte(std::string_view t) {
  if (t.size() != 6 || !t.starts_with("<0x") || t[5] != '>') return -1;
  auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; };
  const int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  std::string out;
  size_t pos = 0;
  for (size_t k; (k = s.find(from, pos)) != std::string::npos; pos = k + from.size()) {
    out.append(s, pos, k - pos);
    out += to;
  }
  if (pos == 0) return;
  out.append(s, pos);
  s = std::move(out);
}

// j[key] when it is there and not null, else `fallback` (tokenizer.json writes null for unset).
template <class T>
T get_or(const json& j, const char* key, T fallback) {
  if (!j.is_object() || !j.contains(key) || j[key].is_null()) return fallback;
  return j[key].get<T>();
}
std::string get_or(const json& j, const char* key, const char* fallback) { return get_or(j, key, std::string(fallback)); }

json parse_json(const std::string& text, const std::string& where) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw_usage(where, ": not valid JSON (", e.what(), ")");
  }
}

}  // namespace

using HfPairTable = data::BpePairTable;

// One thread's memory of merged pieces (bounded) and scratch.
struct HfCache {
  static constexpr size_t kMaxEntries = size_t{1} << 18;
  static constexpr size_t kMaxPiece = 256;  // longer pieces (whole SentencePiece lines) are not kept
  struct Span {
    uint32_t first, count;
  };
  std::unordered_map<std::string, Span, StringHash, std::equal_to<>> map;
  std::vector<int32_t> pool;
  std::vector<int32_t> parts;
  std::vector<uint32_t> ranks;
  std::string scratch, scratch2;
};

struct HfTokenizer::Impl {
  std::string dir;
  std::vector<std::string> files;
  // Model
  bool byte_level = false;        // the model's alphabet is ByteLevel's byte characters
  IdMap model_ids;                // model.vocab: byte-level tokens by their bytes, others as spelled
  IdMap spelled_ids;              // model.vocab and added tokens as spelled
  std::vector<std::string> spelled;  // by id ("" for an id nobody holds)
  std::vector<bool> held;
  int32_t unit_token[256];        // byte-level: each byte's token; otherwise each ASCII character's (-1: none)
  int32_t fallback_token[256];    // <0xNN> tokens when byte_fallback (-1: none)
  bool byte_fallback = false, fuse_unk = false, ignore_merges = false;
  int32_t unk = -1;
  std::unique_ptr<HfPairTable> pairs;
  // Added tokens: matched in the raw text (normalized false), then in normalized text (true).
  Matcher raw_added, normalized_added;
  // Normalizer, pre-tokenizer, decoder
  std::vector<Rewrite> rewrites;
  bool prefix_space = false;      // ByteLevel add_prefix_space
  Scan scan = Scan::none;
  bool metaspace = false, metaspace_split = false;
  std::string metaspace_char;     // UTF-8 of its replacement
  Prepend metaspace_prepend = Prepend::never;
  bool has_decoder = false;
  std::vector<DecodeStep> decoder;
  std::optional<int32_t> separator;
  std::optional<int32_t> bos, eos;  // tokenizer_config.json's bos_token and eos_token
  size_t n_model = 0, n_added = 0;
  std::vector<std::string> parts_desc;  // for describe()
  // Ids must lie below this (the vocabulary and added tokens, plus 2^20): ids may have holes, as in
  // tokenizers, but the tables indexed by id stay the size of the file, not of its largest number.
  int64_t id_limit = 0;

  // Where a document may be cut: 0 none, 1 before ' ' after printable ASCII, 2 after '\n'.
  int split_rule = 0;

  void load(const std::string& text, const std::string& config_text);
  void read_model(const json& m, const std::string& where);
  void read_normalizer(const json& n, const std::string& where);
  void read_pre_tokenizer(const json& p, const std::string& where, bool in_sequence);
  void read_decoder(const json& d, const std::string& where);
  void read_post_processor(const json& p, const std::string& where);

  void encode(std::string_view text, std::vector<int32_t>& out, HfCache& cache, bool continued) const;
  void encode_segment(std::string_view seg, std::vector<int32_t>& out, HfCache& cache, bool split_start,
                      bool at_origin) const;
  void encode_normalized(std::string_view s, std::vector<int32_t>& out, HfCache& cache, bool split_start,
                         bool at_origin) const;
  void encode_split(std::string_view s, std::vector<int32_t>& out, HfCache& cache, bool split_start,
                    bool at_origin) const;
  void bpe(std::string_view piece, std::vector<int32_t>& out, HfCache& cache) const;
  void merge_large(std::vector<int32_t>& parts) const;
};

namespace {

[[noreturn]] void unsupported(const std::string& file, const std::string& what, const std::string& type,
                              std::string_view supported) {
  throw_usage(file, ": ", what, " type \"", type, "\" is not supported (supported: ", supported, ")");
}

std::string type_of(const json& j) { return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : ""; }

// A pattern given as {"String": s} or {"Regex": r}: its text, and whether it is a regex.
std::pair<std::string, bool> pattern_of(const json& j, const std::string& where) {
  if (j.is_object() && j.contains("String") && j["String"].is_string()) return {j["String"].get<std::string>(), false};
  if (j.is_object() && j.contains("Regex") && j["Regex"].is_string()) return {j["Regex"].get<std::string>(), true};
  throw_usage(where, ": pattern must be {\"String\": ...} or {\"Regex\": ...}; got ", j.dump());
}

}  // namespace

void HfTokenizer::Impl::read_model(const json& m, const std::string& where) {
  if (!m.is_object()) throw_usage(where, ": model is missing");
  const std::string type = type_of(m);
  if (type.empty() && m.contains("merges") && m.contains("vocab")) {
    // tokenizers writes BPE models without "type" in some versions; the fields say what it is.
  } else if (type != "BPE") {
    throw_usage(where, ": model type \"", type, "\" is not supported (supported: BPE)");
  }
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (m.contains(k) && !m[k].is_null() && !(m[k].is_string() && m[k].get<std::string>().empty()))
      throw_usage(where, ": model.", k, " ", m[k].dump(), " is not supported (supported: null)");
  if (m.contains("dropout") && !m["dropout"].is_null() && !(m["dropout"].is_number() && m["dropout"].get<double>() == 0))
    throw_usage(where, ": model.dropout ", m["dropout"].dump(), " is not supported: BPE dropout samples different ids on ",
                "every call (supported: null)");
  byte_fallback = get_or(m, "byte_fallback", false);
  fuse_unk = get_or(m, "fuse_unk", false);
  ignore_merges = get_or(m, "ignore_merges", false);
  if (!m.contains("vocab") || !m["vocab"].is_object() || m["vocab"].empty())
    throw_usage(where, ": model.vocab is missing (a BPE model needs its token -> id object)");
  if (!m.contains("merges") || !m["merges"].is_array()) throw_usage(where, ": model.merges is missing");
  n_model = m["vocab"].size();
  IdMap model_spelled;
  model_spelled.reserve(n_model);
  for (const auto& [s, v] : m["vocab"].items()) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= id_limit)
      throw_usage(where, ": model.vocab: token '", s, "' has id ", v.dump(), "; ids are integers from 0 below ", id_limit,
                  " (the number of tokens plus 2^20: ids spread wider are not a vocabulary)");
    model_spelled[s] = static_cast<int32_t>(v.get<int64_t>());
  }
  for (const auto& [s, id] : model_spelled) {
    if (static_cast<size_t>(id) >= spelled.size()) {
      spelled.resize(static_cast<size_t>(id) + 1);
      held.resize(static_cast<size_t>(id) + 1, false);
    }
    spelled[static_cast<size_t>(id)] = s;
    held[static_cast<size_t>(id)] = true;
    spelled_ids[s] = id;
  }
  if (m.contains("unk_token") && !m["unk_token"].is_null()) {
    const std::string u = m["unk_token"].get<std::string>();
    auto it = model_spelled.find(u);
    if (it == model_spelled.end()) throw_usage(where, ": model.unk_token '", u, "' is not in model.vocab");
    unk = it->second;
  }
  // Merges; the merged token is the two spellings joined.
  const json& merges = m["merges"];
  pairs = std::make_unique<HfPairTable>(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    const json& e = merges[r];
    std::string a, b;
    if (e.is_string()) {
      const std::string s = e.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == 0 || sp == std::string::npos || sp + 1 == s.size() || s.find(' ', sp + 1) != std::string::npos)
        throw_usage(where, ": model.merges[", r, "]: malformed merge '", s, "': expected two tokens separated by one space");
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    } else {
      throw_usage(where, ": model.merges[", r, "]: malformed merge ", e.dump(), ": expected \"A B\" or [\"A\", \"B\"]");
    }
    auto ia = model_spelled.find(a), ib = model_spelled.find(b), im = model_spelled.find(a + b);
    for (auto [it, s] : {std::pair{ia, &a}, std::pair{ib, &b}})
      if (it == model_spelled.end())
        throw_usage(where, ": model.merges[", r, "]: merge '", a, " ", b, "' names the token '", *s, "', which model.vocab does not hold");
    if (im == model_spelled.end())
      throw_usage(where, ": model.merges[", r, "]: merge '", a, " ", b, "' makes '", a + b, "', which model.vocab does not hold");
    // A pair listed again takes the later rank, as tokenizers' merge map keeps the last.
    pairs->insert(ia->second, ib->second, static_cast<uint32_t>(r), im->second);
  }
  model_ids = std::move(model_spelled);
}

void HfTokenizer::Impl::read_normalizer(const json& n, const std::string& where) {
  if (n.is_null()) return;
  const std::string type = type_of(n);
  if (type == "Sequence") {
    if (!n.contains("normalizers") || !n["normalizers"].is_array()) throw_usage(where, ": normalizer Sequence has no normalizers");
    for (const json& x : n["normalizers"]) read_normalizer(x, where);
    return;
  }
  if (type == "Prepend") {
    rewrites.push_back({true, "", get_or(n, "prepend", "")});
    parts_desc.push_back("Prepend");
    return;
  }
  if (type == "Replace") {
    const auto [pat, regex] = pattern_of(get_or(n, "pattern", json()), where + ": normalizer Replace");
    if (regex) throw_usage(where, ": normalizer Replace with a Regex pattern is not supported (supported: a String pattern)");
    if (pat.empty()) throw_usage(where, ": normalizer Replace has an empty pattern");
    rewrites.push_back({false, pat, get_or(n, "content", "")});
    parts_desc.push_back("Replace");
    return;
  }
  if (type == "NFC") {
    rewrites.push_back({false, "", "", true});
    parts_desc.push_back("NFC");
    return;
  }
  unsupported(where, "normalizer", type, "NFC, Prepend, Replace with a String pattern, Sequence of those");
}

void HfTokenizer::Impl::read_pre_tokenizer(const json& p, const std::string& where, bool in_sequence) {
  if (p.is_null()) return;
  const std::string type = type_of(p);
  auto once = [&](bool taken) {
    if (taken)
      throw_usage(where, ": pre_tokenizer Sequence splits twice (", type,
                  " after another splitting step); supported: one of ByteLevel, Split, Metaspace, or Split then "
                  "ByteLevel with use_regex false");
  };
  if (type == "Sequence") {
    if (in_sequence || !p.contains("pretokenizers") || !p["pretokenizers"].is_array())
      throw_usage(where, ": pre_tokenizer Sequence must hold a list of pretokenizers (not nested)");
    for (const json& x : p["pretokenizers"]) read_pre_tokenizer(x, where, true);
    return;
  }
  if (type == "ByteLevel") {
    if (byte_level || metaspace) once(true);
    byte_level = true;
    const bool use_regex = get_or(p, "use_regex", true);
    prefix_space = get_or(p, "add_prefix_space", false);
    if (use_regex) {
      once(scan != Scan::none);
      scan = Scan::gpt2;
    }
    if (prefix_space && scan != Scan::gpt2 && scan != Scan::none)
      throw_usage(where, ": pre_tokenizer ByteLevel add_prefix_space true after Split is not supported (supported: false)");
    parts_desc.push_back(use_regex ? "ByteLevel" : "ByteLevel(use_regex false)");
    return;
  }
  if (type == "Split") {
    once(scan != Scan::none || byte_level || metaspace);
    const auto [pat, regex] = pattern_of(get_or(p, "pattern", json()), where + ": pre_tokenizer Split");
    if (pat == kLlama3Pattern) scan = Scan::llama3;
    else if (pat == kQwen2Pattern) scan = Scan::qwen2;
    else if (pat == kGpt2Pattern) scan = Scan::gpt2;
    else
      throw_usage(where, ": pre_tokenizer Split pattern ", json(pat).dump(),
                  " is not supported (supported: the Llama 3 pattern, Qwen2's with \\p{N} for \\p{N}{1,3}, and GPT-2's)");
    const std::string behavior = get_or(p, "behavior", "");
    if (behavior != "Isolated")
      throw_usage(where, ": pre_tokenizer Split behavior \"", behavior, "\" is not supported (supported: Isolated)");
    if (get_or(p, "invert", false)) throw_usage(where, ": pre_tokenizer Split invert true is not supported (supported: false)");
    parts_desc.push_back(scan == Scan::llama3 ? "Split(Llama 3)" : scan == Scan::qwen2 ? "Split(Qwen2)" : "Split(GPT-2)");
    return;
  }
  if (type == "Metaspace") {
    once(scan != Scan::none || byte_level || metaspace);
    metaspace = true;
    const std::string repl = get_or(p, "replacement", "\xE2\x96\x81");
    if (repl.empty() || data::char_length(reinterpret_cast<const unsigned char*>(repl.data()), repl.size()) != repl.size())
      throw_usage(where, ": pre_tokenizer Metaspace replacement ", json(repl).dump(), " must be one character");
    metaspace_char = repl;
    metaspace_split = get_or(p, "split", true);
    if (p.contains("prepend_scheme")) {
      const std::string s = get_or(p, "prepend_scheme", "");
      if (s == "always") metaspace_prepend = Prepend::always;
      else if (s == "first") metaspace_prepend = Prepend::first;
      else if (s == "never") metaspace_prepend = Prepend::never;
      else throw_usage(where, ": pre_tokenizer Metaspace prepend_scheme \"", s, "\" is not one of always, first, never");
    } else {
      metaspace_prepend = get_or(p, "add_prefix_space", true) ? Prepend::always : Prepend::never;
    }
    parts_desc.push_back(metaspace_split ? "Metaspace" : "Metaspace(split false)");
    return;
  }
  unsupported(where, "pre_tokenizer", type,
              "ByteLevel, Split on the Llama 3 or Qwen2 pattern, Metaspace, Sequence of Split and ByteLevel");
}

void HfTokenizer::Impl::read_decoder(const json& d, const std::string& where) {
  if (d.is_null()) return;
  has_decoder = true;
  const std::string type = type_of(d);
  if (type == "Sequence") {
    if (!d.contains("decoders") || !d["decoders"].is_array()) throw_usage(where, ": decoder Sequence has no decoders");
    for (const json& x : d["decoders"]) read_decoder(x, where);
    return;
  }
  DecodeStep s{DecodeStep::fuse, {}, {}, 0, 0, true};
  if (type == "ByteLevel") {
    s.kind = DecodeStep::byte_level;
  } else if (type == "Replace") {
    const auto [pat, regex] = pattern_of(get_or(d, "pattern", json()), where + ": decoder Replace");
    if (regex) throw_usage(where, ": decoder Replace with a Regex pattern is not supported (supported: a String pattern)");
    s = {DecodeStep::replace, pat, get_or(d, "content", ""), 0, 0, true};
  } else if (type == "ByteFallback") {
    s.kind = DecodeStep::byte_fallback;
  } else if (type == "Fuse") {
    s.kind = DecodeStep::fuse;
  } else if (type == "Strip") {
    s = {DecodeStep::strip, get_or(d, "content", " "), {}, get_or(d, "start", int64_t{0}), get_or(d, "stop", int64_t{0}), true};
  } else if (type == "Metaspace") {
    s.kind = DecodeStep::metaspace;
    s.a = get_or(d, "replacement", "\xE2\x96\x81");
    const std::string scheme = get_or(d, "prepend_scheme", get_or(d, "add_prefix_space", true) ? "always" : "never");
    s.metaspace_first = scheme != "never";
  } else {
    unsupported(where, "decoder", type, "ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence of those");
  }
  decoder.push_back(std::move(s));
}

void HfTokenizer::Impl::read_post_processor(const json& p, const std::string& where) {
  if (p.is_null()) return;
  const std::string type = type_of(p);
  if (type == "Sequence") {
    for (const json& x : get_or(p, "processors", json::array())) read_post_processor(x, where);
    return;
  }
  // Both only add special tokens (encode's add_special_tokens) or move offsets: the ids of text
  // are the same without them (hf_tokenizer.hpp).
  if (type == "ByteLevel" || type == "TemplateProcessing") return;
  unsupported(where, "post_processor", type, "ByteLevel, TemplateProcessing, Sequence of those");
}

void HfTokenizer::Impl::load(const std::string& text, const std::string& config_text) {
  const std::string where = (fs::path(dir) / "tokenizer.json").string();
  const json j = parse_json(text, where);
  if (!j.is_object()) throw_usage(where, ": not a tokenizer.json (a JSON object with a \"model\")");
  for (const char* k : {"truncation", "padding"})
    if (j.contains(k) && !j[k].is_null())
      throw_usage(where, ": ", k, " is set (", j[k].dump(), "); dlkit encodes whole documents, so it is not supported ",
                  "(supported: null)");
  const json model = get_or(j, "model", json());
  id_limit = int64_t{1} << 20;
  if (model.is_object() && model.contains("vocab") && model["vocab"].is_object()) id_limit += static_cast<int64_t>(model["vocab"].size());
  if (j.contains("added_tokens") && j["added_tokens"].is_array()) id_limit += static_cast<int64_t>(j["added_tokens"].size());
  read_model(model, where);
  read_normalizer(get_or(j, "normalizer", json()), where);
  read_pre_tokenizer(get_or(j, "pre_tokenizer", json()), where, false);
  read_decoder(get_or(j, "decoder", json()), where);
  read_post_processor(get_or(j, "post_processor", json()), where);

  // Added tokens: ids may lie inside the model's vocabulary (its <unk>, <s>) or past it.
  if (j.contains("added_tokens") && !j["added_tokens"].is_null()) {
    if (!j["added_tokens"].is_array()) throw_usage(where, ": added_tokens is not a list");
    size_t k = 0;
    for (const json& t : j["added_tokens"]) {
      const std::string at = where + ": added_tokens[" + std::to_string(k++) + "]";
      if (!t.is_object() || !t.contains("content") || !t["content"].is_string() || !t.contains("id") ||
          !t["id"].is_number_integer())
        throw_usage(at, ": expected {\"id\": N, \"content\": \"...\", ...}; got ", t.dump());
      if (t["id"].get<int64_t>() < 0 || t["id"].get<int64_t>() >= id_limit)
        throw_usage(at, ": id ", t["id"].dump(), " is not from 0 below ", id_limit,
                    " (the number of tokens plus 2^20: ids spread wider are not a vocabulary)");
      for (const char* flag : {"single_word", "lstrip", "rstrip"})
        if (get_or(t, flag, false))
          throw_usage(at, " '", t["content"].get<std::string>(), "': ", flag, " true is not supported (supported: false)");
      const std::string content = t["content"].get<std::string>();
      const auto id = static_cast<int32_t>(t["id"].get<int64_t>());
      if (static_cast<size_t>(id) >= spelled.size()) {
        spelled.resize(static_cast<size_t>(id) + 1);
        held.resize(static_cast<size_t>(id) + 1, false);
      }
      if (!held[static_cast<size_t>(id)]) ++n_added;
      spelled[static_cast<size_t>(id)] = content;
      held[static_cast<size_t>(id)] = true;
      spelled_ids[content] = id;
      // tokenizers' default: special tokens are matched as written, others after normalization.
      if (get_or(t, "normalized", !get_or(t, "special", false))) normalized_added.add(content, id);
      else raw_added.add(content, id);
    }
  }
  raw_added.finish();
  normalized_added.finish();

  // The model's units: byte-level tokens by their bytes; the initial token of each byte or
  // ASCII character; <0xNN> tokens.
  if (byte_level) {
    IdMap by_bytes;
    by_bytes.reserve(model_ids.size());
    for (const auto& [s, id] : model_ids) {
      std::string b;
      if (!byte_level_bytes(s, b)) b = s;
      by_bytes.emplace(std::move(b), id);
    }
    model_ids = std::move(by_bytes);
  }
  for (int b = 0; b < 256; ++b) {
    unit_token[b] = -1;
    if (byte_level || b < 0x80) {
      auto it = model_ids.find(std::string(1, static_cast<char>(b)));
      if (it != model_ids.end()) unit_token[b] = it->second;
    }
    fallback_token[b] = -1;
    if (byte_fallback) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      auto it = model_ids.find(std::string_view(name));
      if (it != model_ids.end()) fallback_token[b] = it->second;
    }
  }

  // Split points (hf_tokenizer.hpp): the scanners' pieces restart before a space that follows
  // printable ASCII (text_pieces.hpp), as Metaspace's do; without splitting, after a newline
  // whose token is never merged. Normalizers that rewrite the text leave none.
  // NFC never joins across a space after printable ASCII (both starters that compose with nothing).
  const bool rewrites_text = std::any_of(rewrites.begin(), rewrites.end(), [](const Rewrite& r) { return !r.prepend && !r.nfc; });
  if (scan != Scan::none || (metaspace && metaspace_split)) {
    if (!rewrites_text && !raw_added.any_contains(' ') && !normalized_added.any_contains(' ')) split_rule = 1;
  } else if (!ignore_merges && !raw_added.any_contains('\n') && !normalized_added.any_contains('\n') &&
             std::none_of(rewrites.begin(), rewrites.end(), [](const Rewrite& r) { return r.from.find('\n') != std::string::npos || r.to.find('\n') != std::string::npos; })) {
    constexpr size_t kNewline = '\n';  // a size_t index: clang's -Wchar-subscripts rejects a char one
    const int32_t nl = unit_token[kNewline] >= 0 ? unit_token[kNewline] : fallback_token[kNewline];
    bool merged = nl < 0;
    for (const auto& s : pairs->slots)
      if (s.key != HfPairTable::kEmpty && (static_cast<int32_t>(s.key >> 32) == nl || static_cast<int32_t>(s.key & 0xFFFFFFFFu) == nl))
        merged = true;
    if (!merged) split_rule = 2;
  }

  // The document separator: tokenizer_config.json's eos_token, else a conventional name.
  if (!config_text.empty()) {
    const std::string cwhere = (fs::path(dir) / "tokenizer_config.json").string();
    const json c = parse_json(config_text, cwhere);
    // A token is named by its text, or by {"content": text, ...} as transformers saves AddedToken.
    auto token_named = [&](const char* key) {
      const json& e = c[key];
      return e.is_string() ? e.get<std::string>() : e.is_object() ? get_or(e, "content", "") : "";
    };
    if (c.is_object() && c.contains("eos_token")) {
      std::string name = token_named("eos_token");
      if (!name.empty()) {
        auto it = spelled_ids.find(name);
        if (it == spelled_ids.end())
          throw_usage(cwhere, ": eos_token '", name, "' is not a token of ", where);
        separator = eos = it->second;
      }
    }
    // bos_token only reaches a checkpoint's config.json: one the vocabulary lacks is left out there
    // rather than refusing a tokenizer that encodes well.
    if (c.is_object() && c.contains("bos_token"))
      if (auto it = spelled_ids.find(token_named("bos_token")); it != spelled_ids.end()) bos = it->second;
  }
  if (!separator)
    for (const char* name : {"<|endoftext|>", "</s>", "<|end_of_text|>"})
      if (auto it = spelled_ids.find(std::string_view(name)); it != spelled_ids.end()) {
        separator = it->second;
        break;
      }
}

// ---- Encoding ------------------------------------------------------------------------------

void HfTokenizer::Impl::encode(std::string_view text, std::vector<int32_t>& out, HfCache& cache, bool continued) const {
  size_t pos = 0;
  if (!raw_added.empty()) {
    size_t len = 0;
    int32_t id = 0;
    for (size_t at; (at = raw_added.find(text, pos, len, id)) != std::string_view::npos; pos = at + len) {
      encode_segment(text.substr(pos, at - pos), out, cache, !(pos == 0 && continued), pos == 0 && !continued);
      out.push_back(id);
    }
  }
  encode_segment(text.substr(pos), out, cache, !(pos == 0 && continued), pos == 0 && !continued);
}

// A split of tokenizers' PreTokenizedString: text between added tokens. split_start: it begins
// there (not a continued chunk); at_origin: at offset 0 of the document.
void HfTokenizer::Impl::encode_segment(std::string_view seg, std::vector<int32_t>& out, HfCache& cache,
                                       bool split_start, bool at_origin) const {
  if (seg.empty()) return;
  if (rewrites.empty()) return encode_normalized(seg, out, cache, split_start, at_origin);
  std::string s(seg);
  for (const Rewrite& r : rewrites) {
    if (r.nfc) {
      data::to_nfc(s);
    } else if (r.prepend) {
      if (split_start && !s.empty()) s.insert(0, r.to);
    } else {
      replace_all(s, r.from, r.to);
    }
  }
  encode_normalized(s, out, cache, split_start, at_origin);
}

void HfTokenizer::Impl::encode_normalized(std::string_view s, std::vector<int32_t>& out, HfCache& cache,
                                          bool split_start, bool at_origin) const {
  if (normalized_added.empty()) return encode_split(s, out, cache, split_start, at_origin);
  size_t pos = 0, len = 0;
  int32_t id = 0;
  for (size_t at; (at = normalized_added.find(s, pos, len, id)) != std::string_view::npos; pos = at + len) {
    if (at > pos) encode_split(s.substr(pos, at - pos), out, cache, pos > 0 || split_start, pos == 0 && at_origin);
    out.push_back(id);
  }
  if (pos < s.size()) encode_split(s.substr(pos), out, cache, pos > 0 || split_start, pos == 0 && at_origin);
}

void HfTokenizer::Impl::encode_split(std::string_view s, std::vector<int32_t>& out, HfCache& cache, bool split_start,
                                     bool at_origin) const {
  if (s.empty()) return;
  std::string owned;
  if (prefix_space && split_start && s[0] != ' ') {
    owned.reserve(s.size() + 1);
    owned.push_back(' ');
    owned += s;
    s = owned;
  }
  if (metaspace) {
    owned = std::string(s);
    replace_all(owned, " ", metaspace_char);
    if (split_start && !owned.starts_with(metaspace_char) &&
        (metaspace_prepend == Prepend::always || (metaspace_prepend == Prepend::first && at_origin)))
      owned.insert(0, metaspace_char);
    s = owned;
    if (!metaspace_split) return bpe(s, out, cache);
    // Split before each replacement character (MergedWithNext).
    size_t start = 0;
    for (size_t k = s.find(metaspace_char, 1); k != std::string_view::npos; k = s.find(metaspace_char, k + 1)) {
      bpe(s.substr(start, k - start), out, cache);
      start = k;
    }
    return bpe(s.substr(start), out, cache);
  }
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  const data::SmallClassTable& t = data::small_classes();
  switch (scan) {
    case Scan::none:
      return bpe(s, out, cache);
    case Scan::gpt2:
      for (size_t i = 0, e; i < n; i = e) bpe(s.substr(i, (e = data::gpt2_piece_end(p, i, n, t)) - i), out, cache);
      return;
    case Scan::llama3:
    case Scan::qwen2: {
      const int digits = scan == Scan::llama3 ? 3 : 1;
      for (size_t i = 0, e; i < n; i = e) bpe(s.substr(i, (e = data::llama3_piece_end(p, i, n, t, digits)) - i), out, cache);
      return;
    }
  }
}

// tokenizers' BPE::tokenize of one piece: ignore_merges' whole-piece look-up, the piece's units
// (bytes or characters, each its token, else its <0xNN> tokens, else unk), then merges.
void HfTokenizer::Impl::bpe(std::string_view piece, std::vector<int32_t>& out, HfCache& cache) const {
  if (piece.empty()) return;
  // One byte (byte-level) or one ASCII character: its own token, whatever merges say.
  if (piece.size() == 1 && unit_token[static_cast<unsigned char>(piece[0])] >= 0) {
    out.push_back(unit_token[static_cast<unsigned char>(piece[0])]);
    return;
  }
  if (ignore_merges) {
    if (auto it = model_ids.find(piece); it != model_ids.end()) {
      out.push_back(it->second);
      return;
    }
  }
  const bool cacheable = piece.size() <= HfCache::kMaxPiece;
  if (cacheable) {
    if (auto it = cache.map.find(piece); it != cache.map.end()) {
      const int32_t* ids = cache.pool.data() + it->second.first;
      out.insert(out.end(), ids, ids + it->second.count);
      return;
    }
  }
  auto& parts = cache.parts;
  parts.clear();
  const auto* p = reinterpret_cast<const unsigned char*>(piece.data());
  const size_t n = piece.size();
  int32_t pending_unk = -1;  // an unk not yet added (fuse_unk joins the next unknown unit to it)
  for (size_t i = 0; i < n;) {
    size_t len = 1;
    int32_t id = -1;
    if (byte_level) {
      id = unit_token[p[i]];
    } else if (p[i] < 0x80) {
      id = unit_token[p[i]];
    } else {
      len = data::char_length(p + i, n - i);
      if (auto it = model_ids.find(piece.substr(i, len)); it != model_ids.end()) id = it->second;
    }
    if (id >= 0) {
      if (pending_unk >= 0) parts.push_back(pending_unk), pending_unk = -1;
      parts.push_back(id);
    } else {
      bool fell_back = byte_fallback;
      for (size_t k = 0; k < len && fell_back; ++k) fell_back = fallback_token[p[i + k]] >= 0;
      if (fell_back) {
        // As tokenizers: byte tokens go in at once, an unk still pending comes after them.
        for (size_t k = 0; k < len; ++k) parts.push_back(fallback_token[p[i + k]]);
      } else if (unk >= 0) {
        if (pending_unk >= 0 && !fuse_unk) parts.push_back(pending_unk);
        pending_unk = unk;
      }
      // No unk token: tokenizers drops the unit.
    }
    i += len;
  }
  if (pending_unk >= 0) parts.push_back(pending_unk);
  if (parts.size() > 1) {
    if (parts.size() <= 64) data::merge_lowest_rank_first(parts, cache.ranks, *pairs);
    else merge_large(parts);
  }
  if (cacheable) {
    if (cache.map.size() >= HfCache::kMaxEntries) {
      cache.map.clear();
      cache.pool.clear();
    }
    cache.map.emplace(std::string(piece), HfCache::Span{static_cast<uint32_t>(cache.pool.size()),
                                                       static_cast<uint32_t>(parts.size())});
    cache.pool.insert(cache.pool.end(), parts.begin(), parts.end());
  }
  out.insert(out.end(), parts.begin(), parts.end());
}

// The same order with a heap over a linked list, as tokenizers' Word::merge_all: for long pieces
// (a SentencePiece-style line is one piece). An entry is stale when its pair changed, which its
// merged token then says: both symbols only grow rightwards, so the same token means the same pair.
void HfTokenizer::Impl::merge_large(std::vector<int32_t>& parts) const {
  struct Entry {
    uint32_t rank, pos;
    int32_t merged;
    bool operator<(const Entry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  const size_t n = parts.size();
  std::vector<int32_t> next(n), prev(n);
  std::vector<bool> alive(n, true);
  for (size_t k = 0; k < n; ++k) {
    next[k] = k + 1 < n ? static_cast<int32_t>(k + 1) : -1;
    prev[k] = static_cast<int32_t>(k) - 1;
  }
  std::vector<Entry> heap;
  heap.reserve(n);
  for (size_t k = 0; k + 1 < n; ++k)
    if (const auto* s = pairs->find(parts[k], parts[k + 1])) heap.push_back({s->rank, static_cast<uint32_t>(k), s->merged});
  std::priority_queue<Entry> queue(std::less<Entry>(), std::move(heap));
  while (!queue.empty()) {
    const Entry top = queue.top();
    queue.pop();
    if (!alive[top.pos] || next[top.pos] < 0) continue;
    const auto right = static_cast<size_t>(next[top.pos]);
    const auto* s = pairs->find(parts[top.pos], parts[right]);
    if (!s || s->merged != top.merged) continue;
    parts[top.pos] = top.merged;
    alive[right] = false;
    next[top.pos] = next[right];
    if (next[right] >= 0) prev[static_cast<size_t>(next[right])] = static_cast<int32_t>(top.pos);
    if (prev[top.pos] >= 0) {
      const auto l = static_cast<size_t>(prev[top.pos]);
      if (const auto* q = pairs->find(parts[l], parts[top.pos])) queue.push({q->rank, static_cast<uint32_t>(l), q->merged});
    }
    if (next[top.pos] >= 0) {
      const auto r = static_cast<size_t>(next[top.pos]);
      if (const auto* q = pairs->find(parts[top.pos], parts[r])) queue.push({q->rank, top.pos, q->merged});
    }
  }
  size_t w = 0;
  for (size_t k = 0; k < n; ++k)
    if (alive[k]) parts[w++] = parts[k];
  parts.resize(w);
}

// ---- The class ----------------------------------------------------------------------------------

namespace {
std::string read_optional(const fs::path& p) {
  return fs::exists(p) ? read_input_file(p, "cannot read the tokenizer file") : std::string();
}
}  // namespace

HfTokenizer::HfTokenizer(const std::string& dir)
    : HfTokenizer(
          [&] {
            const fs::path d(dir);
            if (!fs::is_directory(d)) throw_usage("tokenizer folder '", dir, "' does not exist (hf:DIR names a folder)");
            if (!fs::exists(d / "tokenizer.json")) throw_usage("tokenizer folder '", dir, "' holds no tokenizer.json");
            return read_input_file(d / "tokenizer.json", "cannot read the tokenizer file");
          }(),
          read_optional(fs::path(dir) / "tokenizer_config.json"), dir) {
  impl_->files = {(fs::path(dir) / "tokenizer.json").string()};
  // The companions transformers' AutoTokenizer reads beside it, travelling with runs and checkpoints.
  for (const char* companion : {"tokenizer_config.json", "special_tokens_map.json"})
    if (fs::exists(fs::path(dir) / companion)) impl_->files.push_back((fs::path(dir) / companion).string());
}

HfTokenizer::HfTokenizer(const std::string& tokenizer_json, const std::string& tokenizer_config, const std::string& dir)
    : impl_(std::make_unique<Impl>()) {
  impl_->dir = dir;
  try {
    impl_->load(tokenizer_json, tokenizer_config);
  } catch (const nlohmann::json::exception& e) {
    // A field of the wrong JSON type (a number where a string belongs, ...).
    throw_usage((fs::path(dir) / "tokenizer.json").string(), ": ", e.what());
  }
}

HfTokenizer::~HfTokenizer() = default;

int64_t HfTokenizer::vocab_size() const { return static_cast<int64_t>(impl_->spelled.size()); }
std::optional<int32_t> HfTokenizer::document_separator() const { return impl_->separator; }
std::optional<int32_t> HfTokenizer::bos_token_id() const { return impl_->bos; }
std::optional<int32_t> HfTokenizer::eos_token_id() const { return impl_->eos; }
std::vector<std::string> HfTokenizer::files() const { return impl_->files; }

std::optional<int32_t> HfTokenizer::token_id(std::string_view spelled) const {
  auto it = impl_->spelled_ids.find(spelled);
  if (it == impl_->spelled_ids.end()) return std::nullopt;
  return it->second;
}

std::string HfTokenizer::describe() const {
  std::string s = str("BPE ", impl_->n_model, " tokens + ", impl_->n_added, " added");
  for (const std::string& p : impl_->parts_desc) s += "; " + p;
  if (impl_->byte_fallback) s += "; byte_fallback";
  if (impl_->ignore_merges) s += "; ignore_merges";
  return s;
}

std::vector<int32_t> HfTokenizer::encode(const std::string& text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3);
  HfCache cache;
  impl_->encode(text, ids, cache, false);
  return ids;
}

size_t HfTokenizer::split_point(std::string_view text, size_t from) const {
  const size_t n = text.size();
  if (impl_->split_rule == 1) {
    for (size_t i = std::max<size_t>(from, 1); i < n; ++i)
      if (text[i] == ' ' && text[i - 1] > 0x20 && text[i - 1] < 0x7F) return i;
    return n;
  }
  if (impl_->split_rule == 2) {
    for (size_t i = std::max<size_t>(from, 1); i < n; ++i)
      if (text[i - 1] == '\n') return i;
    return n;
  }
  return from == 0 ? 0 : n;
}

std::string HfTokenizer::decode(const std::vector<int32_t>& ids) const {
  const Impl& m = *impl_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (id >= 0 && static_cast<size_t>(id) < m.spelled.size() && m.held[static_cast<size_t>(id)])
      tokens.push_back(m.spelled[static_cast<size_t>(id)]);
    else
      tokens.push_back("\xEF\xBF\xBD");
  }
  if (!m.has_decoder) {
    // tokenizers joins the tokens with spaces when the file has no decoder.
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return out;
  }
  for (const DecodeStep& s : m.decoder) {
    switch (s.kind) {
      case DecodeStep::byte_level: {
        std::string all;
        for (const std::string& t : tokens)
          if (!byte_level_bytes(t, all)) all += t;
        tokens = {std::move(all)};
        break;
      }
      case DecodeStep::replace:
        for (std::string& t : tokens) replace_all(t, s.a, s.b);
        break;
      case DecodeStep::byte_fallback: {
        std::vector<std::string> out;
        std::string bytes;
        for (std::string& t : tokens) {
          const int b = fallback_byte(t);
          if (b >= 0) {
            bytes.push_back(static_cast<char>(b));
            continue;
          }
          if (!bytes.empty()) out.push_back(std::move(bytes)), bytes.clear();
          out.push_back(std::move(t));
        }
        if (!bytes.empty()) out.push_back(std::move(bytes));
        tokens = std::move(out);
        break;
      }
      case DecodeStep::fuse: {
        std::string all;
        for (const std::string& t : tokens) all += t;
        tokens = {std::move(all)};
        break;
      }
      case DecodeStep::strip:
        for (std::string& t : tokens) {
          // Up to `start` leading and `stop` trailing copies of the character.
          size_t b = 0, e = t.size();
          for (int64_t k = 0; k < s.start && t.compare(b, s.a.size(), s.a) == 0 && b + s.a.size() <= e; ++k) b += s.a.size();
          for (int64_t k = 0; k < s.stop && e >= b + s.a.size() && t.compare(e - s.a.size(), s.a.size(), s.a) == 0; ++k)
            e -= s.a.size();
          t = t.substr(b, e - b);
        }
        break;
      case DecodeStep::metaspace:
        for (size_t i = 0; i < tokens.size(); ++i)
          replace_all(tokens[i], s.a, i == 0 && s.metaspace_first ? "" : " ");
        break;
    }
  }
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

namespace {
class HfEncoder final : public Tokenizer::Encoder {
 public:
  explicit HfEncoder(const HfTokenizer::Impl& t) : t_(t) {}
  void encode_append(std::string_view text, std::vector<int32_t>& out) override { t_.encode(text, out, cache_, false); }
  void encode_append_continued(std::string_view text, std::vector<int32_t>& out) override {
    t_.encode(text, out, cache_, true);
  }

 private:
  const HfTokenizer::Impl& t_;
  HfCache cache_;
};
}  // namespace

std::unique_ptr<Tokenizer::Encoder> HfTokenizer::make_encoder() const { return std::make_unique<HfEncoder>(*impl_); }

std::vector<std::string_view> hf_pattern_pieces(std::string_view text, std::string_view pattern) {
  const bool gpt2 = pattern == kGpt2Pattern;
  if (!gpt2 && pattern != kLlama3Pattern && pattern != kQwen2Pattern)
    throw_usage("pattern ", json(std::string(pattern)).dump(), " is not one dlkit scans (Llama 3's, Qwen2's, GPT-2's)");
  const int digits = pattern == kLlama3Pattern ? 3 : 1;
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const data::SmallClassTable& t = data::small_classes();
  std::vector<std::string_view> pieces;
  for (size_t i = 0, e; i < text.size(); i = e) {
    e = gpt2 ? data::gpt2_piece_end(p, i, text.size(), t) : data::llama3_piece_end(p, i, text.size(), t, digits);
    pieces.push_back(text.substr(i, e - i));
  }
  return pieces;
}

}  // namespace dl
