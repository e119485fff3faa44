// Versions as dl-envlock compares them: one scheme per ecosystem (dpkg for Debian packages, PEP 440
// for Python packages, dotted numbers for CUDA, drivers and tools), constraints over them
// (">=12.4,<14"), how far apart two versions are (major/minor/patch/build), and the CUDA version
// codes and minimum-driver rules of ../shared/REFERENCE.md.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dl/env/pep440.hpp"

namespace dl {

enum class Scheme {
  numeric,  // leading dotted numbers, then an optional suffix: "13.0", "580.95.05", "6.1.0-18-amd64"
  dpkg,     // Debian package versions (dpkg ordering)
  pep440,   // Python package versions
  text,     // a fact that is equal or not: CPU model, GPU name, architecture
  set,      // space-separated words compared as sets: CPU flags
  hash,     // "sha256:<hex>" of a file
};
std::string scheme_name(Scheme s);

// Special versions in a lock: the component is not on the machine / its probe failed.
inline constexpr const char* kVersionNone = "none";
inline constexpr const char* kVersionUnknown = "unknown";
inline constexpr const char* kVersionAbsent = "(absent)";  // not recorded at all (diff/check tables)

struct NumericVersion {
  std::vector<int64_t> parts;
  std::string suffix;  // everything after the dotted numbers ("-18-amd64", " MiB")
};
std::optional<NumericVersion> parse_numeric_version(std::string_view s);
// Numbers compare with missing ones as 0 (13 == 13.0), then suffixes with dpkg's verrevcmp.
int numeric_compare(std::string_view a, std::string_view b);

// Ordering within a scheme; throws dl::Error(usage) when a version is invalid for it. text, set
// and hash compare as plain strings.
int compare_versions(Scheme scheme, std::string_view a, std::string_view b);
bool valid_version(Scheme scheme, std::string_view v, std::string* why = nullptr);

// How much a found version differs from a locked one; the order is the order of importance.
enum class Magnitude { none, build, patch, minor, major, unknown };
std::string magnitude_name(Magnitude m);
// numeric/pep440: the first differing release number decides (index 0 major, 1 minor, 2 patch,
// later numbers, suffixes, pre/post/dev/local parts: build for numeric, patch for pep440);
// dpkg: epoch or first upstream number major, second minor, anything else (third number, suffix,
// Debian revision) patch; text: any difference is major; set: words missing is minor, only new
// words is build; hash: build. A value against "none"/"(absent)" is major; "unknown" on either
// side (a failed probe) is unknown.
Magnitude change_magnitude(Scheme scheme, std::string_view locked, std::string_view found);

// A version constraint: comma-separated clauses, all of which must hold; "*" (or "") is any
// version. Operators: == != >= <= > < for every orderable scheme; ~= and ==X.* / !=X.* for
// numeric and pep440 (PEP 440 semantics); "=" ">>" "<<" are accepted for dpkg as ==, >, <.
// Never admits "none" or "unknown".
struct VersionConstraint {
  struct Clause {
    std::string op;
    std::string version;
    bool wildcard = false;
    std::string str() const { return op + version + (wildcard ? ".*" : ""); }
  };
  Scheme scheme = Scheme::numeric;
  std::string text;
  std::vector<Clause> clauses;
  Pep440SpecifierSet pep;  // the clauses again, for scheme pep440

  bool any() const { return clauses.empty(); }
  // allow_prereleases: PEP 440 pre-releases are excluded unless the constraint names one or this
  // is set (an installed version, or no final release matches).
  bool admits(std::string_view version, bool allow_prereleases = false) const;
  // The first clause that rejects `version` ("<14"), "a pre-release" when only the PEP 440
  // pre-release rule does, "" when admitted.
  std::string rejection(std::string_view version, bool allow_prereleases = false) const;
};
// Throws dl::Error(usage) with the reason; callers add the file and line.
VersionConstraint parse_constraint(Scheme scheme, std::string_view text);

// CUDA version codes (REFERENCE.md "Version codes").
// cudaRuntimeGetVersion / cudaDriverGetVersion / cudnnGetCudartVersion: 1000*major + 10*minor.
std::string decode_cuda_version(int64_t code);  // 13000 -> "13.0", 12040 -> "12.4"; 0 -> "none"
// cuDNN 9+: MAJOR*10000 + MINOR*100 + PATCH; cuDNN <= 8: MAJOR*1000 + MINOR*100 + PATCH.
std::string decode_cudnn_version(int64_t code);  // 91900 -> "9.19.0", 8906 -> "8.9.6"
// NCCL >= 2.9: MAJOR*10000 + MINOR*100 + PATCH; older: MAJOR*1000 + MINOR*100 + PATCH.
std::string decode_nccl_version(int64_t code);  // 22809 -> "2.28.9", 2708 -> "2.7.8"
// cuBLAS (CUBLAS_VERSION in cublas_api.h): MAJOR*10000 + MINOR*100 + PATCH.
int64_t cublas_version_code(int major, int minor, int patch);

// Minimum NVIDIA driver for a CUDA version (REFERENCE.md): 13.x 580, 12.x 525.60.13,
// 11.x 450.80.02; nullopt for versions without a known rule.
std::optional<std::string> min_driver_for_cuda(std::string_view cuda_version);
// The leading number of a version ("13.0" -> 13); -1 when there is none.
int64_t version_major(std::string_view v);

}  // namespace dl
