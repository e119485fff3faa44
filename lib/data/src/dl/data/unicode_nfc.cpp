// NFC (unicode_nfc.hpp).
#include "dl/data/unicode_nfc.hpp"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <vector>

namespace dl::data {

namespace {

struct NfcClass {
  uint32_t cp;
  uint8_t ccc;
};
struct NfcDecomposition {
  uint32_t cp, first, second;
};
struct NfcComposition {
  uint32_t first, second, composite;
};
#include "dl/data/unicode_nfc.inc"

constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;
constexpr uint32_t kRawByte = 0x110000;  // + byte: a byte that is not UTF-8

int combining_class(uint32_t cp) {
  if (cp < 0x300 || cp >= kRawByte) return 0;
  auto it = std::lower_bound(std::begin(kNfcClasses), std::end(kNfcClasses), cp,
                             [](const NfcClass& c, uint32_t v) { return c.cp < v; });
  return it != std::end(kNfcClasses) && it->cp == cp ? it->ccc : 0;
}

void decompose(uint32_t cp, std::vector<uint32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount) out.push_back(kTBase + s % kTCount);
    return;
  }
  if (cp >= 0xC0 && cp < kRawByte) {
    auto it = std::lower_bound(std::begin(kNfcDecompositions), std::end(kNfcDecompositions), cp,
                               [](const NfcDecomposition& d, uint32_t v) { return d.cp < v; });
    if (it != std::end(kNfcDecompositions) && it->cp == cp) {
      decompose(it->first, out);
      if (it->second) decompose(it->second, out);
      return;
    }
  }
  out.push_back(cp);
}

// The primary composite of (a, b), or 0.
uint32_t compose(uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount)
    return a + (b - kTBase);
  auto it = std::lower_bound(std::begin(kNfcCompositions), std::end(kNfcCompositions), std::pair{a, b},
                             [](const NfcComposition& c, std::pair<uint32_t, uint32_t> v) {
                               return c.first != v.first ? c.first < v.first : c.second < v.second;
                             });
  return it != std::end(kNfcCompositions) && it->first == a && it->second == b ? it->composite : 0;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp >= kRawByte) {
    out.push_back(static_cast<char>(cp - kRawByte));
  } else if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// The code point at p[i] (advancing i); a byte that does not start well-formed UTF-8 is kRawByte + byte.
uint32_t next_code_point(const unsigned char* p, size_t n, size_t& i) {
  const unsigned char b = p[i];
  auto cont = [&](size_t k) { return i + k < n && (p[i + k] & 0xC0) == 0x80; };
  if (b < 0x80) return ++i, b;
  if (b >= 0xC2 && b <= 0xDF && cont(1)) {
    const uint32_t cp = ((b & 0x1Fu) << 6) | (p[i + 1] & 0x3Fu);
    i += 2;
    return cp;
  }
  if (b >= 0xE0 && b <= 0xEF && cont(1) && cont(2)) {
    const uint32_t cp = ((b & 0x0Fu) << 12) | ((p[i + 1] & 0x3Fu) << 6) | (p[i + 2] & 0x3Fu);
    if (cp >= 0x800 && (cp < 0xD800 || cp > 0xDFFF)) return i += 3, cp;
  }
  if (b >= 0xF0 && b <= 0xF4 && cont(1) && cont(2) && cont(3)) {
    const uint32_t cp = ((b & 0x07u) << 18) | ((p[i + 1] & 0x3Fu) << 12) | ((p[i + 2] & 0x3Fu) << 6) | (p[i + 3] & 0x3Fu);
    if (cp >= 0x10000 && cp <= 0x10FFFF) return i += 4, cp;
  }
  return ++i, kRawByte + b;
}

}  // namespace

void to_nfc(std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  // Text of code points below U+0300 is NFC already (its precomposed letters are what NFC makes).
  size_t i = 0;
  while (i < n) {
    if (p[i] < 0x80) ++i;
    else if (p[i] >= 0xC2 && p[i] < 0xCC && i + 1 < n && (p[i + 1] & 0xC0) == 0x80) i += 2;
    else break;
  }
  if (i == n) return;
  std::vector<uint32_t> cps;
  cps.reserve(n);
  for (size_t k = 0; k < n;) decompose(next_code_point(p, n, k), cps);
  // Canonical ordering: a stable sort of each run of non-starters by class.
  for (size_t k = 1; k < cps.size(); ++k) {
    const int c = combining_class(cps[k]);
    if (c == 0) continue;
    for (size_t j = k; j > 0; --j) {
      const int b = combining_class(cps[j - 1]);
      if (b <= c) break;
      std::swap(cps[j - 1], cps[j]);
    }
  }
  // Canonical composition: each character with the last starter unless blocked.
  size_t out = 0, starter = SIZE_MAX;
  int last = 256;
  for (size_t k = 0; k < cps.size(); ++k) {
    const uint32_t c = cps[k];
    const int cc = combining_class(c);
    if (starter != SIZE_MAX && (last < cc || last == 0)) {
      if (const uint32_t composite = compose(cps[starter], c)) {
        cps[starter] = composite;
        continue;
      }
    }
    if (cc == 0) {
      starter = out;
      last = 0;
    } else {
      last = cc;
    }
    cps[out++] = c;
  }
  cps.resize(out);
  std::string r;
  r.reserve(n);
  for (uint32_t c : cps) append_utf8(r, c);
  s = std::move(r);
}

}  // namespace dl::data
