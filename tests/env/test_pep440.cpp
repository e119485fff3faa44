#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "dl/core/error.hpp"
#include "dl/env/pep440.hpp"

using namespace dl;

namespace {

bool spec(const char* version, const char* specifiers, bool pre = false) {
  return parse_pep440_specifiers(specifiers).contains(parse_pep440_or_throw(version), pre);
}

}  // namespace

TEST_CASE("PEP 440 ordering: the sorted list from pypa/packaging's tests") {
  // tests/test_version.py VERSIONS of pypa/packaging: strictly increasing.
  const std::vector<std::string> base = {
      "1.0.dev456", "1.0a1", "1.0a2.dev456", "1.0a12.dev456", "1.0a12", "1.0b1.dev456", "1.0b2",
      "1.0b2.post345.dev456", "1.0b2.post345", "1.0b2-346", "1.0c1.dev456", "1.0c1", "1.0rc2", "1.0c3", "1.0",
      "1.0.post456.dev34", "1.0.post456", "1.1.dev1", "1.2+123abc", "1.2+123abc456", "1.2+abc", "1.2+abc123",
      "1.2+abc123def", "1.2+1234.abc", "1.2+123456", "1.2.r32+123456", "1.2.rev33+123456"};
  std::vector<std::string> all = base;
  for (const auto& v : base) all.push_back("1!" + v);
  REQUIRE(all.size() == 54);
  for (size_t i = 0; i < all.size(); ++i)
    for (size_t j = 0; j < all.size(); ++j) {
      int c = pep440_compare(all[i], all[j]);
      int expected = i < j ? -1 : (i == j ? 0 : 1);
      if ((c < 0 ? -1 : (c > 0 ? 1 : 0)) != expected) FAIL_CHECK(all[i] << " vs " << all[j] << " gave " << c);
    }
}

TEST_CASE("PEP 440 normalisation and equality") {
  struct N {
    const char* in;
    const char* out;
  };
  // Outputs as packaging 21.3 prints them (str(Version(in))).
  for (const auto& n : std::vector<N>{{"1.0rc1", "1.0rc1"},       {"1.0-r4", "1.0.post4"},     {"1.0.DEV", "1.0.dev0"},
                                      {"v1.0", "1.0"},             {"1.0alpha1", "1.0a1"},       {"1.0-1", "1.0.post1"},
                                      {"1.0+ubuntu-1", "1.0+ubuntu.1"}, {"1.0c1", "1.0rc1"},      {"1.0.post", "1.0.post0"},
                                      {"1.0-dev2", "1.0.dev2"},    {"1.0_a_1", "1.0a1"},         {"1.0preview3", "1.0rc3"},
                                      {"2!1.0.0.0", "2!1.0.0.0"},  {"1.0.0-rc.1", "1.0.0rc1"},   {"1.0RC1", "1.0rc1"},
                                      {" 1.0 ", "1.0"}}) {
    INFO(n.in);
    auto v = parse_pep440(n.in);
    REQUIRE(v.has_value());
    CHECK(v->str() == n.out);
  }
  CHECK(pep440_compare("1.0rc1", "1.0.0rc1") == 0);
  CHECK(pep440_compare("1.0", "1.0.0.0") == 0);
  CHECK(pep440_compare("1.0+a", "1.0") > 0);
  CHECK(pep440_compare("1.0.dev1", "1.0a1") < 0);
  CHECK(pep440_compare("1.0a1", "1.0b1") < 0);
  CHECK(pep440_compare("1.0b1", "1.0rc1") < 0);
  CHECK(pep440_compare("1.0rc1", "1.0") < 0);
  CHECK(pep440_compare("1.0", "1.0.post1") < 0);
  CHECK(pep440_compare("1!0.1", "2.0") > 0);
  for (const char* bad : {"", "1.0-", "a.b", "1.0+", "1..0", "1.0 dev", "1.0+a+b", "foo"}) {
    INFO(bad);
    CHECK_FALSE(parse_pep440(bad).has_value());
  }
  CHECK_THROWS_AS(parse_pep440_or_throw("a.b"), Error);
  CHECK(normalize_python_name("Foo.Bar__baz") == "foo-bar-baz");
  CHECK(normalize_python_name("nvidia_nccl-cu12") == "nvidia-nccl-cu12");
}

TEST_CASE("PEP 440 specifiers: results of packaging's SpecifierSet.contains") {
  CHECK(spec("2.0", "==2"));
  CHECK(spec("2.0", "==2.0.0"));
  CHECK(spec("2.0+deadbeef", "==2"));
  CHECK(spec("2.0+deadbeef", "==2.0+deadbeef"));
  CHECK(spec("2.0", "==2.*"));
  CHECK(spec("2.0.0", "==2.*"));
  CHECK(spec("2.1+local.version", "~=2.0"));
  CHECK(spec("2.0", "!=2.1"));
  CHECK_FALSE(spec("2.0.post1", "==2"));
  CHECK_FALSE(spec("2.0.post1", ">2"));        // >V excludes post-releases of V
  CHECK_FALSE(spec("2.0.post1.dev1", ">2"));
  CHECK(spec("2.0.post1", ">=2"));
  CHECK_FALSE(spec("2.0.dev1", "<2"));
  CHECK(spec("1.9", "<2"));
  CHECK_FALSE(spec("2.0a1", "<2"));
  CHECK_FALSE(spec("2.0a1", "<2.0a2"));        // pre-releases excluded by default
  CHECK(spec("2.1", "~=2.0"));
  CHECK_FALSE(spec("3.0", "~=2.0"));
  CHECK(spec("2.2.1", "~=2.2.0"));
  CHECK_FALSE(spec("2.3.0", "~=2.2.0"));
  CHECK(spec("1.24.2", ">=1.24"));
  CHECK_FALSE(spec("1.23.5", ">=1.24"));
  CHECK_FALSE(spec("1.26.0rc1", ">=1.24"));
  CHECK(spec("1.26.0rc1", ">=1.26.0rc1"));     // the specifier names a pre-release
  CHECK_FALSE(spec("2.0", ">2"));
  CHECK_FALSE(spec("2.0+local", ">2"));        // >V excludes local versions of V
  CHECK(spec("2.0.1", ">2"));
  CHECK(spec("1.2.3", "==1.2.*"));
  CHECK_FALSE(spec("1.3", "==1.2.*"));
  CHECK_FALSE(spec("1.2", "!=1.2.*"));
  CHECK(spec("1.0", ">=1.0,<2,!=1.5"));
  CHECK_FALSE(spec("1.5", ">=1.0,<2,!=1.5"));
  CHECK(spec("2.0b1", "~=2.0b1"));
  CHECK(spec("2.0", "===2.0"));
  CHECK_FALSE(spec("2.0.0", "===2.0"));
  CHECK_FALSE(spec("1!1.0", "==1.*"));
  CHECK(spec("0.9", "<=1.0"));
  CHECK(spec("1.0+l", "<=1.0"));
  CHECK(spec("1.0", "*"));
  CHECK(spec("1.0", ""));
  // With pre-releases allowed (installed, or nothing else matches): packaging's prereleases=True.
  CHECK_FALSE(spec("2.0.dev1", "<2", true));   // <V still excludes pre-releases of V itself
  CHECK(spec("2.0a1", "<2.0a2", true));
  CHECK(spec("1.9a1", "<2", true));
  CHECK(spec("2.0a1", ">=1.0", true));
  CHECK(spec("2.0.post1", ">2.0.post0", true));
  CHECK_FALSE(spec("1.0.dev1", "<1.0", true));
  CHECK(spec("0.9.dev1", "<1.0", true));
  auto set = parse_pep440_specifiers(">=1.0, <2 ,!=1.5");
  CHECK(set.str() == ">=1.0,<2,!=1.5");
  const auto* fail = set.first_failing(parse_pep440_or_throw("2.1"));
  REQUIRE(fail != nullptr);
  CHECK(fail->str() == "<2");
}

TEST_CASE("PEP 440 specifier errors say what is wrong") {
  auto msg = [](const char* s) {
    try {
      parse_pep440_specifiers(s);
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::usage);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(msg("=>1.0").find("operator") != std::string::npos);
  CHECK(msg("1.0").find("no operator") != std::string::npos);
  CHECK(msg(">=1.0,,<2").find("empty clause") != std::string::npos);
  CHECK(msg(">=1.*").find("only valid with == and !=") != std::string::npos);
  CHECK(msg("~=1").find("two release numbers") != std::string::npos);
  CHECK(msg(">=1.0+local").find("local version") != std::string::npos);
  CHECK(msg(">=x.y").find("not a PEP 440 version") != std::string::npos);
  CHECK(msg("==1.0rc1.*").find("release numbers only") != std::string::npos);
}
