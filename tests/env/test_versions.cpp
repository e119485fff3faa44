#include <doctest/doctest.h>

#include <string>

#include "dl/core/error.hpp"
#include "dl/env/versions.hpp"

using namespace dl;

TEST_CASE("numeric versions: dotted numbers, then a suffix") {
  CHECK(numeric_compare("13.0", "13") == 0);
  CHECK(numeric_compare("13.0", "12.9") > 0);
  CHECK(numeric_compare("525.60.13", "525.60.9") > 0);
  CHECK(numeric_compare("580", "525.60.13") > 0);
  CHECK(numeric_compare("6.1.0-18-amd64", "6.1.0-20-amd64") < 0);
  CHECK(numeric_compare("9.10.0", "9.9.0") > 0);
  auto v = parse_numeric_version("81559 MiB");
  REQUIRE(v.has_value());
  CHECK(v->parts == std::vector<int64_t>{81559});
  CHECK(v->suffix == " MiB");
  CHECK_FALSE(parse_numeric_version("none").has_value());
  CHECK(compare_versions(Scheme::dpkg, "1.0~rc1", "1.0") < 0);
  CHECK(compare_versions(Scheme::pep440, "1.0rc1", "1.0") < 0);
  CHECK_THROWS_AS(compare_versions(Scheme::pep440, "x.y", "1.0"), Error);
}

TEST_CASE("change magnitude per scheme") {
  CHECK(change_magnitude(Scheme::numeric, "13.0", "13.0") == Magnitude::none);
  CHECK(change_magnitude(Scheme::numeric, "13.0", "12.4") == Magnitude::major);
  CHECK(change_magnitude(Scheme::numeric, "13.0", "13.1") == Magnitude::minor);
  CHECK(change_magnitude(Scheme::numeric, "9.19.0", "9.19.1") == Magnitude::patch);
  CHECK(change_magnitude(Scheme::numeric, "13.0.88", "13.0.88.1") == Magnitude::build);
  CHECK(change_magnitude(Scheme::numeric, "6.1.0-18-amd64", "6.1.0-20-amd64") == Magnitude::build);
  CHECK(change_magnitude(Scheme::numeric, "580.95.05", "none") == Magnitude::major);
  CHECK(change_magnitude(Scheme::numeric, "none", "580.95.05") == Magnitude::major);
  CHECK(change_magnitude(Scheme::numeric, "580.95.05", "unknown") == Magnitude::unknown);
  CHECK(change_magnitude(Scheme::dpkg, "0.3.21+ds-4", "0.3.21+ds-5") == Magnitude::patch);
  CHECK(change_magnitude(Scheme::dpkg, "3.0.19-1~deb12u2", "3.0.22-1~deb12u2") == Magnitude::patch);
  CHECK(change_magnitude(Scheme::dpkg, "0.3.21+ds-4", "0.4.0-1") == Magnitude::minor);
  CHECK(change_magnitude(Scheme::dpkg, "1:1.0-1", "1.0-1") == Magnitude::major);
  CHECK(change_magnitude(Scheme::dpkg, "1.0-1", "1.00-1") == Magnitude::none);
  CHECK(change_magnitude(Scheme::pep440, "1.24.2", "1.26.0") == Magnitude::minor);
  CHECK(change_magnitude(Scheme::pep440, "1.24.2", "2.0") == Magnitude::major);
  CHECK(change_magnitude(Scheme::pep440, "2.1.0+cpu", "2.1.0+cu121") == Magnitude::patch);
  CHECK(change_magnitude(Scheme::pep440, "1.0", "1.0.0") == Magnitude::none);
  CHECK(change_magnitude(Scheme::text, "NVIDIA H100", "NVIDIA A100") == Magnitude::major);
  CHECK(change_magnitude(Scheme::set, "avx avx2 sse", "avx sse") == Magnitude::minor);
  CHECK(change_magnitude(Scheme::set, "avx sse", "avx avx2 sse") == Magnitude::build);
  CHECK(change_magnitude(Scheme::hash, "sha256:aa", "sha256:bb") == Magnitude::build);
  CHECK(change_magnitude(Scheme::hash, "sha256:aa", "(absent)") == Magnitude::build);
}

TEST_CASE("constraints per scheme") {
  auto cuda = parse_constraint(Scheme::numeric, ">=12.4,<14");
  CHECK(cuda.admits("13.0"));
  CHECK(cuda.admits("12.4"));
  CHECK_FALSE(cuda.admits("12.3"));
  CHECK_FALSE(cuda.admits("14.0"));
  CHECK(cuda.rejection("14.0") == "<14");
  CHECK(cuda.rejection("12.2") == ">=12.4");
  CHECK_FALSE(cuda.admits("none"));
  CHECK(cuda.rejection("none") == "not installed");
  CHECK(parse_constraint(Scheme::numeric, "==12.*").admits("12.8"));
  CHECK_FALSE(parse_constraint(Scheme::numeric, "==12.*").admits("13.0"));
  CHECK(parse_constraint(Scheme::numeric, "~=12.4").admits("12.8"));
  CHECK_FALSE(parse_constraint(Scheme::numeric, "~=12.4").admits("13.0"));
  CHECK(parse_constraint(Scheme::numeric, "*").any());
  CHECK(parse_constraint(Scheme::numeric, "*").admits("1"));
  CHECK(parse_constraint(Scheme::numeric, ">=550").admits("580.95.05"));

  auto deb = parse_constraint(Scheme::dpkg, ">=0.3.21~,<<0.4");
  CHECK(deb.admits("0.3.21+ds-4"));
  CHECK(deb.admits("0.3.21~rc1-1"));
  CHECK_FALSE(deb.admits("0.4-1"));
  CHECK(parse_constraint(Scheme::dpkg, "=1:2.0-1").admits("1:2.0-1"));
  CHECK(parse_constraint(Scheme::dpkg, ">>1.0").admits("1.0+b1"));

  auto py = parse_constraint(Scheme::pep440, ">=1.24");
  CHECK(py.admits("1.26.4"));
  CHECK_FALSE(py.admits("1.23.5"));
  CHECK_FALSE(py.admits("2.0rc1"));
  CHECK(py.admits("2.0rc1", true));
  CHECK(py.rejection("1.23.5") == ">=1.24");

  auto err = [](Scheme s, const char* t) {
    try {
      parse_constraint(s, t);
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::usage);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(err(Scheme::numeric, ">=12.4,<<14").find("unknown operator") != std::string::npos);
  CHECK(err(Scheme::numeric, "12.4").find("no operator") != std::string::npos);
  CHECK(err(Scheme::numeric, ">=abc").find("does not start with a number") != std::string::npos);
  CHECK(err(Scheme::numeric, ">=12.4,").find("empty clause") != std::string::npos);
  CHECK(err(Scheme::numeric, ">=12.*").find("only valid with == and !=") != std::string::npos);
  CHECK(err(Scheme::dpkg, ">=1.0-").find("revision number is empty") != std::string::npos);
  CHECK(err(Scheme::dpkg, "==1.*").find("prefixes") != std::string::npos);
}

TEST_CASE("CUDA version codes and minimum drivers (REFERENCE.md)") {
  CHECK(decode_cuda_version(13000) == "13.0");
  CHECK(decode_cuda_version(12040) == "12.4");
  CHECK(decode_cuda_version(11080) == "11.8");
  CHECK(decode_cuda_version(0) == "none");
  CHECK(decode_cudnn_version(91900) == "9.19.0");  // cuDNN 9: MAJOR*10000 + MINOR*100 + PATCH
  CHECK(decode_cudnn_version(90100) == "9.1.0");
  CHECK(decode_cudnn_version(8906) == "8.9.6");    // cuDNN 8: MAJOR*1000 + MINOR*100 + PATCH
  CHECK(decode_cudnn_version(7605) == "7.6.5");
  CHECK(decode_nccl_version(22809) == "2.28.9");   // NCCL >= 2.9: MAJOR*10000 + MINOR*100 + PATCH
  CHECK(decode_nccl_version(21803) == "2.18.3");
  CHECK(decode_nccl_version(2708) == "2.7.8");     // older: MAJOR*1000 + MINOR*100 + PATCH
  CHECK(cublas_version_code(13, 1, 0) == 130100);
  CHECK(min_driver_for_cuda("13.0").value() == "580");
  CHECK(min_driver_for_cuda("13.1").value() == "580");
  CHECK(min_driver_for_cuda("12.4").value() == "525.60.13");
  CHECK(min_driver_for_cuda("11.8").value() == "450.80.02");
  CHECK_FALSE(min_driver_for_cuda("10.2").has_value());
  CHECK(version_major("13.0") == 13);
  CHECK(version_major("none") == -1);
}
