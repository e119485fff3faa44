#include "dl/env/versions.hpp"

#include <algorithm>
#include <set>

#include "dl/core/error.hpp"
#include "dl/core/strings.hpp"
#include "dl/env/dpkg_version.hpp"

namespace dl {

namespace {

bool is_special(std::string_view v) { return v == kVersionNone || v == kVersionUnknown || v == kVersionAbsent; }

// Index of the first differing number (missing numbers count as 0), or -1 when all are equal.
int first_difference(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    int64_t x = i < a.size() ? a[i] : 0, y = i < b.size() ? b[i] : 0;
    if (x != y) return static_cast<int>(i);
  }
  return -1;
}

Magnitude by_index(int idx, Magnitude beyond) {
  if (idx == 0) return Magnitude::major;
  if (idx == 1) return Magnitude::minor;
  if (idx == 2) return Magnitude::patch;
  return beyond;
}

}  // namespace

std::string scheme_name(Scheme s) {
  switch (s) {
    case Scheme::numeric: return "numeric";
    case Scheme::dpkg: return "dpkg";
    case Scheme::pep440: return "pep440";
    case Scheme::text: return "text";
    case Scheme::set: return "set";
    case Scheme::hash: return "hash";
  }
  return "text";
}

std::optional<NumericVersion> parse_numeric_version(std::string_view s) {
  NumericVersion v;
  size_t i = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
    int64_t n = 0;
    size_t digits = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
      if (digits < 18) n = n * 10 + (s[i] - '0');
      ++digits;
      ++i;
    }
    v.parts.push_back(n);
    if (i + 1 < s.size() && s[i] == '.' && s[i + 1] >= '0' && s[i + 1] <= '9') ++i;
    else break;
  }
  if (v.parts.empty()) return std::nullopt;
  v.suffix = std::string(s.substr(i));
  return v;
}

int numeric_compare(std::string_view a, std::string_view b) {
  auto va = parse_numeric_version(a), vb = parse_numeric_version(b);
  if (!va || !vb) {
    if (!va && !vb) return a.compare(b) < 0 ? -1 : (a == b ? 0 : 1);
    return va ? 1 : -1;  // a version sorts after a non-version
  }
  int idx = first_difference(va->parts, vb->parts);
  if (idx >= 0) {
    int64_t x = size_t(idx) < va->parts.size() ? va->parts[idx] : 0;
    int64_t y = size_t(idx) < vb->parts.size() ? vb->parts[idx] : 0;
    return x < y ? -1 : 1;
  }
  int c = dpkg_verrevcmp(va->suffix, vb->suffix);
  return c < 0 ? -1 : (c > 0 ? 1 : 0);
}

bool valid_version(Scheme scheme, std::string_view v, std::string* why) {
  std::string reason;
  switch (scheme) {
    case Scheme::numeric:
      if (!parse_numeric_version(v)) reason = "'" + std::string(v) + "' does not start with a number (e.g. 12.4, 550.54.14)";
      break;
    case Scheme::dpkg: {
      std::string r;
      if (!valid_dpkg_version(v, &r)) reason = "'" + std::string(v) + "' is not a Debian version: " + r;
      break;
    }
    case Scheme::pep440:
      if (!parse_pep440(v)) reason = "'" + std::string(v) + "' is not a PEP 440 version";
      break;
    default: break;
  }
  if (why) *why = reason;
  return reason.empty();
}

int compare_versions(Scheme scheme, std::string_view a, std::string_view b) {
  switch (scheme) {
    case Scheme::numeric: return numeric_compare(a, b);
    case Scheme::dpkg: {
      int c = dpkg_compare(a, b);
      return c < 0 ? -1 : (c > 0 ? 1 : 0);
    }
    case Scheme::pep440: return pep440_compare(a, b);
    default: {
      int c = a.compare(b);
      return c < 0 ? -1 : (c > 0 ? 1 : 0);
    }
  }
}

std::string magnitude_name(Magnitude m) {
  switch (m) {
    case Magnitude::none: return "none";
    case Magnitude::build: return "build";
    case Magnitude::patch: return "patch";
    case Magnitude::minor: return "minor";
    case Magnitude::major: return "major";
    case Magnitude::unknown: return "unknown";
  }
  return "unknown";
}

Magnitude change_magnitude(Scheme scheme, std::string_view locked, std::string_view found) {
  if (locked == found) return Magnitude::none;
  if (locked == kVersionUnknown || found == kVersionUnknown) return Magnitude::unknown;
  bool absent_l = locked == kVersionNone || locked == kVersionAbsent;
  bool absent_f = found == kVersionNone || found == kVersionAbsent;
  if (absent_l || absent_f) return scheme == Scheme::hash ? Magnitude::build : Magnitude::major;
  switch (scheme) {
    case Scheme::numeric: {
      auto a = parse_numeric_version(locked), b = parse_numeric_version(found);
      if (!a || !b) return Magnitude::major;
      int idx = first_difference(a->parts, b->parts);
      if (idx >= 0) return by_index(idx, Magnitude::build);
      return Magnitude::build;  // same numbers, different suffix
    }
    case Scheme::dpkg: {
      DpkgVersion a, b;
      try {
        a = parse_dpkg_version(locked);
        b = parse_dpkg_version(found);
      } catch (const Error&) {
        return Magnitude::major;
      }
      if (a.epoch != b.epoch) return Magnitude::major;
      auto na = parse_numeric_version(a.upstream), nb = parse_numeric_version(b.upstream);
      if (!na || !nb) return dpkg_compare(a, b) == 0 ? Magnitude::none : Magnitude::major;
      int idx = first_difference(na->parts, nb->parts);
      if (idx == 0) return Magnitude::major;
      if (idx == 1) return Magnitude::minor;
      return dpkg_compare(a, b) == 0 ? Magnitude::none : Magnitude::patch;
    }
    case Scheme::pep440: {
      auto a = parse_pep440(locked), b = parse_pep440(found);
      if (!a || !b) return Magnitude::major;
      if (a->epoch != b->epoch) return Magnitude::major;
      int idx = first_difference(a->release, b->release);
      if (idx >= 0) return by_index(idx, Magnitude::patch);
      return pep440_compare(*a, *b) == 0 ? Magnitude::none : Magnitude::patch;
    }
    case Scheme::text: return Magnitude::major;
    case Scheme::set: {
      const auto locked_words = split_words(locked), found_words = split_words(found);
      const std::set<std::string> a(locked_words.begin(), locked_words.end()), b(found_words.begin(), found_words.end());
      for (const auto& w : a)
        if (!b.count(w)) return Magnitude::minor;
      return a == b ? Magnitude::none : Magnitude::build;
    }
    case Scheme::hash: return Magnitude::build;
  }
  return Magnitude::major;
}

namespace {

bool numeric_prefix_match(std::string_view version, const std::string& prefix) {
  auto v = parse_numeric_version(version);
  auto p = parse_numeric_version(prefix);
  if (!v || !p) return false;
  for (size_t i = 0; i < p->parts.size(); ++i) {
    int64_t x = i < v->parts.size() ? v->parts[i] : 0;
    if (x != p->parts[i]) return false;
  }
  return true;
}

bool clause_holds(Scheme scheme, const VersionConstraint::Clause& c, std::string_view v) {
  if (c.wildcard) {
    bool m = numeric_prefix_match(v, c.version);
    return c.op == "==" ? m : !m;
  }
  if (c.op == "~=") {
    if (numeric_compare(v, c.version) < 0) return false;
    auto p = parse_numeric_version(c.version);
    std::string prefix;
    for (size_t i = 0; i + 1 < p->parts.size(); ++i) {
      if (i) prefix += ".";
      prefix += std::to_string(p->parts[i]);
    }
    return numeric_prefix_match(v, prefix);
  }
  int cmp = compare_versions(scheme, v, c.version);
  if (c.op == "==") return cmp == 0;
  if (c.op == "!=") return cmp != 0;
  if (c.op == ">=") return cmp >= 0;
  if (c.op == "<=") return cmp <= 0;
  if (c.op == ">") return cmp > 0;
  if (c.op == "<") return cmp < 0;
  return false;
}

}  // namespace

VersionConstraint parse_constraint(Scheme scheme, std::string_view text) {
  VersionConstraint c;
  c.scheme = scheme;
  c.text = trim(text);
  if (c.text.empty() || c.text == "*") return c;
  if (scheme == Scheme::pep440) {
    c.pep = parse_pep440_specifiers(c.text);
    for (const auto& s : c.pep.specs) c.clauses.push_back({s.op, s.version, s.wildcard});
    return c;
  }
  if (scheme != Scheme::numeric && scheme != Scheme::dpkg)
    throw_usage("constraints are not supported for ", scheme_name(scheme), " values");
  size_t start = 0;
  for (;;) {
    size_t comma = c.text.find(',', start);
    std::string clause = trim(c.text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (clause.empty()) throw_usage("empty clause in '", c.text, "' (clauses are separated by single commas)");
    static const char* ops[] = {"~=", "==", "!=", ">=", "<=", ">>", "<<", ">", "<", "="};
    VersionConstraint::Clause cl;
    for (const char* op : ops)
      if (clause.rfind(op, 0) == 0) {
        cl.op = op;
        break;
      }
    if (cl.op.empty())
      throw_usage("'", clause, "' has no operator (use == != >= <= > <", scheme == Scheme::numeric ? " ~=" : "",
                  ", e.g. >=12.4)");
    std::string ver = trim(clause.substr(cl.op.size()));
    if (cl.op == "=" || cl.op == ">>" || cl.op == "<<") {
      if (scheme != Scheme::dpkg) throw_usage("'", clause, "': unknown operator '", cl.op, "' (use == != >= <= > < ~=)");
      cl.op = cl.op == "=" ? "==" : (cl.op == ">>" ? ">" : "<");
    }
    if (ver.empty()) throw_usage("'", clause, "' has no version after ", cl.op);
    if (ver.find_first_of("=<>!~") == 0) throw_usage("'", clause, "': unknown operator (use == != >= <= > <)");
    if (ver.size() > 2 && ver.compare(ver.size() - 2, 2, ".*") == 0) {
      if (scheme != Scheme::numeric) throw_usage("'", clause, "': .* prefixes are for numeric and Python versions");
      if (cl.op != "==" && cl.op != "!=") throw_usage("'", clause, "': a .* prefix is only valid with == and != (e.g. ==12.*)");
      cl.wildcard = true;
      ver = ver.substr(0, ver.size() - 2);
    }
    std::string why;
    if (!valid_version(scheme, ver, &why)) throw_usage("'", clause, "': ", why);
    if (scheme == Scheme::numeric) {
      auto nv = parse_numeric_version(ver);
      if (!nv->suffix.empty()) throw_usage("'", clause, "': '", ver, "' is not a dotted number (e.g. 12.4 or 550.54.14)");
      if (cl.op == "~=" && nv->parts.size() < 2) throw_usage("'", clause, "': ~= needs at least two numbers (e.g. ~=12.4)");
    }
    cl.version = ver;
    c.clauses.push_back(cl);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return c;
}

std::string VersionConstraint::rejection(std::string_view version, bool allow_prereleases) const {
  if (is_special(version)) return std::string(version == kVersionUnknown ? "unknown version" : "not installed");
  if (scheme == Scheme::pep440) {
    auto v = parse_pep440(version);
    if (!v) return "not a PEP 440 version";
    if (pep.contains(*v, allow_prereleases)) return "";
    if (const auto* s = pep.first_failing(*v)) return s->str();
    return "a pre-release (PEP 440 excludes them unless the constraint names one)";
  }
  std::string why;
  if (!valid_version(scheme, version, &why)) return why;
  for (const auto& c : clauses)
    if (!clause_holds(scheme, c, version)) return c.str();
  return "";
}

bool VersionConstraint::admits(std::string_view version, bool allow_prereleases) const {
  return rejection(version, allow_prereleases).empty();
}

std::string decode_cuda_version(int64_t code) {
  if (code <= 0) return kVersionNone;
  return std::to_string(code / 1000) + "." + std::to_string((code % 1000) / 10);
}

namespace {
// MAJOR*10000 + MINOR*100 + PATCH for newer releases, MAJOR*1000 + MINOR*100 + PATCH for older
// ones (cuDNN 8, NCCL < 2.9): REFERENCE.md "Version codes".
std::string decode_library_code(int64_t code) {
  if (code <= 0) return kVersionNone;
  int64_t base = code >= 10000 ? 10000 : 1000;
  int64_t major = code / base, rest = code % base;
  return std::to_string(major) + "." + std::to_string(rest / 100) + "." + std::to_string(rest % 100);
}
}  // namespace

std::string decode_cudnn_version(int64_t code) { return decode_library_code(code); }

std::string decode_nccl_version(int64_t code) { return decode_library_code(code); }

int64_t cublas_version_code(int major, int minor, int patch) {
  return int64_t{major} * 10000 + int64_t{minor} * 100 + patch;
}

int64_t version_major(std::string_view v) {
  auto n = parse_numeric_version(v);
  return n ? n->parts[0] : -1;
}

std::optional<std::string> min_driver_for_cuda(std::string_view cuda_version) {
  switch (version_major(cuda_version)) {
    case 13: return std::string("580");
    case 12: return std::string("525.60.13");
    case 11: return std::string("450.80.02");
    default: return std::nullopt;
  }
}

}  // namespace dl
