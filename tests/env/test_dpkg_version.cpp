#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "dl/core/error.hpp"
#include "dl/env/dpkg_version.hpp"
#include "dl/env/process.hpp"

using namespace dl;

namespace {

struct Vec {
  const char* a;
  const char* b;
  int expected;  // sign of compare(a, b)
};

// Debian Policy 5.6.12 examples, dpkg's and apt's version test tables (apt-pkg versions.lst,
// dpkg t/Dpkg_Version.t), and versions seen on this Debian 12 machine. Every row was checked with
// `dpkg --compare-versions`; the last test case re-checks them against dpkg when it is installed.
const std::vector<Vec> kVectors = {
    {"1.0~rc1", "1.0", -1},
    {"1:0.9", "2.0", 1},
    {"1.0-1", "1.0-2", -1},
    {"1.0a", "1.0", 1},
    {"1.0+b1", "1.0", 1},
    {"1.0", "1.0", 0},
    {"0:1.0", "1.0", 0},
    {"1.0", "1.0-0", 0},
    {"1.0-0", "1.0", 0},
    {"1.2.3", "1.2.3-1", -1},
    {"1.0-1-1", "1.0-1", 1},
    {"1.0~", "1.0", -1},
    {"1.0~~", "1.0~", -1},
    {"1.0~~a", "1.0~~", 1},
    {"1.0~beta1~svn1245", "1.0~beta1", -1},
    {"1.0~beta1", "1.0", -1},
    {"1.2a", "1.2.3", -1},
    {"2:1.0", "1:9.9", 1},
    {"1:0.1", "9.9", 1},
    {"7.6p2-4", "7.6-0", 1},
    {"1.0.3-3", "1.0-1", 1},
    {"1.3", "1.2.2-2", 1},
    {"1.3", "1.2.2", 1},
    {"0-pre", "0-pre", 0},
    {"0-pre", "0-pree", -1},
    {"1.1.6r2-2", "1.1.6r-1", 1},
    {"2.6b2-1", "2.6b-2", 1},
    {"98.1p5-1", "98.1-pre2-b6-2", -1},
    {"0.4a6-2", "0.4-1", 1},
    {"1:3.0.5-2", "1:3.0.5.1", -1},
    {"1:0.4", "10.3", 1},
    {"1:1.25-4", "1:1.25-8", -1},
    {"0:1.18.36", "1.18.36", 0},
    {"1.18.36", "1.18.35", 1},
    {"0:1.18.36", "1.18.35", 1},
    {"9:1.18.36:5.4-20", "10:0.5.1-22", -1},
    {"9:1.18.36:5.4-20", "9:1.18.36:5.5-1", -1},
    {"9:1.18.36:5.4-20", "9:1.18.37:4.3-22", -1},
    {"1.18.36-0.17.35-18", "1.18.36-19", 1},
    {"1:1.2.13-3", "1:1.2.13-3.1", -1},
    {"2.0.7pre1-4", "2.0.7r-1", -1},
    {"2.0.7r-1", "2.0.7-1", 1},
    {"0.10.0", "0.8.7", 1},
    {"1.0", "1.00", 0},
    {"1.001", "1.1", 0},
    {"1.0a", "1.0b", -1},
    {"1.0Z", "1.0a", -1},
    {"1.0+", "1.0.", -1},
    {"1.0.a", "1.0+a", 1},
    {"3.0.19-1~deb12u2", "3.0.22-1~deb12u2", -1},
    {"3.0.19-1~deb12u2", "3.0.19-1", -1},
    {"0.3.21+ds-4", "0.3.21-4", 1},
    {"2.28.9-1+cuda13.0", "2.28.9-1+cuda12.9", 1},
    {"0.0~git20220518.5b14351-3", "0.0-1", -1},
    {"1.0~rc1~git123", "1.0~rc1", -1},
    {"10", "9", 1},
    {"100", "99", 1},
    {"1.0-1~bpo1", "1.0-1", -1},
    {"1.0-1", "1.0-1+b1", -1}};

int sgn(int x) { return x < 0 ? -1 : (x > 0 ? 1 : 0); }

}  // namespace

TEST_CASE("dpkg ordering: published vectors, both directions") {
  for (const auto& v : kVectors) {
    INFO(v.a, " vs ", v.b);
    CHECK(sgn(dpkg_compare(v.a, v.b)) == v.expected);
    CHECK(sgn(dpkg_compare(v.b, v.a)) == -v.expected);
  }
  CHECK(kVectors.size() == 59);
}

TEST_CASE("dpkg ordering: the rules one by one") {
  CHECK(dpkg_compare("1.0~rc1", "1.0") < 0);   // ~ sorts before the end of the string
  CHECK(dpkg_compare("1.0~", "1.0~~") > 0);    // ... and before everything, even another ~
  CHECK(dpkg_compare("1:0.9", "2.0") > 0);     // epochs first
  CHECK(dpkg_compare("1.0-1", "1.0-2") < 0);   // revisions
  CHECK(dpkg_compare("1.0a", "1.0") > 0);      // a letter sorts after the end
  CHECK(dpkg_compare("1.0a", "1.0+") < 0);     // letters sort before non-letters
  CHECK(dpkg_compare("1.0+b1", "1.0") > 0);    // binNMU
  CHECK(dpkg_compare("1.10", "1.9") > 0);      // digit runs compare as numbers
  CHECK(dpkg_compare("1.010", "1.10") == 0);   // leading zeros do not count
  DpkgVersion v = parse_dpkg_version("2:1.18.36:5.4-20-1");
  CHECK(v.epoch == 2);
  CHECK(v.upstream == "1.18.36:5.4-20");
  CHECK(v.revision == "1");
  CHECK(v.str() == "2:1.18.36:5.4-20-1");
  CHECK(parse_dpkg_version("  1.0-1  ").str() == "1.0-1");
  // Found by fuzz_dpkg_version (tests/fuzz/corpus/fuzz_dpkg_version/epoch0-colon.txt): an epoch
  // of 0 is written when the upstream version holds a colon, or "0:02:.-debu2" would print as
  // "02:.-debu2", which reads back as epoch 2.
  DpkgVersion zero = parse_dpkg_version("0:02:.-debu2");
  CHECK(zero.str() == "0:02:.-debu2");
  CHECK(dpkg_compare(parse_dpkg_version(zero.str()), zero) == 0);
  CHECK(parse_dpkg_version("0:1.0-1").str() == "1.0-1");  // otherwise epoch 0 stays implicit
  // Found by fuzz_dpkg_version (corpus/fuzz_dpkg_version/revision-colon-nul.bin): a colon in the
  // revision needs the epoch too, and an epoch with a NUL inside is not a number (strtoll stopped
  // at the NUL and took "5\0..." for epoch 5).
  CHECK(parse_dpkg_version("0:1.0-1:2").str() == "0:1.0-1:2");
  std::string why;
  CHECK_FALSE(valid_dpkg_version(std::string_view("5\0x:1.0", 7), &why));
  CHECK(why == "epoch in version is not number");
}

TEST_CASE("dpkg parsing errors give dpkg's reason") {
  std::string why;
  CHECK_FALSE(valid_dpkg_version("", &why));
  CHECK(why == "version string is empty");
  CHECK_FALSE(valid_dpkg_version("1.0-", &why));
  CHECK(why == "revision number is empty");
  CHECK_FALSE(valid_dpkg_version("a:1.0", &why));
  CHECK(why == "epoch in version is empty");  // strtol reads nothing, as in dpkg
  CHECK_FALSE(valid_dpkg_version("1a:1.0", &why));
  CHECK(why == "epoch in version is not number");
  CHECK_FALSE(valid_dpkg_version(":1.0", &why));
  CHECK(why == "epoch in version is empty");
  CHECK_FALSE(valid_dpkg_version("1:", &why));
  CHECK(why == "nothing after colon in version number");
  CHECK_FALSE(valid_dpkg_version("1.0 2", &why));
  CHECK(why == "version string has embedded spaces");
  CHECK_FALSE(valid_dpkg_version("1.18.36:5.4-20", &why));  // a colon in upstream needs an epoch
  CHECK(why == "epoch in version is not number");
  CHECK_THROWS_AS(parse_dpkg_version("1.0-"), Error);
  try {
    parse_dpkg_version("1.0-");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::usage);
    CHECK(std::string(e.what()).find("1.0-") != std::string::npos);
  }
}

TEST_CASE("dpkg ordering agrees with dpkg --compare-versions on this machine") {
  if (find_program("dpkg").empty()) {
    MESSAGE("dpkg is not installed; skipped");
    return;
  }
  int checked = 0;
  for (const auto& v : kVectors) {
    const char* op = v.expected < 0 ? "lt" : (v.expected == 0 ? "eq" : "gt");
    auto r = run_process({"dpkg", "--compare-versions", v.a, op, v.b});
    INFO(v.a, " ", op, " ", v.b);
    CHECK(r.exit_code == 0);
    ++checked;
  }
  CHECK(checked == static_cast<int>(kVectors.size()));
}
