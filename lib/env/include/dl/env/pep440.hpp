// Python package versions and specifiers per PEP 440 (as implemented by the `packaging` library
// that pip uses): epochs, pre/post/dev releases, local versions, normalisation (1.0rc1 == 1.0.0rc1,
// 1.0-1 == 1.0.post1, 1.0alpha1 == 1.0a1) and the specifier operators ~= == != <= >= < > ===,
// including prefix matching (==1.2.*) and the pre-release rules.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace dl {

struct Pep440Version {
  int64_t epoch = 0;
  std::vector<int64_t> release;
  std::optional<std::pair<std::string, int64_t>> pre;  // "a" | "b" | "rc", number
  std::optional<int64_t> post;
  std::optional<int64_t> dev;
  std::vector<std::variant<int64_t, std::string>> local;  // lowercased parts; empty = no local

  bool is_prerelease() const { return pre.has_value() || dev.has_value(); }
  bool is_postrelease() const { return post.has_value(); }
  bool has_local() const { return !local.empty(); }
  std::string str() const;           // normalised form: "1!1.0rc1.post2.dev3+ubuntu.1"
  std::string public_str() const;    // without the local part
  std::string base_str() const;      // epoch and release only
  Pep440Version public_version() const;
  Pep440Version base_version() const;
};

// nullopt when the text is not a valid PEP 440 version.
std::optional<Pep440Version> parse_pep440(std::string_view text);
// Throws dl::Error(usage) naming the text when invalid.
Pep440Version parse_pep440_or_throw(std::string_view text);

int pep440_compare(const Pep440Version& a, const Pep440Version& b);  // <0, 0, >0
int pep440_compare(std::string_view a, std::string_view b);          // parses (throws on invalid)

// One clause of a specifier set: "~=1.4", "==1.2.*", ">=2.0rc1".
struct Pep440Specifier {
  std::string op;       // "~=", "==", "!=", "<=", ">=", "<", ">", "==="
  std::string version;  // as written, without ".*"
  bool wildcard = false;  // "==1.2.*" / "!=1.2.*"
  std::string str() const { return op + version + (wildcard ? ".*" : ""); }
  // Whether the clause itself names a pre-release (">=1.0rc1"), which admits pre-releases.
  bool admits_prereleases() const;
  bool contains(const Pep440Version& v) const;  // the operator alone, without pre-release filtering
};

// A comma-separated specifier set (">=1.24,<2,!=1.25.1"); "" and "*" mean any version.
struct Pep440SpecifierSet {
  std::vector<Pep440Specifier> specs;
  std::string str() const;
  // PEP 440 "Handling of pre-releases": pre-releases are excluded unless the set names one, or
  // allow_prereleases is true (the version is already installed, or nothing else matches).
  bool contains(const Pep440Version& v, bool allow_prereleases = false) const;
  // The first clause that rejects v (nullptr when it passes); for explanations.
  const Pep440Specifier* first_failing(const Pep440Version& v) const;
};

// Throws dl::Error(usage) with the reason ("unknown operator '=>'", "'1.2.*' is only valid with ==
// and !=", "~= needs at least two release numbers").
Pep440SpecifierSet parse_pep440_specifiers(std::string_view text);

// PEP 503 name normalisation: lowercase, runs of '-', '_' and '.' become one '-'.
std::string normalize_python_name(std::string_view name);

}  // namespace dl
