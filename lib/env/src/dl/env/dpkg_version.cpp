// The algorithm of dpkg's lib/dpkg/version.c (verrevcmp, dpkg_version_compare) and
// lib/dpkg/parsehelp.c (parseversion), rewritten over string_view.
#include "dl/env/dpkg_version.hpp"

#include <cerrno>
#include <climits>
#include <cstdlib>

#include "dl/core/error.hpp"

namespace dl {

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// dpkg's order(): digits 0 (they are handled by the numeric pass), letters their code, '~' -1
// (before everything, even the end), everything else after all letters.
int order(int c) {
  if (is_digit(static_cast<char>(c))) return 0;
  if (is_alpha(static_cast<char>(c))) return c;
  if (c == '~') return -1;
  if (c) return c + 256;
  return 0;
}

}  // namespace

int dpkg_verrevcmp(std::string_view a, std::string_view b) {
  size_t i = 0, j = 0;
  auto at = [](std::string_view s, size_t k) -> int { return k < s.size() ? static_cast<unsigned char>(s[k]) : 0; };
  while (i < a.size() || j < b.size()) {
    int first_diff = 0;
    while ((i < a.size() && !is_digit(a[i])) || (j < b.size() && !is_digit(b[j]))) {
      int ac = order(at(a, i));
      int bc = order(at(b, j));
      if (ac != bc) return ac - bc;
      ++i;
      ++j;
    }
    while (i < a.size() && a[i] == '0') ++i;
    while (j < b.size() && b[j] == '0') ++j;
    while (i < a.size() && j < b.size() && is_digit(a[i]) && is_digit(b[j])) {
      if (!first_diff) first_diff = a[i] - b[j];
      ++i;
      ++j;
    }
    if (i < a.size() && is_digit(a[i])) return 1;
    if (j < b.size() && is_digit(b[j])) return -1;
    if (first_diff) return first_diff;
  }
  return 0;
}

std::string DpkgVersion::str() const {
  std::string s;
  s += upstream;
  if (!revision.empty()) s += "-" + revision;
  // A ':' in the upstream version or the revision needs the epoch written even when it is 0
  // (dpkg's vdew_nonambig): "0:1:2" printed as "1:2" would read back as epoch 1.
  if (epoch || s.find(':') != std::string::npos) s = std::to_string(epoch) + ":" + s;
  return s;
}

namespace {

// Returns "" on success, else dpkg's error text.
std::string parse_impl(std::string_view s, DpkgVersion& out) {
  size_t b = 0;
  while (b < s.size() && (s[b] == ' ' || s[b] == '\t')) ++b;
  s.remove_prefix(b);
  if (s.empty()) return "version string is empty";
  size_t end = 0;
  while (end < s.size() && !is_space(s[end])) ++end;
  for (size_t k = end; k < s.size(); ++k)
    if (!is_space(s[k])) return "version string has embedded spaces";
  s = s.substr(0, end);

  out = DpkgVersion{};
  size_t colon = s.find(':');
  if (colon != std::string_view::npos) {
    std::string head(s.substr(0, colon));
    if (head.empty()) return "epoch in version is empty";
    char* eptr = nullptr;
    errno = 0;
    long long epoch = std::strtoll(head.c_str(), &eptr, 10);
    if (eptr == head.c_str()) return "epoch in version is empty";
    if (eptr != head.c_str() + head.size()) return "epoch in version is not number";  // also an embedded NUL
    if (epoch < 0) return "epoch in version is negative";
    if (epoch > INT_MAX || errno == ERANGE) return "epoch in version is too big";
    if (colon + 1 >= s.size()) return "nothing after colon in version number";
    out.epoch = static_cast<uint64_t>(epoch);
    s.remove_prefix(colon + 1);
  }
  size_t hyphen = s.rfind('-');
  if (hyphen != std::string_view::npos) {
    if (hyphen + 1 >= s.size()) return "revision number is empty";
    out.revision = std::string(s.substr(hyphen + 1));
    s = s.substr(0, hyphen);
  }
  if (s.empty()) return "version number is empty";
  out.upstream = std::string(s);
  return "";
}

}  // namespace

DpkgVersion parse_dpkg_version(std::string_view text) {
  DpkgVersion v;
  std::string err = parse_impl(text, v);
  if (!err.empty()) throw_usage("invalid Debian version '", text, "': ", err);
  return v;
}

bool valid_dpkg_version(std::string_view text, std::string* why) {
  DpkgVersion v;
  std::string err = parse_impl(text, v);
  if (why) *why = err;
  return err.empty();
}

int dpkg_compare(const DpkgVersion& a, const DpkgVersion& b) {
  if (a.epoch > b.epoch) return 1;
  if (a.epoch < b.epoch) return -1;
  int rc = dpkg_verrevcmp(a.upstream, b.upstream);
  if (rc) return rc;
  return dpkg_verrevcmp(a.revision, b.revision);
}

int dpkg_compare(std::string_view a, std::string_view b) {
  return dpkg_compare(parse_dpkg_version(a), parse_dpkg_version(b));
}

}  // namespace dl
