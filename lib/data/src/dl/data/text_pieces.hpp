// The Unicode classes of the pre-tokenizers' patterns (letter \p{L}, number \p{N}, white space
// \s; unicode_classes.inc) and hand-written scanners for the patterns dlkit implements, shared by
// gpt2_tokenizer.cpp and hf_tokenizer.cpp. Each scanner returns the end of the piece that starts
// at p[i], trying the pattern's alternatives in order as a backtracking engine does (leftmost
// alternative first, not the longest). Bytes that are not valid UTF-8 are "other" characters one
// byte each.
#pragma once
#include <cstddef>
#include <cstdint>

namespace dl::data {

enum Cls : uint8_t { kOther = 0, kLetter = 1, kNumber = 2, kSpace = 3 };

// Classes of the code points below U+0800 (one or two UTF-8 bytes), the characters of most text,
// so that only rarer ones take the binary search.
struct SmallClassTable {
  Cls cls[0x800];
  SmallClassTable();
};
const SmallClassTable& small_classes();
Cls class_of(uint32_t cp);

// The class and byte length of the character at p[0] (n >= 1 bytes available).
inline Cls char_class(const unsigned char* p, size_t n, const SmallClassTable& t, size_t& len) {
  const unsigned char b = p[0];
  len = 1;
  if (b < 0x80) return t.cls[b];
  if (b >= 0xC2 && b <= 0xDF) {
    if (n >= 2 && (p[1] & 0xC0) == 0x80) {
      len = 2;
      return t.cls[((b & 0x1Fu) << 6) | (p[1] & 0x3Fu)];
    }
    return kOther;
  }
  if (b >= 0xE0 && b <= 0xEF) {
    if (n < 3 || (p[2] & 0xC0) != 0x80) return kOther;
    const unsigned char lo = b == 0xE0 ? 0xA0 : 0x80, hi = b == 0xED ? 0x9F : 0xBF;
    if (p[1] < lo || p[1] > hi) return kOther;
    len = 3;
    return class_of(((b & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu));
  }
  if (b >= 0xF0 && b <= 0xF4) {
    if (n < 4 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80) return kOther;
    const unsigned char lo = b == 0xF0 ? 0x90 : 0x80, hi = b == 0xF4 ? 0x8F : 0xBF;
    if (p[1] < lo || p[1] > hi) return kOther;
    len = 4;
    return class_of(((b & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) | (p[3] & 0x3Fu));
  }
  return kOther;
}

// Byte length of the character at p[0]: a well-formed UTF-8 sequence, else 1.
inline size_t char_length(const unsigned char* p, size_t n) {
  size_t len = 0;
  (void)char_class(p, n, small_classes(), len);
  return len;
}

// GPT-2's pattern (also the ByteLevel pre-tokenizer's with use_regex):
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
size_t gpt2_piece_end(const unsigned char* p, size_t i, size_t n, const SmallClassTable& t);

// Llama 3's pattern (max_digits 3) and Qwen2's (max_digits 1, `\p{N}` for `\p{N}{1,3}`):
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
size_t llama3_piece_end(const unsigned char* p, size_t i, size_t n, const SmallClassTable& t, int max_digits);

}  // namespace dl::data
