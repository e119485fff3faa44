#include <doctest/doctest.h>

#include <sstream>
#include <string>

#include "dl/core/error.hpp"
#include "dl/env/dpkg_version.hpp"
#include "dl/env/process.hpp"
#include "dl/env/resolve.hpp"

using namespace dl;

namespace {

std::string constraint_error(const std::string& text) {
  try {
    parse_constraints(text, "env.toml");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::usage);
    return e.what();
  }
  return "no error";
}

Candidate cand(std::string v, std::string origin, bool installed, std::string built_for = "", std::string pkg = "",
               std::string pkg_version = "") {
  return Candidate{std::move(v), std::move(origin), std::move(pkg), std::move(pkg_version), std::move(built_for), installed};
}

// A machine with CUDA 13.0 and driver 580 installed, and apt offering CUDA 12.4 and an older driver.
FixedCandidates machine() {
  FixedCandidates m;
  m.add("cuda", cand("13.0", "installed", true));
  m.add("cuda", cand("12.4", "apt bookworm/non-free", false, "", "nvidia-cuda-toolkit", "12.4.131~12.4.1-1"));
  m.add("driver", cand("580.95.05", "installed", true));
  m.add("driver", cand("550.54.14", "apt bookworm/non-free", false, "", "nvidia-driver", "550.54.14-1"));
  m.add("cudnn", cand("9.19.0", "installed", true, "13.0"));
  m.add("cudnn", cand("9.1.0", "apt", false, "12", "cudnn9-cuda-12", "9.1.0.70-1"));
  m.add("nccl", cand("2.28.9", "installed", true, "13"));
  m.add("deb.libssl3", cand("3.0.19-1~deb12u2", "installed", true, "", "libssl3", "3.0.19-1~deb12u2"));
  m.add("deb.libssl3", cand("3.0.22-1~deb12u2", "apt bookworm-security/main", false, "", "libssl3", "3.0.22-1~deb12u2"));
  m.add("python.numpy", cand("1.24.2", "installed", true));
  return m;
}

ResolveResult run(const std::string& text, CandidateSource& src, bool prefer_installed = false) {
  Constraints c = parse_constraints(text, "env.toml");
  ResolveOptions o;
  o.prefer_installed = prefer_installed;
  return resolve(c, src, o);
}

}  // namespace

TEST_CASE("constraints file: keys, schemes, lines") {
  Constraints c = parse_constraints(
      "python-interpreter = \"/usr/bin/python3\"\n"
      "cuda = \">=12.4,<14\"\n"
      "driver = \">=550\"\n"
      "deb.libopenblas-dev = \"*\"\n"
      "deb.libssl3 = \">=3.0.20\"\n"
      "[python]\n"
      "NumPy = \">=1.24\"\n",
      "env.toml");
  CHECK(c.python == "/usr/bin/python3");
  REQUIRE(c.entries.size() == 5);
  CHECK(c.entries[0].key == "cuda");
  CHECK(c.entries[0].line == 2);
  CHECK(c.entries[0].constraint.scheme == Scheme::numeric);
  CHECK(c.entries[1].key == "driver");
  CHECK(c.find("deb.libopenblas-dev")->constraint.any());
  CHECK(c.find("deb.libopenblas-dev")->constraint.scheme == Scheme::dpkg);
  CHECK(c.find("python.numpy")->constraint.scheme == Scheme::pep440);  // PEP 503 normalised
  CHECK(c.find("python.numpy")->line == 7);
  CHECK(c.find("deb.libssl3")->line == 5);
  CHECK(c.where(*c.find("deb.libssl3")) == "env.toml line 5");
}

TEST_CASE("constraints file: errors name the line and say what to write") {
  CHECK(constraint_error("driver = \">=550\"\ncuda = \">=12.4,<<14\"\n") ==
        "env.toml:2: cuda: invalid constraint \">=12.4,<<14\": '<<14': unknown operator '<<' (use == != >= <= > < ~=)");
  CHECK(constraint_error("\n\ncudaa = \"*\"\n").find("env.toml:3: unknown constraint 'cudaa' (known: cuda, driver") == 0);
  CHECK(constraint_error("driver = 550\n").find("env.toml:1: driver: expected a constraint string") == 0);
  CHECK(constraint_error("python.numpy = \">=1.x\"\n").find("env.toml:1: python.numpy: invalid constraint") == 0);
  CHECK(constraint_error("deb.LibFoo = \"*\"\n").find("env.toml:1: deb.LibFoo: not a Debian package name") == 0);
  CHECK(constraint_error("cuda = \"*\"\ncuda = \"*\"\n").find("env.toml:2") == 0);  // TOML duplicate key
  CHECK(constraint_error("deb = \"x\"\n").find("env.toml:1: deb takes package names") == 0);
}

TEST_CASE("resolve: newest admitted candidates, with the compatibility rules") {
  FixedCandidates m = machine();
  ResolveResult r = run("cuda = \">=12.4,<14\"\ndriver = \">=550\"\ncudnn = \">=9\"\nnccl = \"*\"\n"
                        "deb.libssl3 = \">=3.0.19\"\npython.numpy = \">=1.24\"\n",
                        m);
  REQUIRE_MESSAGE(r.ok, r.explanation);
  const Lock& l = r.lock;
  CHECK(l.kind == "resolved");
  CHECK(l.find("cuda.runtime")->version == "13.0");
  CHECK(l.find("cuda.runtime")->field_text("constraint") == ">=12.4,<14");
  CHECK(l.find("cuda.runtime")->field_text("origin") == "installed");
  CHECK(l.find("driver")->version == "580.95.05");
  CHECK(l.find("cuda.cudnn")->version == "9.19.0");
  CHECK(l.find("cuda.cudnn")->field_text("built-for-cuda") == "13.0");
  CHECK(l.find("cuda.nccl")->version == "2.28.9");
  CHECK(l.find("deb.libssl3")->version == "3.0.22-1~deb12u2");  // newest, as pip-tools picks
  CHECK(l.find("python.python3.packages.numpy")->version == "1.24.2");
  CHECK(l.find("deb.libssl3")->comment.find("env.toml line 5") != std::string::npos);
  CHECK(compute_content_hash(l) == l.header.content_hash);

  ResolveResult pi = run("deb.libssl3 = \">=3.0.19\"\n", m, true);
  REQUIRE(pi.ok);
  CHECK(pi.lock.find("deb.libssl3")->version == "3.0.19-1~deb12u2");  // --prefer-installed
}

TEST_CASE("resolve: a driver too old for CUDA 13 falls back to CUDA 12, or explains") {
  FixedCandidates m;
  m.add("cuda", cand("13.0", "installed", true));
  m.add("cuda", cand("12.4", "apt", false, "", "nvidia-cuda-toolkit", "12.4.131~12.4.1-1"));
  m.add("driver", cand("550.54.14", "installed", true));
  ResolveResult r = run("cuda = \">=12.4,<14\"\ndriver = \">=550\"\n", m);
  REQUIRE_MESSAGE(r.ok, r.explanation);
  CHECK(r.lock.find("cuda.runtime")->version == "12.4");
  CHECK(r.lock.find("cuda.runtime")->field_text("package") == "nvidia-cuda-toolkit");
  CHECK(r.lock.find("driver")->version == "550.54.14");

  ResolveResult bad = run("cuda = \">=13\"\ndriver = \">=550\"\n", m);
  CHECK_FALSE(bad.ok);
  const std::string& e = bad.explanation;
  INFO(e);
  CHECK(e.find("Could not resolve env.toml:") == 0);
  CHECK(e.find("Could not resolve cuda \">=13\" (from env.toml line 1) with the compatibility rules:") != std::string::npos);
  CHECK(e.find("cuda 13.0 (installed) -> rule: CUDA 13.x needs driver >= 580; no candidate of driver \">=550\" (from env.toml line 2) meets it:") !=
        std::string::npos);
  CHECK(e.find("driver 550.54.14 (installed) satisfies \">=550\" but is below 580") != std::string::npos);
}

TEST_CASE("resolve: cuDNN and NCCL must be built for the CUDA major") {
  FixedCandidates m;
  m.add("cuda", cand("13.0", "installed", true));
  m.add("cudnn", cand("9.1.0", "apt", false, "12", "cudnn9-cuda-12", "9.1.0.70-1"));
  ResolveResult r = run("cuda = \"*\"\ncudnn = \">=9\"\n", m);
  CHECK_FALSE(r.ok);
  CHECK(r.explanation.find("rule: cuDNN must be built for CUDA 13") != std::string::npos);
  CHECK(r.explanation.find("cudnn 9.1.0 (apt, package cudnn9-cuda-12, built for CUDA 12) satisfies \">=9\" but is built for CUDA 12") !=
        std::string::npos);
  m.add("cuda", cand("12.8", "apt", false));
  ResolveResult ok = run("cuda = \"*\"\ncudnn = \">=9\"\n", m);
  REQUIRE(ok.ok);
  CHECK(ok.lock.find("cuda.runtime")->version == "12.8");
  CHECK(ok.lock.find("cuda.cudnn")->version == "9.1.0");
}

TEST_CASE("resolve: unsatisfiable constraints list every candidate tried") {
  FixedCandidates m = machine();
  ResolveResult r = run("cuda = \">=14\"\npython.numpy = \">=2\"\ndriver = \"*\"\nnccl = \"<2\"\n", m);
  CHECK_FALSE(r.ok);
  const std::string& e = r.explanation;
  INFO(e);
  CHECK(e.find("Could not find a version that satisfies cuda \">=14\" (from env.toml line 1)\n"
               "  Tried 13.0 (installed): rejected by >=14\n"
               "  Tried 12.4 (apt bookworm/non-free, package nvidia-cuda-toolkit): rejected by >=14\n") != std::string::npos);
  CHECK(e.find("python.numpy \">=2\" (from env.toml line 2)\n  Tried 1.24.2 (installed): rejected by >=2") != std::string::npos);
  CHECK(e.find("nccl \"<2\" (from env.toml line 4)") != std::string::npos);
  FixedCandidates empty;
  ResolveResult none = run("driver = \">=550\"\n", empty);
  CHECK_FALSE(none.ok);
  CHECK(none.explanation.find("No candidates: no NVIDIA driver is installed") != std::string::npos);
  // A Python package: the message names it and the interpreter (it said "the package is not
  // installed in the interpreter").
  ResolveResult missing = run("python-interpreter = \"/opt/venv/bin/python\"\npython.flash_attn = \">=2\"\n", empty);
  CHECK_FALSE(missing.ok);
  INFO(missing.explanation);
  CHECK(missing.explanation.find("No candidates: the package flash-attn is not installed in /opt/venv/bin/python") !=
        std::string::npos);
}

TEST_CASE("resolve: PEP 440 pre-releases only when nothing else satisfies") {
  FixedCandidates m;
  m.add("python.foo", cand("2.0rc1", "installed", false));
  ResolveResult r = run("python.foo = \">=1.0\"\n", m);
  REQUIRE(r.ok);
  CHECK(r.lock.find("python.python3.packages.foo")->version == "2.0rc1");
  m.add("python.foo", cand("1.5", "installed", false));
  r = run("python.foo = \">=1.0\"\n", m);
  REQUIRE(r.ok);
  CHECK(r.lock.find("python.python3.packages.foo")->version == "1.5");
}

TEST_CASE("apt-cache policy parsing") {
  const char* text =
      "libssl3:\n"
      "  Installed: 3.0.19-1~deb12u2\n"
      "  Candidate: 3.0.22-1~deb12u2\n"
      "  Version table:\n"
      "     3.0.22-1~deb12u2 500\n"
      "        500 http://deb.debian.org/debian-security bookworm-security/main amd64 Packages\n"
      "     3.0.20-1~deb12u2 500\n"
      "        500 http://deb.debian.org/debian bookworm/main amd64 Packages\n"
      " *** 3.0.19-1~deb12u2 100\n"
      "        100 /var/lib/dpkg/status\n"
      "libnothing:\n"
      "  Installed: (none)\n"
      "  Candidate: (none)\n"
      "  Version table:\n";
  auto p = parse_apt_policy(text);
  REQUIRE(p.size() == 2);
  CHECK(p[0].package == "libssl3");
  CHECK(p[0].installed == "3.0.19-1~deb12u2");
  CHECK(p[0].candidate == "3.0.22-1~deb12u2");
  REQUIRE(p[0].versions.size() == 3);
  CHECK(p[0].versions[0].version == "3.0.22-1~deb12u2");
  CHECK_FALSE(p[0].versions[0].installed);
  CHECK(p[0].versions[0].origins == std::vector<std::string>{"bookworm-security/main"});
  CHECK(p[0].versions[2].installed);
  CHECK(p[1].installed.empty());
  CHECK(p[1].versions.empty());
}

TEST_CASE("resolve against this machine's apt (apt-cache policy through the real path)") {
  if (find_program("apt-cache").empty() || find_program("dpkg-query").empty()) {
    MESSAGE("no apt-cache here; skipped");
    return;
  }
  auto installed = run_process({"dpkg-query", "-W", "-f=${Version}", "libopenblas-dev"});
  if (!installed.ok() || installed.out.empty()) {
    MESSAGE("libopenblas-dev not installed; skipped");
    return;
  }
  // What apt offers, read independently from apt-cache madison ("pkg | version | source").
  auto madison = run_process({"apt-cache", "madison", "libopenblas-dev"});
  std::vector<std::string> offered{installed.out};
  std::istringstream is(madison.out);
  std::string line;
  while (std::getline(is, line)) {
    size_t a = line.find('|'), b = line.find('|', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    std::string v = line.substr(a + 1, b - a - 1);
    v.erase(0, v.find_first_not_of(' '));
    v.erase(v.find_last_not_of(' ') + 1);
    offered.push_back(v);
  }
  std::string newest = offered[0];
  for (const auto& v : offered)
    if (dpkg_compare(v, newest) > 0) newest = v;

  SystemCandidates sys(SystemCandidateOptions{20, "python3"});
  ResolveResult r = run("deb.libopenblas-dev = \"*\"\n", sys);
  REQUIRE_MESSAGE(r.ok, r.explanation);
  CHECK(r.lock.find("deb.libopenblas-dev")->version == newest);

  ResolveResult bad = run("deb.libopenblas-dev = \">=999\"\n", sys);
  CHECK_FALSE(bad.ok);
  CHECK(bad.explanation.find("Tried " + installed.out + " (installed") != std::string::npos);
  CHECK(bad.explanation.find("rejected by >=999") != std::string::npos);

  ResolveResult unknown = run("deb.dl-no-such-package-xyz = \"*\"\n", sys);
  CHECK_FALSE(unknown.ok);
  CHECK(unknown.explanation.find("apt knows no package dl-no-such-package-xyz") != std::string::npos);
}
