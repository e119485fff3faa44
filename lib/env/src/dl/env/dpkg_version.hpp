// Debian package versions: "[epoch:]upstream[-revision]", ordered exactly as dpkg orders them
// (dpkg lib/dpkg/version.c, Debian Policy 5.6.12): epochs first; then upstream and revision
// compared by alternating non-digit and digit runs, where '~' sorts before everything (even the
// end of the string), letters sort before all other characters, and digit runs compare as numbers.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace dl {

struct DpkgVersion {
  uint64_t epoch = 0;
  std::string upstream;
  std::string revision;  // "" when absent (compares equal to "0")
  std::string str() const;
};

// Parses as dpkg's parseversion(): throws dl::Error(usage) with dpkg's reason ("epoch in version
// is not number", "revision number is empty", ...). dpkg's warnings (a version that does not
// start with a digit, unusual characters) are accepted, as dpkg --compare-versions accepts them.
DpkgVersion parse_dpkg_version(std::string_view text);
// True when parse_dpkg_version would not throw; `why` gets the reason otherwise.
bool valid_dpkg_version(std::string_view text, std::string* why = nullptr);

// <0, 0, >0 as a is older than, the same as, or newer than b.
int dpkg_compare(const DpkgVersion& a, const DpkgVersion& b);
int dpkg_compare(std::string_view a, std::string_view b);  // parses both (throws on invalid)

// dpkg's verrevcmp() on one part (upstream or revision): exposed for suffix comparisons.
int dpkg_verrevcmp(std::string_view a, std::string_view b);

}  // namespace dl
