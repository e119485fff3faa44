// PEP 440 (https://peps.python.org/pep-0440/), following the reference implementation in
// pypa/packaging (version.py: VERSION_PATTERN and _cmpkey; specifiers.py: Specifier._compare_*).
#include "dl/env/pep440.hpp"

#include <algorithm>
#include <cctype>
#include <regex>
#include <tuple>

#include "dl/core/error.hpp"
#include "dl/core/strings.hpp"

namespace dl {

namespace {

bool to_int(const std::string& s, int64_t& out) {
  if (s.empty() || s.size() > 18) return false;
  out = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    out = out * 10 + (c - '0');
  }
  return true;
}

const std::regex& version_regex() {
  // packaging's VERSION_PATTERN with numbered groups:
  // 1 epoch, 2 release, 3 pre label, 4 pre number, 5 implicit post number ("1.0-1"),
  // 6 post label, 7 post number, 8 dev label, 9 dev number, 10 local.
  static const std::regex re(
      R"(^\s*v?(?:([0-9]+)!)?([0-9]+(?:\.[0-9]+)*))"
      R"((?:[-_.]?(alpha|a|beta|b|preview|pre|c|rc)[-_.]?([0-9]+)?)?)"
      R"((?:-([0-9]+)|[-_.]?(post|rev|r)[-_.]?([0-9]+)?)?)"
      R"((?:[-_.]?(dev)[-_.]?([0-9]+)?)?)"
      R"((?:\+([a-z0-9]+(?:[-_.][a-z0-9]+)*))?\s*$)",
      std::regex::icase | std::regex::optimize);
  return re;
}

int sign(int64_t d) { return d < 0 ? -1 : (d > 0 ? 1 : 0); }

int pre_rank(const std::string& l) { return l == "a" ? 0 : (l == "b" ? 1 : 2); }

std::vector<int64_t> strip_zeros(const std::vector<int64_t>& r) {
  std::vector<int64_t> out = r;
  while (!out.empty() && out.back() == 0) out.pop_back();
  return out;
}

}  // namespace

std::optional<Pep440Version> parse_pep440(std::string_view text) {
  std::string s(text);
  std::smatch m;
  if (!std::regex_match(s, m, version_regex())) return std::nullopt;
  Pep440Version v;
  if (m[1].matched && !to_int(m[1].str(), v.epoch)) return std::nullopt;
  std::string rel = m[2].str();
  size_t start = 0;
  for (;;) {
    size_t dot = rel.find('.', start);
    int64_t n = 0;
    if (!to_int(rel.substr(start, dot == std::string::npos ? std::string::npos : dot - start), n)) return std::nullopt;
    v.release.push_back(n);
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  if (m[3].matched) {
    std::string l = to_lower(m[3].str());
    if (l == "alpha") l = "a";
    else if (l == "beta") l = "b";
    else if (l == "c" || l == "pre" || l == "preview") l = "rc";
    int64_t n = 0;
    if (m[4].matched && !to_int(m[4].str(), n)) return std::nullopt;
    v.pre = std::make_pair(l, n);
  }
  if (m[5].matched) {
    int64_t n = 0;
    if (!to_int(m[5].str(), n)) return std::nullopt;
    v.post = n;
  } else if (m[6].matched) {
    int64_t n = 0;
    if (m[7].matched && !to_int(m[7].str(), n)) return std::nullopt;
    v.post = n;
  }
  if (m[8].matched) {
    int64_t n = 0;
    if (m[9].matched && !to_int(m[9].str(), n)) return std::nullopt;
    v.dev = n;
  }
  if (m[10].matched) {
    std::string loc = to_lower(m[10].str());
    size_t b = 0;
    for (size_t i = 0; i <= loc.size(); ++i) {
      if (i == loc.size() || loc[i] == '.' || loc[i] == '-' || loc[i] == '_') {
        std::string part = loc.substr(b, i - b);
        int64_t n = 0;
        bool digits = std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
        if (digits && to_int(part, n)) v.local.emplace_back(n);
        else v.local.emplace_back(part);
        b = i + 1;
      }
    }
  }
  return v;
}

Pep440Version parse_pep440_or_throw(std::string_view text) {
  auto v = parse_pep440(text);
  if (!v) throw_usage("'", text, "' is not a PEP 440 version (expected e.g. 1.24.2, 2.0rc1, 1!2.0.post1, 2.1.0+cu121)");
  return *v;
}

std::string Pep440Version::public_str() const {
  std::string s;
  if (epoch) s += std::to_string(epoch) + "!";
  for (size_t i = 0; i < release.size(); ++i) {
      if (i) s += ".";
      s += std::to_string(release[i]);
    }
  if (pre) s += pre->first + std::to_string(pre->second);
  if (post) s += ".post" + std::to_string(*post);
  if (dev) s += ".dev" + std::to_string(*dev);
  return s;
}

std::string Pep440Version::str() const {
  std::string s = public_str();
  for (size_t i = 0; i < local.size(); ++i) {
    s += i ? "." : "+";
    if (auto* n = std::get_if<int64_t>(&local[i])) s += std::to_string(*n);
    else s += std::get<std::string>(local[i]);
  }
  return s;
}

std::string Pep440Version::base_str() const { return base_version().str(); }

Pep440Version Pep440Version::public_version() const {
  Pep440Version v = *this;
  v.local.clear();
  return v;
}

Pep440Version Pep440Version::base_version() const {
  Pep440Version v;
  v.epoch = epoch;
  v.release = release;
  return v;
}

int pep440_compare(const Pep440Version& a, const Pep440Version& b) {
  if (a.epoch != b.epoch) return sign(a.epoch - b.epoch);
  {
    auto ra = strip_zeros(a.release), rb = strip_zeros(b.release);
    if (ra != rb) return std::lexicographical_compare(ra.begin(), ra.end(), rb.begin(), rb.end()) ? -1 : 1;
  }
  // Pre-release key: a dev release of a final version (1.0.dev1) sorts before its pre-releases;
  // no pre-release sorts after all of them.
  auto pre_key = [](const Pep440Version& v) -> std::tuple<int, int, int64_t> {
    if (!v.pre && !v.post && v.dev) return {0, 0, 0};
    if (!v.pre) return {2, 0, 0};
    return {1, pre_rank(v.pre->first), v.pre->second};
  };
  auto pa = pre_key(a), pb = pre_key(b);
  if (pa != pb) return pa < pb ? -1 : 1;
  // Post: none sorts first. Dev: none sorts last.
  auto post_key = [](const Pep440Version& v) -> std::pair<int, int64_t> {
    return v.post ? std::make_pair(1, *v.post) : std::make_pair(0, int64_t{0});
  };
  if (post_key(a) != post_key(b)) return post_key(a) < post_key(b) ? -1 : 1;
  auto dev_key = [](const Pep440Version& v) -> std::pair<int, int64_t> {
    return v.dev ? std::make_pair(0, *v.dev) : std::make_pair(1, int64_t{0});
  };
  if (dev_key(a) != dev_key(b)) return dev_key(a) < dev_key(b) ? -1 : 1;
  // Local: none sorts first; parts compare numbers above strings, strings lexicographically.
  if (a.local.empty() != b.local.empty()) return a.local.empty() ? -1 : 1;
  size_t n = std::min(a.local.size(), b.local.size());
  for (size_t i = 0; i < n; ++i) {
    const auto &x = a.local[i], &y = b.local[i];
    bool xi = std::holds_alternative<int64_t>(x), yi = std::holds_alternative<int64_t>(y);
    if (xi != yi) return xi ? 1 : -1;
    if (xi) {
      int64_t d = std::get<int64_t>(x) - std::get<int64_t>(y);
      if (d) return sign(d);
    } else {
      int c = std::get<std::string>(x).compare(std::get<std::string>(y));
      if (c) return c < 0 ? -1 : 1;
    }
  }
  if (a.local.size() != b.local.size()) return a.local.size() < b.local.size() ? -1 : 1;
  return 0;
}

int pep440_compare(std::string_view a, std::string_view b) {
  return pep440_compare(parse_pep440_or_throw(a), parse_pep440_or_throw(b));
}

namespace {

// "==1.2.*": epoch equal and the release, padded with zeros, starts with the prefix.
bool prefix_match(const Pep440Version& v, const Pep440Version& prefix) {
  if (v.epoch != prefix.epoch) return false;
  for (size_t i = 0; i < prefix.release.size(); ++i) {
    int64_t x = i < v.release.size() ? v.release[i] : 0;
    if (x != prefix.release[i]) return false;
  }
  return true;
}

bool equal_clause(const Pep440Version& v, const Pep440Specifier& s) {
  Pep440Version spec = *parse_pep440(s.version);
  if (s.wildcard) return prefix_match(v, spec);
  if (!spec.has_local()) return pep440_compare(v.public_version(), spec) == 0;
  return pep440_compare(v, spec) == 0;
}

}  // namespace

bool Pep440Specifier::admits_prereleases() const {
  if (op == "!=" || op == "<" || op == ">" || wildcard) return false;
  auto v = parse_pep440(version);
  return v && v->is_prerelease();
}

bool Pep440Specifier::contains(const Pep440Version& v) const {
  if (op == "===") return to_lower(v.str()) == to_lower(version) || to_lower(version) == to_lower(v.public_str());
  if (op == "==") return equal_clause(v, *this);
  if (op == "!=") return !equal_clause(v, *this);
  Pep440Version spec = *parse_pep440(version);
  if (op == "<=") return pep440_compare(v.public_version(), spec) <= 0;
  if (op == ">=") return pep440_compare(v.public_version(), spec) >= 0;
  if (op == "<") {
    if (pep440_compare(v, spec) >= 0) return false;
    // <V excludes pre-releases of V itself unless V is a pre-release.
    if (!spec.is_prerelease() && v.is_prerelease() && pep440_compare(v.base_version(), spec.base_version()) == 0)
      return false;
    return true;
  }
  if (op == ">") {
    if (pep440_compare(v, spec) <= 0) return false;
    // >V excludes post-releases and local versions of V itself.
    bool same_base = pep440_compare(v.base_version(), spec.base_version()) == 0;
    if (!spec.is_postrelease() && v.is_postrelease() && same_base) return false;
    if (v.has_local() && same_base) return false;
    return true;
  }
  if (op == "~=") {
    // ~=V.N is >=V.N together with ==V.* (the release without its last number).
    if (pep440_compare(v.public_version(), spec) < 0) return false;
    Pep440Version prefix = spec.base_version();
    prefix.release.pop_back();
    return prefix_match(v, prefix);
  }
  return false;
}

std::string Pep440SpecifierSet::str() const {
  std::string s;
  for (size_t i = 0; i < specs.size(); ++i) {
      if (i) s += ",";
      s += specs[i].str();
    }
  return s.empty() ? "*" : s;
}

bool Pep440SpecifierSet::contains(const Pep440Version& v, bool allow_prereleases) const {
  bool pre_ok = allow_prereleases ||
                std::any_of(specs.begin(), specs.end(), [](const Pep440Specifier& s) { return s.admits_prereleases(); });
  if (!pre_ok && v.is_prerelease()) return false;
  return first_failing(v) == nullptr;
}

const Pep440Specifier* Pep440SpecifierSet::first_failing(const Pep440Version& v) const {
  for (const auto& s : specs)
    if (!s.contains(v)) return &s;
  return nullptr;
}

Pep440SpecifierSet parse_pep440_specifiers(std::string_view text) {
  Pep440SpecifierSet set;
  std::string all = trim(text);
  if (all.empty() || all == "*") return set;
  size_t start = 0;
  for (;;) {
    size_t comma = all.find(',', start);
    std::string clause = trim(all.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (clause.empty()) throw_usage("empty clause in '", all, "' (clauses are separated by single commas)");
    static const char* ops[] = {"===", "~=", "==", "!=", "<=", ">=", "<", ">"};
    Pep440Specifier spec;
    for (const char* op : ops) {
      if (clause.rfind(op, 0) == 0) {
        spec.op = op;
        break;
      }
    }
    if (spec.op.empty())
      throw_usage("'", clause, "' has no operator (use one of ~= == != <= >= < > ===, e.g. >=1.24)");
    std::string ver = trim(clause.substr(spec.op.size()));
    if (ver.empty()) throw_usage("'", clause, "' has no version after ", spec.op);
    if (!ver.empty() && (ver[0] == '=' || ver[0] == '<' || ver[0] == '>' || ver[0] == '!' || ver[0] == '~'))
      throw_usage("'", clause, "': unknown operator (use one of ~= == != <= >= < > ===)");
    if (spec.op != "===") {
      if (ver.size() > 2 && ver.compare(ver.size() - 2, 2, ".*") == 0) {
        if (spec.op != "==" && spec.op != "!=")
          throw_usage("'", clause, "': a .* prefix is only valid with == and != (e.g. ==1.2.*)");
        spec.wildcard = true;
        ver = ver.substr(0, ver.size() - 2);
        auto v = parse_pep440(ver);
        if (!v || v->pre || v->post || v->dev || v->has_local())
          throw_usage("'", clause, "': a prefix match takes release numbers only (e.g. ==1.2.*)");
      } else {
        auto v = parse_pep440(ver);
        if (!v) throw_usage("'", clause, "': '", ver, "' is not a PEP 440 version");
        if (v->has_local() && spec.op != "==" && spec.op != "!=")
          throw_usage("'", clause, "': a local version (+...) is only valid with == and !=");
        if (spec.op == "~=" && v->release.size() < 2)
          throw_usage("'", clause, "': ~= needs at least two release numbers (e.g. ~=1.4 or ~=1.4.2)");
      }
    }
    spec.version = ver;
    set.specs.push_back(std::move(spec));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return set;
}

std::string normalize_python_name(std::string_view name) {
  std::string out;
  bool sep = false;
  for (char c : name) {
    if (c == '-' || c == '_' || c == '.') {
      sep = true;
      continue;
    }
    if (sep && !out.empty()) out += '-';
    sep = false;
    out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

}  // namespace dl
