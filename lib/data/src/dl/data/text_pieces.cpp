// The pre-tokenizers' Unicode classes and pattern scanners (text_pieces.hpp).
#include "dl/data/text_pieces.hpp"

#include <algorithm>
#include <iterator>

namespace dl::data {

namespace {
struct UnicodeRange {
  uint32_t first, last;
  uint8_t cls;
};
#include "dl/data/unicode_classes.inc"
}  // namespace

Cls class_of(uint32_t cp) {
  auto it = std::upper_bound(std::begin(kUnicodeRanges), std::end(kUnicodeRanges), cp,
                             [](uint32_t c, const UnicodeRange& r) { return c < r.first; });
  if (it == std::begin(kUnicodeRanges)) return kOther;
  --it;
  return cp <= it->last ? static_cast<Cls>(it->cls) : kOther;
}

SmallClassTable::SmallClassTable() {
  for (uint32_t cp = 0; cp < 0x800; ++cp) cls[cp] = class_of(cp);
}

const SmallClassTable& small_classes() {
  static const SmallClassTable t;
  return t;
}

namespace {

// `\s+(?!\S)|\s+` from a white-space character at p[i] of byte length len: the run of white
// space; when a non-space follows, its last character is left to start the next piece (the
// look-ahead backtracks one character), unless it is the only one.
size_t space_run_end(const unsigned char* p, size_t i, size_t len, size_t n, const SmallClassTable& t) {
  size_t last = i, j = i + len;
  while (j < n && char_class(p + j, n - j, t, len) == kSpace) {
    last = j;
    j += len;
  }
  if (j == n) return n;
  return last > i ? last : j;
}

}  // namespace

size_t gpt2_piece_end(const unsigned char* p, size_t i, size_t n, const SmallClassTable& t) {
  const unsigned char b = p[i];
  // 's|'t|'re|'ve|'m|'ll|'d, lower case only
  if (b == '\'' && i + 1 < n) {
    const unsigned char c = p[i + 1];
    if (c == 's' || c == 't' || c == 'm' || c == 'd') return i + 2;
    if (i + 2 < n) {
      const unsigned char d = p[i + 2];
      if ((c == 'r' && d == 'e') || (c == 'v' && d == 'e') || (c == 'l' && d == 'l')) return i + 3;
    }
  }
  size_t j = i, len = 0;
  Cls c = char_class(p + i, n - i, t, len);
  // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: an optional leading space (U+0020 only)
  if (b == ' ' && i + 1 < n) {
    size_t len2 = 0;
    const Cls c2 = char_class(p + i + 1, n - i - 1, t, len2);
    if (c2 != kSpace) {
      c = c2;
      j = i + 1;
      len = len2;
    }
  }
  if (c != kSpace) {
    j += len;
    while (j < n && char_class(p + j, n - j, t, len) == c) j += len;
    return j;
  }
  return space_run_end(p, j, len, n, t);
}

size_t llama3_piece_end(const unsigned char* p, size_t i, size_t n, const SmallClassTable& t, int max_digits) {
  const unsigned char b = p[i];
  // (?i:'s|'t|'re|'ve|'m|'ll|'d): ASCII letters in either case
  if (b == '\'' && i + 1 < n) {
    const unsigned char c = p[i + 1] | 0x20;
    if (c == 's' || c == 't' || c == 'm' || c == 'd') return i + 2;
    if (i + 2 < n) {
      const unsigned char d = p[i + 2] | 0x20;
      if ((c == 'r' && d == 'e') || (c == 'v' && d == 'e') || (c == 'l' && d == 'l')) return i + 3;
    }
  }
  size_t len = 0;
  const Cls c = char_class(p + i, n - i, t, len);
  auto run_of = [&](size_t j, Cls want) {
    size_t l = 0;
    while (j < n && char_class(p + j, n - j, t, l) == want) j += l;
    return j;
  };
  auto crlf_run = [&](size_t j) {
    while (j < n && (p[j] == '\r' || p[j] == '\n')) ++j;
    return j;
  };
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (c == kLetter) return run_of(i + len, kLetter);
  if (c != kNumber && b != '\r' && b != '\n' && i + len < n) {
    size_t len2 = 0;
    if (char_class(p + i + len, n - i - len, t, len2) == kLetter) return run_of(i + len + len2, kLetter);
  }
  // \p{N}{1,3} (or \p{N})
  if (c == kNumber) {
    size_t j = i + len;
    for (int k = 1; k < max_digits && j < n; ++k) {
      size_t l = 0;
      if (char_class(p + j, n - j, t, l) != kNumber) break;
      j += l;
    }
    return j;
  }
  //  ?[^\s\p{L}\p{N}]+[\r\n]*
  if (c == kOther) return crlf_run(run_of(i + len, kOther));
  if (b == ' ' && i + 1 < n) {
    size_t len2 = 0;
    if (char_class(p + i + 1, n - i - 1, t, len2) == kOther) return crlf_run(run_of(i + 1 + len2, kOther));
  }
  // \s*[\r\n]+: the white-space run up to and with its last CR or LF, when it holds one.
  size_t j = i, last_crlf = n;
  for (size_t l = len; j < n && char_class(p + j, n - j, t, l) == kSpace; j += l)
    if (p[j] == '\r' || p[j] == '\n') last_crlf = j;
  if (last_crlf != n) return last_crlf + 1;
  // \s+(?!\S)|\s+
  return space_run_end(p, i, len, n, t);
}

}  // namespace dl::data
